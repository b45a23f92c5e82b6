"""The wheel installs one namespace: ``stretch`` (with ``stretch.api``, ``stretch.controller``)
and ``scalegate``, and nothing named ``api`` or ``controller`` at the top of site-packages."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_has_only_stretch_and_scalegate_at_its_top(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(tmp_path)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("stretch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"stretch", "scalegate"}
    for package in ("api", "controller"):
        modules = {n for n in names if n.startswith(f"stretch/{package}/")}
        expected = {f"stretch/{package}/{p.name}" for p in (ROOT / package).glob("*.py")}
        assert expected and expected <= modules
        assert f"stretch/{package}/py.typed" in names
