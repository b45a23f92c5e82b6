"""``stretch pipeline`` against ``stretch replay`` on the same generated files."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stretch import generate
from stretch.cli import main
from stretch.client import StretchClient
from stretch.spark.pipeline import ROWS_PER_TRIGGER, PipelineConfig, prepare, read_output
from tests.spark.conftest import TOKEN

pytestmark = pytest.mark.spark


def split_at_ts(table: pa.Table, directory: Path, files: int) -> None:
    """``table`` as ``files`` Parquet files cut between timestamps, oldest modified first."""
    directory.mkdir(parents=True)
    ts = table.column("ts").to_numpy()
    cuts = [0, *(int(np.searchsorted(ts, ts[len(ts) * k // files])) for k in range(1, files))]
    for k, (lo, hi) in enumerate(zip(cuts, [*cuts[1:], len(ts)], strict=True)):
        path = directory / f"part-{k:03d}.parquet"
        pq.write_table(table.slice(lo, hi - lo), path)
        os.utime(path, (1_000_000 + k, 1_000_000 + k))


def trades_and_replay(tmp_path: Path, seed: int) -> Path:
    """Trades in two Parquet files under ``in/``, replay's output, a token file (its path)."""
    (trades,) = generate.hedge(1500, 50.0, seed)
    pq.write_table(trades, tmp_path / "trades.parquet")
    split_at_ts(trades, tmp_path / "in", files=2)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    assert main(["replay", "hedge", "--input", str(tmp_path / "trades.parquet"),
                 "--output", str(tmp_path / "replay.parquet")]) == 0  # fmt: skip
    return token_file


def test_pipeline_equals_replay_and_a_rerun_adds_nothing(
    spark: object,
    sidecar: str,
    client: StretchClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token_file = trades_and_replay(tmp_path, seed=7)
    assert main(["pipeline", "hedge", "--input", str(tmp_path / "in"),
                 "--output", str(tmp_path / "out"), "--url", sidecar,
                 "--token-file", str(token_file), "--parallelism", "2",
                 "--trigger-rows", "20000"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "done: 1500 rows in" in printed  # hedge's one trade stream
    assert "over 1 micro-batch," in printed  # both files, far below ROWS_PER_TRIGGER rows
    expected = pq.read_table(tmp_path / "replay.parquet")
    out = read_output(spark, tmp_path / "out")  # type: ignore[arg-type]
    assert expected.num_rows > 20_000
    assert out.cast(expected.schema).equals(expected)

    # The sidecar lost the operator (as an embedded one does in a crash): a rerun with the
    # same checkpoint creates it again, replays the input and adds no row to the output.
    client.delete_operator("pipeline-hedge")
    assert main(["pipeline", "hedge", "--input", str(tmp_path / "in"),
                 "--output", str(tmp_path / "out"), "--url", sidecar,
                 "--token-file", str(token_file)]) == 0  # fmt: skip
    assert "created 'pipeline-hedge'" in capsys.readouterr().out
    again = read_output(spark, tmp_path / "out")  # type: ignore[arg-type]
    assert again.cast(expected.schema).equals(expected)

    # A file the sink wrote but never committed (a micro-batch killed before its commit)
    # is not output: the sink's log leaves it out, and so does read_output.
    written = max((tmp_path / "out").glob("part-*.parquet"), key=lambda f: f.stat().st_size)
    shutil.copy(written, tmp_path / "out" / "part-99999-stray.parquet")
    stray = read_output(spark, tmp_path / "out")  # type: ignore[arg-type]
    assert stray.cast(expected.schema).equals(expected)


def test_pipeline_under_an_autoscale_policy_equals_replay(
    spark: object,
    sidecar: str,
    client: StretchClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token_file = trades_and_replay(tmp_path, seed=11)
    assert main(["pipeline", "hedge", "--input", str(tmp_path / "in"),
                 "--output", str(tmp_path / "out"), "--url", sidecar, "--name", "auto",
                 "--token-file", str(token_file), "--autoscale", "model",
                 "--max-parallelism", "3"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "reconfigurations: " in printed
    state = client.autoscale("auto")
    assert (state["policy"], state["max_parallelism"]) == ("model", 3)
    assert state["decisions"] >= 1
    causes = {r["cause"] for r in client.reconfigurations("auto")}
    assert causes <= {"autoscale"}
    out = read_output(spark, tmp_path / "out")  # type: ignore[arg-type]
    expected = pq.read_table(tmp_path / "replay.parquet")
    assert out.cast(expected.schema).equals(expected)


def test_the_writers_take_no_more_rows_than_the_operator_does(
    sidecar: str, client: StretchClient, tmp_path: Path
) -> None:
    """Whole files up to ``ROWS_PER_TRIGGER`` rows, or the operator's largest batch if less."""
    trades_and_replay(tmp_path, seed=3)
    config = PipelineConfig(operator="hedge", inputs=[tmp_path / "in"], output=tmp_path / "out",
                            checkpoint=tmp_path / "ck", url=sidecar, token=TOKEN,
                            name="small-batches")  # fmt: skip
    client.create_operator("small-batches", "hedge", {}, capacity=1500)
    largest = client.status("small-batches")["max_batch_rows"]
    assert largest == 750  # hedge feeds its trades to both sides of the join
    prepared = prepare(config)
    assert (prepared.created, prepared.rows_per_trigger) == (False, largest)
    fixed = prepare(dataclasses.replace(config, files_per_trigger=3))
    assert fixed.rows_per_trigger is None  # --files-per-trigger: files, not rows
    client.delete_operator("small-batches")
    assert prepare(config).rows_per_trigger == ROWS_PER_TRIGGER  # created with room for more
    client.delete_operator("small-batches")


def test_the_help_quotes_the_rows_per_micro_batch(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["pipeline", "--help"])
    assert f"files as hold {ROWS_PER_TRIGGER:,} rows" in " ".join(capsys.readouterr().out.split())
