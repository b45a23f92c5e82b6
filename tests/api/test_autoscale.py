"""PUT/GET/DELETE .../autoscale, autoscale at creation, and an autoscaled run equal to SN."""

from __future__ import annotations

from stretch import build, generate, run_sn
from stretch.api.codec import ARROW_STREAM, encode_arrow
from tests.api.conftest import TestClient, auth
from tests.waiting import wait_until

SCALEJOIN = {"name": "j", "operator": "scalejoin", "params": {"ws": 500}, "max_parallelism": 4}


def test_put_get_delete_autoscale(http: TestClient) -> None:
    assert http.post("/v1/operators", json=SCALEJOIN, headers=auth()).status_code == 201
    missing = http.get("/v1/operators/j/autoscale", headers=auth())
    assert missing.status_code == 404 and "no autoscaler" in missing.json()["detail"]
    put = http.put("/v1/operators/j/autoscale", json={"policy": "threshold"}, headers=auth())
    assert put.status_code == 200, put.text
    state = put.json()
    assert (state["upper"], state["target"], state["lower"]) == (0.9, 0.7, 0.45)
    assert (state["min_parallelism"], state["max_parallelism"]) == (1, 4)
    model = {"policy": "model", "period_ms": 50, "max_parallelism": 3}
    state = http.put("/v1/operators/j/autoscale", json=model, headers=auth()).json()
    assert (state["policy"], state["upper"], state["lower"]) == ("model", 0.8, 0.7)
    assert state["max_parallelism"] == 3
    assert wait_until(
        lambda: http.get("/v1/operators/j/autoscale", headers=auth()).json()["decisions"] > 0
    )
    last = http.get("/v1/operators/j/autoscale", headers=auth()).json()["last_decision"]
    assert last["kind"] == "hold" and "load" in last["reason"]  # idle at m = 1: nothing to do
    assert http.delete("/v1/operators/j/autoscale", headers=auth()).status_code == 204
    assert http.get("/v1/operators/j/autoscale", headers=auth()).status_code == 404
    assert http.delete("/v1/operators/j/autoscale", headers=auth()).status_code == 204


def test_bad_autoscale_requests_name_the_fault(http: TestClient) -> None:
    assert http.post("/v1/operators", json=SCALEJOIN, headers=auth()).status_code == 201
    cases = [
        ({"policy": "threshold", "max_parallelism": 9}, "the pool size"),
        ({"policy": "threshold", "lower": 0.8, "upper": 0.5}, "lower <= target <= upper"),
        ({"policy": "magic"}, "policy"),
        ({"policy": "model", "period_ms": 1}, "period_ms"),
        ({"policy": "model", "speed": 2}, "speed"),
    ]
    for body, message in cases:
        answer = http.put("/v1/operators/j/autoscale", json=body, headers=auth())
        assert answer.status_code == 422, body
        assert message in answer.text, (body, answer.text)
    assert http.get("/v1/operators/j/autoscale", headers=auth()).status_code == 404
    assert http.put("/v1/operators/j/autoscale", json={"policy": "model"}).status_code == 401
    unknown = http.put("/v1/operators/x/autoscale", json={"policy": "model"}, headers=auth())
    assert unknown.status_code == 404


def test_create_with_autoscale(http: TestClient) -> None:
    body = {**SCALEJOIN, "autoscale": {"policy": "model", "min_parallelism": 2}}
    created = http.post("/v1/operators", json=body, headers=auth())
    assert created.status_code == 201, created.text
    state = http.get("/v1/operators/j/autoscale", headers=auth()).json()
    assert (state["policy"], state["min_parallelism"]) == ("model", 2)
    bad = {**SCALEJOIN, "name": "k", "autoscale": {"policy": "model", "max_parallelism": 5}}
    refused = http.post("/v1/operators", json=bad, headers=auth())
    assert refused.status_code == 422 and "the pool size" in refused.text
    assert http.get("/v1/operators/k", headers=auth()).status_code == 404


def test_an_autoscaled_operator_scales_up_and_down_and_equals_sn(http: TestClient) -> None:
    """Thresholds of a few percent make any processing an overload and idling an underload."""
    policy = {"policy": "threshold", "upper": 0.02, "target": 0.01, "lower": 0.005}
    body = {**SCALEJOIN, "autoscale": {**policy, "period_ms": 20}}
    assert http.post("/v1/operators", json=body, headers=auth()).status_code == 201
    left, right = generate.scalejoin(1_500, 1_000.0, 4)

    def reconfigurations() -> list[dict[str, object]]:
        answer = http.get("/v1/operators/j/reconfigurations", headers=auth())
        entries: list[dict[str, object]] = answer.json()
        return entries

    for start in range(0, 1_500, 100):
        for source, table in enumerate((left, right)):
            answer = http.post(
                f"/v1/operators/j/sources/{source}/batches?batch_id={start}",
                content=encode_arrow(table.slice(start, 100)),
                headers={**auth(), "Content-Type": ARROW_STREAM},
            )
            assert answer.status_code == 202, answer.text
    assert wait_until(lambda: any(r["to"] > r["from"] for r in reconfigurations()))
    # The input has been sent: once it is processed, the load drops to 0.
    assert wait_until(lambda: reconfigurations()[-1]["to"] == 1)
    entries = reconfigurations()
    assert all(e["cause"] == "autoscale" and e["reason"] for e in entries)
    up = next(e for e in entries if e["to"] > e["from"])
    down = entries[-1]
    assert "> 2%" in str(up["reason"]) and "< 0.5%" in str(down["reason"])
    for source in (0, 1):
        closed = http.post(f"/v1/operators/j/sources/{source}/close", headers=auth())
        assert closed.status_code == 202
    assert wait_until(
        lambda: http.get("/v1/operators/j", headers=auth()).json()["output"]["finished"]
    )
    rows = http.get("/v1/operators/j/output?max_rows=100000", headers=auth()).json()["rows"]
    expected = run_sn(build("scalejoin", {"ws": 500}), [left, right]).to_pylist()
    assert rows == expected
