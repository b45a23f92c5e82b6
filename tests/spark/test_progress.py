"""stretch pipeline's progress lines: what they count, and the final line is not the last tick's
again."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any, cast

from stretch.spark.pipeline import PipelineConfig, _Progress


def _status(rows_out: int) -> dict[str, Any]:
    return {"sources": [{"tuples_in": 10}], "output": {"end_offset": rows_out}, "parallelism": 2}


def test_the_final_line_is_printed_only_if_it_says_something_new() -> None:
    query = SimpleNamespace(lastProgress={"batchId": 3})
    config = cast(PipelineConfig, SimpleNamespace())
    out = io.StringIO()
    progress = _Progress(config, [cast(Any, query)], cast(Any, query), out, started=0.0)
    progress.line(_status(5))
    progress.line(_status(5), if_new=True)  # what the last tick printed: not again
    assert out.getvalue().count("\n") == 1
    said = "in: 10 rows in 4 micro-batches; out: 5 rows, read in 4 micro-batches; parallelism 2"
    assert said in out.getvalue()
    progress.line(_status(7), if_new=True)
    assert out.getvalue().count("\n") == 2


def test_a_sharded_operator_shows_each_shards_parallelism() -> None:
    query = SimpleNamespace(lastProgress={"batchId": 0})
    config = cast(PipelineConfig, SimpleNamespace())
    out = io.StringIO()
    progress = _Progress(config, [cast(Any, query)], cast(Any, query), out, started=0.0)
    status = _status(5) | {"shards": [{"parallelism": 1}, {"parallelism": 1}]}
    progress.line(status)
    assert out.getvalue().endswith("; parallelism 2 over 2 shards (1, 1)\n")
