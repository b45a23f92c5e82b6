"""A checkpoint belongs to one ``stretch pipeline`` job, and a new job keeps off others' output.

Two jobs sharing the default checkpoint (inside ``--output``) continued each other's
queries, and a new job writing into another job's output had its micro-batches skipped by
Spark's file sink: both exited 0 with rows missing or doubled. No Spark is started here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stretch.errors import InputError
from stretch.spark.pipeline import JOB, PipelineConfig, _continued, claim


def job(**changes: Any) -> dict[str, Any]:
    """A job as ``stretch pipeline`` describes it, with ``changes``."""
    return {
        "operator": "hedge",
        "name": "pipeline-hedge",
        "params": {},
        "output": "/data/pairs",
        "shards": 1,
        **changes,
    }


def test_a_new_checkpoint_is_claimed_once(tmp_path: Path) -> None:
    assert claim(tmp_path, job(), tmp_path / "out")
    assert json.loads((tmp_path / JOB).read_text()) == job()
    assert not claim(tmp_path, job(), tmp_path / "out")  # a rerun of the same job


def test_another_job_is_refused_once_a_query_ran(tmp_path: Path) -> None:
    claim(tmp_path, job(), tmp_path / "out")
    (tmp_path / "out").mkdir()  # the reading query's checkpoint
    with pytest.raises(InputError, match="belongs to another job: operator 'hedge'"):
        claim(tmp_path, job(operator="scalejoin", name="pipeline-scalejoin"), tmp_path / "o")
    with pytest.raises(InputError, match="shards 1 \\(this run: 2\\)"):
        claim(tmp_path, job(shards=2), tmp_path / "o")


def test_a_job_refused_before_spark_started_may_change(tmp_path: Path) -> None:
    claim(tmp_path, job(params={"ws": "-1"}), tmp_path / "out")  # no query ran
    assert not claim(tmp_path, job(), tmp_path / "out")
    assert json.loads((tmp_path / JOB).read_text()) == job()


def test_a_new_job_keeps_off_another_jobs_output(tmp_path: Path) -> None:
    output = tmp_path / "pairs"
    (output / "_spark_metadata").mkdir(parents=True)
    with pytest.raises(InputError, match="holds another job's output"):
        claim(tmp_path / "new-checkpoint", job(), output)


def test_a_checkpoint_from_before_the_claim_is_the_jobs(tmp_path: Path) -> None:
    (tmp_path / "in0").mkdir()
    output = tmp_path / "pairs"
    (output / "_spark_metadata").mkdir(parents=True)  # its own output
    assert not claim(tmp_path, job(), output)
    assert (tmp_path / JOB).is_file()


def test_a_new_checkpoint_does_not_continue_an_operator_on_the_sidecar(tmp_path: Path) -> None:
    config = PipelineConfig(
        operator="hedge",
        inputs=[tmp_path],
        output=tmp_path / "pairs",
        checkpoint=tmp_path,
        url="http://127.0.0.1:1",
        name="pipeline-hedge",
        new_checkpoint=True,
    )
    status = {"operator": "hedge", "params": {}, "sources": [{"index": 0, "closed": False}]}
    with pytest.raises(InputError, match="fed by another job"):
        _continued(config, status)
