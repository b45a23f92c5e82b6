"""The complete example of docs/spark.md runs and gives ``run_sn``'s output."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from stretch import build, run_sn
from stretch.spark.pipeline import read_output

pytestmark = pytest.mark.spark

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"


def test_the_example_of_docs_spark_md_runs(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert blocks, "docs/spark.md has no python example"
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "example"})  # noqa: S102
    work = tmp_path / "stretch-example"
    tables = [pq.read_table(work / name) for name in ("left", "right")]
    expected = run_sn(build("scalejoin", {"ws": 60000}), tables)
    assert expected.num_rows
    out = read_output(spark, work / "pairs")
    assert out.cast(expected.schema).equals(expected)
