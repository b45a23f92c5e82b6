"""Columnar batches and schemas: Arrow round trips, dictionary codes, conform's errors."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stretch.errors import SchemaError
from stretch.model.batch import Batch, StringDictionary
from stretch.model.schema import Schema, conform

SCHEMA = Schema.of(word="str", n="int", x="float", ok="bool")


@given(
    st.lists(
        st.tuples(
            st.integers(-(2**40), 2**40),
            st.sampled_from(["a", "b", "é", ""]),
            st.integers(-5, 5),
            st.floats(allow_nan=False),
            st.booleans(),
        ),
        max_size=30,
    )
)
def test_arrow_round_trip(rows: list[tuple[int, str, int, float, bool]]) -> None:
    table = SCHEMA.table([r[0] for r in rows], [r[1:] for r in rows])
    batch = Batch.from_arrow(table, SCHEMA)
    assert batch.columns["word"].dtype == np.int32  # dictionary-encoded for kernels
    assert batch.to_arrow().equals(table)
    assert batch.rows() == [dict(zip(SCHEMA.names, r[1:], strict=True)) for r in rows]


def test_dictionary_codes_follow_first_appearance() -> None:
    dictionary = StringDictionary()
    assert dictionary.encode(["b", "a", "b"]).tolist() == [0, 1, 0]
    assert dictionary.encode(["a", "c"]).tolist() == [1, 2]
    assert dictionary.decode(np.array([2, 0], dtype=np.int32)) == ["c", "b"]


@given(
    st.lists(st.lists(st.text(max_size=12) | st.sampled_from(["a", "", "é", "\U0001f600"]))),
    st.integers(0, 3),
)
def test_dictionary_matches_a_dict_over_chunks_and_slices(
    batches: list[list[str]], cut: int
) -> None:
    """Codes as a plain dict hands them out, whatever the chunks and slice offsets."""
    dictionary, model = StringDictionary(), {}
    for values in batches:
        array = pa.array(["skipped"] * cut + values, pa.string()).slice(cut)
        half = len(values) // 2
        column = pa.chunked_array([array[:half], array[half:]], pa.string())
        expected = [model.setdefault(v, len(model)) for v in values]
        codes = dictionary.encode(column)
        assert codes.dtype == np.int32
        assert codes.tolist() == expected
        assert dictionary.decode(codes) == values
        assert dictionary.decode_arrow(codes).equals(pa.array(values, pa.string()))
    assert len(dictionary) == len(model)


def test_dictionary_grows_past_its_first_arena_and_index() -> None:
    dictionary = StringDictionary()
    first = [f"{i:06d}" * 20 for i in range(5000)]  # 600 KB: the arena and index regrow
    codes = dictionary.encode(first)
    assert codes.tolist() == list(range(5000))
    again = dictionary.encode(first[::-1] + ["new"])
    assert again.tolist() == [*range(4999, -1, -1), 5000]
    assert dictionary.decode(again[:3]) == first[::-1][:3]
    assert dictionary.nbytes >= 600_000


@given(
    st.lists(
        st.tuples(
            st.lists(st.text(max_size=6) | st.sampled_from(["a", "é", "x" * 300])),
            st.sets(st.integers(0, 40)),
        ),
        max_size=12,
    )
)
def test_compaction_keeps_the_codes_in_use_and_reuses_the_others(
    steps: list[tuple[list[str], set[int]]],
) -> None:
    """Against a dict: kept strings keep their codes, dropped codes go to new strings."""
    dictionary, model = StringDictionary(), {}
    for values, kept in steps:
        codes = dictionary.encode(pa.array(values, pa.string())).tolist()
        for value, code in zip(values, codes, strict=True):
            if value not in model:
                assert code not in model.values()  # a code names one string at a time
                model[value] = code
            assert model[value] == code
        assert dictionary.decode(np.array(codes, dtype=np.int32)) == values
        in_use = [np.array(sorted(kept), dtype=np.int32)]
        gone = dictionary.compact(c[c < dictionary._table.numbers] for c in in_use)
        dropped = [v for v, c in model.items() if c not in kept]
        assert gone == len(dropped)
        for value in dropped:
            del model[value]
        assert len(dictionary) == len(model)
        strings = list(model)
        held = np.array([model[v] for v in strings], dtype=np.int32)
        assert dictionary.decode(held) == strings
    assert dictionary.compactions == len(steps)


def test_compaction_packs_the_arena_and_hands_out_the_lowest_free_code() -> None:
    dictionary = StringDictionary()
    dictionary.encode([f"{i:04d}" * 100 for i in range(2000)])  # 800 KB of strings
    grown = dictionary.nbytes
    dictionary.compact([np.array([3, 1500], dtype=np.int32)])
    assert len(dictionary) == 2
    assert dictionary.nbytes < grown // 4
    assert dictionary.decode(np.array([1500, 3], dtype=np.int32)) == ["1500" * 100, "0003" * 100]
    assert dictionary.encode(["new", "0003" * 100, "newer"]).tolist() == [0, 3, 1]


def test_conform_casts_ints_to_floats_and_drops_extra_columns() -> None:
    table = pa.table({"ts": [1], "extra": ["z"], "ok": [True], "x": [3], "n": [2], "word": ["w"]})
    out = conform(table, SCHEMA, "t.csv")
    assert out.column_names == ["ts", "word", "n", "x", "ok"]
    assert out.column("x").to_pylist() == [3.0]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (
            {"ts": [1, 2], "word": ["a", "b"], "n": [1, 2], "x": [1.0, 2.0]},
            "t.csv: missing column 'ok'",
        ),
        (
            {"ts": [1, 2], "word": ["a", "b"], "n": [1, None], "x": [1.0, 2.0], "ok": [True, True]},
            "t.csv: row 2, column 'n': missing value",
        ),
        (
            {
                "ts": [1, 2],
                "word": ["a", "b"],
                "n": [1.5, 2.0],
                "x": [1.0, 2.0],
                "ok": [True, True],
            },
            "t.csv: row 1, column 'n': expected int",
        ),
        (
            {
                "ts": ["1", "x"],
                "word": ["a", "b"],
                "n": [1, 2],
                "x": [1.0, 2.0],
                "ok": [True, True],
            },
            "t.csv: row 2, column 'ts': expected",
        ),
    ],
)
def test_conform_names_file_row_and_column(columns: dict[str, list[object]], message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        conform(pa.table(columns), SCHEMA, "t.csv")


def test_a_timestamp_beyond_pythons_years_is_named_not_raised() -> None:
    """A value Python cannot hold (year 17036) is shown as Arrow prints it: a 4xx, not a 500."""
    far = pa.array([2**62, 5], pa.timestamp("us", tz="UTC"))
    table = pa.table(
        {"ts": [1, 2], "word": ["a", "b"], "n": far, "x": [1.0, 2.0], "ok": [True] * 2}
    )
    with pytest.raises(SchemaError, match=r"row 1, column 'n': expected int, got .*17036-07-06"):
        conform(table, SCHEMA, "t.csv")
