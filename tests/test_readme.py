"""The README's Python examples run as written (docs that match the code)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from stretch.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})  # noqa: S102
    capsys.readouterr()


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 2


COMMANDS = re.findall(
    r"^stretch (?:generate|replay) .*$",
    README.read_text(encoding="utf-8").split("## The `stretch` command", 1)[1].split("```", 2)[1],
    re.MULTILINE,
)


def test_readme_commands_run_and_generate_no_join_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shell examples of "The `stretch` command" run as written, in order.

    Each ``generate`` prints no warning: the join its stream feeds is estimated under
    the bounds that stretch.join_estimate gives for a run of seconds.
    """
    assert [line.split()[1] for line in COMMANDS].count("generate") == 3
    monkeypatch.chdir(tmp_path)
    for line in COMMANDS:
        assert main(shlex.split(line)[1:]) == 0, line
        assert "warning" not in capsys.readouterr().err, line
