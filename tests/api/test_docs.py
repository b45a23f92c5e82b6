"""docs/api.md matches the service: its route table, its metrics table, its Python names."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from stretch.api import create_app
from tests.api.conftest import TOKEN, auth

API_MD = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    return API_MD.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _first_cells(section: str) -> list[str]:
    return [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]


def _template(path: str) -> str:
    return re.sub(r"\{\w+\}", "{}", path.split("?", 1)[0])


def test_the_route_table_lists_every_route() -> None:
    documented = {
        (method.lower(), _template(path))
        for cell in _first_cells(_section("Routes"))
        for method, path in re.findall(r"`(GET|POST|PUT|DELETE) ([^`]+)`", cell)
    }
    with TestClient(create_app(TOKEN)) as http:
        spec = http.get("/openapi.json").json()
    served = {(method, _template(path)) for path, item in spec["paths"].items() for method in item}
    assert documented == served


def test_the_metrics_table_lists_what_metrics_exports() -> None:
    documented = {re.findall(r"`(\w+)`", cell)[0] for cell in _first_cells(_section("Metrics"))}
    with TestClient(create_app(TOKEN)) as http:
        text = http.get("/metrics", headers=auth()).text
    exported = {
        line.split()[2]
        for line in text.splitlines()
        if line.startswith("# TYPE ") and not line.split()[2].endswith("_created")
    }
    assert documented == exported


@pytest.mark.parametrize("name", sorted(set(re.findall(r"`(stretch(?:\.\w+)+)", API_MD))))
def test_the_python_names_it_gives_exist_in_the_package(name: str) -> None:
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            found = getattr(found, attribute)
        return
    pytest.fail(f"{name} names nothing")


def test_it_names_no_module_outside_the_package() -> None:
    assert re.findall(r"`api\.\w+", API_MD) == []
