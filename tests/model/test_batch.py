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
