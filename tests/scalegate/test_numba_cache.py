"""Numba's cache of a package is dropped when a cached module or what it imports changes."""

from __future__ import annotations

from pathlib import Path

from scalegate.numba_cache import STAMP, drop_stale, mark_warm, warmed

KERNEL = """
from numba import njit

from pkg.helpers import WIDTH


@njit(nogil=True, cache=True)
def within(a, b):
    return abs(a - b) <= WIDTH
"""


def package(root: Path) -> Path:
    """A package ``pkg`` with one cached kernel, the module it imports, and one unrelated."""
    pkg = root / "pkg"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "kernel.py").write_text(KERNEL)
    (pkg / "helpers.py").write_text("WIDTH = 10\n")
    (pkg / "cli.py").write_text("print('hello')\n")
    return pkg


def cache_files(pkg: Path) -> list[str]:
    """Numba's files for ``kernel.within``, as Numba names them."""
    names = ["kernel.within-7.py311.nbi", "kernel.within-7.py311.1.nbc"]
    for name in names:
        (pkg / "__pycache__" / name).write_bytes(b"compiled")
    return names


def test_a_change_to_what_a_kernel_imports_drops_its_cache(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    assert drop_stale(pkg)  # no stamp yet
    names = cache_files(pkg)
    assert not drop_stale(pkg)
    (pkg / "cli.py").write_text("print('changed')\n")  # no kernel reads it
    assert not drop_stale(pkg)
    assert all((pkg / "__pycache__" / name).exists() for name in names)
    (pkg / "helpers.py").write_text("WIDTH = 12\n")  # inlined into the cached kernel
    assert drop_stale(pkg)
    assert not any((pkg / "__pycache__" / name).exists() for name in names)
    assert (pkg / "__pycache__" / STAMP).is_file()
    assert not drop_stale(pkg)


def test_modules_generated_under_pycache_are_not_the_packages(tmp_path: Path) -> None:
    """A user's band join is generated there with its own cache (kernels/_predicate_join)."""
    pkg = package(tmp_path)
    assert drop_stale(pkg)
    names = cache_files(pkg)
    generated = pkg / "__pycache__" / "predicates"
    generated.mkdir()
    (generated / "band_join_0123.py").write_text(KERNEL)
    assert not drop_stale(pkg)
    assert all((pkg / "__pycache__" / name).exists() for name in names)


def test_a_cache_that_cannot_be_written_is_left_alone(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    (pkg / "__pycache__").rmdir()
    (pkg / "__pycache__").write_text("not a directory")  # nowhere to record the stamp
    assert not drop_stale(pkg)


def test_warmed_holds_until_the_cache_is_dropped(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    assert warmed(pkg) is None  # no digest recorded yet
    drop_stale(pkg)
    assert warmed(pkg) is False  # never warmed
    mark_warm(pkg)
    assert warmed(pkg) is True
    assert not drop_stale(pkg)
    assert warmed(pkg) is True
    (pkg / "helpers.py").write_text("WIDTH = 12\n")
    assert drop_stale(pkg)
    assert warmed(pkg) is False  # compiled for the code before
