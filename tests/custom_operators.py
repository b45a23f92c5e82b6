"""A user operator written as Python functions, for ``stretch serve --operators``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import stretch
from stretch.model.oplus import OPlus, Windows, WindowType

READINGS = stretch.Schema.of(sensor="str", value="float")


def _mean(w: Windows) -> list[tuple[Any, ...]]:
    values = [t["value"] for t in w.states[0]]
    return [(w.key, sum(values) / len(values), len(values))]


def sensor_mean(params: Mapping[str, Any]) -> OPlus:
    """The mean value per sensor over a sliding window (the generic path)."""
    return OPlus(
        "sensor_mean",
        wa_ms=50,
        ws_ms=200,
        inputs=(READINGS,),
        multi_key=lambda t: [t["sensor"]],
        window_type=WindowType.SINGLE,
        output=stretch.Schema.of(sensor="str", mean="float", n="int"),
        output_fn=_mean,
    )


if "sensor_mean" not in stretch.operators.catalog.CATALOG:
    stretch.register("sensor_mean", sensor_mean)
