"""A user band join's entry points are cached on disk, under a digest of all they read.

``stretch.operators.kernels._predicate_join`` writes one module per (predicate, columns
read) and compiles it with Numba's disk cache, so a later process loads it instead of
compiling for seconds. Numba keys its cache to that file alone, so the file's name must
change whenever anything the compiled code holds changes: these tests change each kind
of thing a predicate reads and check the digest, then run a join compiled and loaded.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numba
import pytest
from numba.core.dispatcher import Dispatcher

import stretch
from stretch.generate import scalejoin
from stretch.operators.kernels import _predicate_join
from stretch.operators.kernels._predicate_join import _digest, _generate

LEFT = stretch.Schema.of(x="int", y="float")
RIGHT = stretch.Schema.of(a="int", b="float", c="float", d="bool")

SOURCE = """
from math import fabs

import numba
import numpy as np

BAND = {band}
LIMIT = np.float64(0.0)
absolute = np.absolute
WEIGHTS = np.array({weights})


class Box:
    pass


BOX = Box()


@numba.njit
def helper(v):
    return v * {factor}


@numba.njit
def near(x, y, a, b):
    near_x = absolute(x - a) <= BAND
    return near_x & (abs(helper(y) - b) <= WEIGHTS[0]) & (fabs(b) >= LIMIT) & (np.abs(y) >= 0)


@numba.njit
def boxed(x, y, a, b):
    return abs(x - a) <= BAND and BOX is not None
"""


def _module(folder: Path, name: str, **values: object) -> ModuleType:
    """A module file of its own made from ``SOURCE`` with ``values`` filled in."""
    fill = {"band": 3, "weights": [4.5], "factor": 1.0} | values
    path = folder / f"{name}.py"
    path.write_text(SOURCE.format(**fill))
    spec = importlib.util.spec_from_file_location(f"predicate_cache_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # importable by name, as a user's modules are
    spec.loader.exec_module(module)
    return module


def _digest_of(tmp_path: Path, name: str, **values: object) -> str | None:
    predicate: Dispatcher = _module(tmp_path, name, **values).near
    return _digest(predicate, 2, 2)


def test_the_digest_changes_with_everything_the_predicate_reads(tmp_path: Path) -> None:
    same = _digest_of(tmp_path, "first")
    assert same is not None
    assert _digest_of(tmp_path, "second") == same  # the same code elsewhere: one cache
    changed = [
        _digest_of(tmp_path, "band", band=4),  # a global number
        _digest_of(tmp_path, "weights", weights=[4.0]),  # a global array
        _digest_of(tmp_path, "helper", factor=2.0),  # a jitted function it calls
    ]
    assert None not in changed
    assert len({same, *changed}) == 4
    predicate = _module(tmp_path, "columns").near
    assert _digest(predicate, 1, 3) != same  # the columns read, hence the adapter


def test_equal_predicates_of_other_names_share_one_module(tmp_path: Path) -> None:
    module = _module(tmp_path, "named")
    near = module.near.py_func
    copy = types.FunctionType(near.__code__, near.__globals__, "renamed", near.__defaults__)
    copy.__qualname__ = "renamed"
    renamed = numba.njit(copy)
    folder = tmp_path / "cache"
    first, _ = _generate(module.near, 2, 2, folder)
    second, _ = _generate(renamed, 2, 2, folder)
    assert first.py_func.__code__.co_filename == second.py_func.__code__.co_filename
    assert not first.py_func.__code__.co_filename.startswith("<")


def test_a_predicate_reading_an_object_is_compiled_in_memory(tmp_path: Path) -> None:
    predicate = _module(tmp_path, "objects").boxed
    assert _digest(predicate, 2, 2) is None
    folder = tmp_path / "cache"
    run, _ = _generate(predicate, 2, 2, folder)
    assert run.py_func.__code__.co_filename.startswith("<")
    assert not list(folder.glob("*.py"))


def test_a_predicate_that_cannot_be_imported_by_name_is_compiled_in_memory() -> None:
    """Code run by exec in a namespace of its own: a later process could not load it."""
    namespace: dict[str, object] = {"__name__": "not_a_module_anywhere"}
    exec(  # noqa: S102 - the test's own code
        "import numba\n@numba.njit\ndef near(x, y, a, b):\n    return abs(x - a) <= 1\n",
        namespace,
    )
    near = namespace["near"]
    assert isinstance(near, Dispatcher)
    assert _digest(near, 2, 2) is None


def test_a_folder_that_cannot_be_written_compiles_in_memory(tmp_path: Path) -> None:
    predicate = _module(tmp_path, "unwritable").near
    blocked = tmp_path / "a file"
    blocked.write_text("")
    run, indexed = _generate(predicate, 2, 2, blocked / "cache")
    assert run.py_func.__code__.co_filename.startswith("<")
    assert indexed.py_func.__code__.co_filename.startswith("<")


def test_the_folder_keeps_the_newest_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_predicate_join, "KEEP", 2)
    folder = tmp_path / "cache"
    made = []
    for band in range(4):
        run, _ = _generate(_module(tmp_path, f"keep{band}", band=band).near, 2, 2, folder)
        made.append(Path(run.py_func.__code__.co_filename))
        # Numba's cache beside the module, and where NUMBA_CACHE_DIR puts it
        for cache in (folder / "__pycache__", tmp_path / "cache_0a1b2c"):
            cache.mkdir(exist_ok=True)
            (cache / f"{made[-1].stem}.run-14.py311.nbi").write_text("")
    assert sorted(folder.glob("*.py")) == sorted(made[2:])
    for cache in (folder / "__pycache__", tmp_path / "cache_0a1b2c"):
        assert {p.name.split(".")[0] for p in cache.iterdir()} == {p.stem for p in made[2:]}


def test_numba_cache_dir_holds_the_modules_where_it_is_set(tmp_path: Path) -> None:
    """As in the container image, whose installed package is not writable."""
    code = "from stretch.operators.kernels import _predicate_join; print(_predicate_join.FOLDER)"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str(tmp_path / "stretch-predicates")


def test_a_later_process_loads_the_join_compiled_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each _ENTRIES reset stands for a new process: the module is made again from its file."""
    monkeypatch.setattr(_predicate_join, "FOLDER", tmp_path / "cache")
    monkeypatch.setattr(_predicate_join, "_ENTRIES", {})
    predicate = _module(tmp_path, "loaded", band=300, weights=[400.0]).near

    def join() -> stretch.OPlus:  # takes the entry points made now
        return stretch.band_join(
            "loaded",
            1_000,
            left=LEFT,
            right=RIGHT,
            predicate=predicate,
            reads=(("x", "y"), ("a", "b")),
            output={"x": "left.x", "a": "right.a"},
        )

    tables = scalejoin(400, 1000.0, 5)
    want = stretch.run_sn(join(), tables)
    assert want.num_rows > 0
    for compiled in (True, False):
        monkeypatch.setattr(_predicate_join, "_ENTRIES", {})
        assert stretch.run_vsn(join(), tables, parallelism=2).equals(want)
        stats = _predicate_join.predicate_run(predicate, 2, 2).stats
        assert (sum(stats.cache_misses.values()) > 0) is compiled
        assert (sum(stats.cache_hits.values()) > 0) is not compiled


def test_a_module_file_gone_before_it_ran_compiles_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process may prune the file between the check and the run."""
    monkeypatch.setattr(_predicate_join, "_holds", lambda path, source, lock: True)  # never written
    run, _ = _generate(_module(tmp_path, "pruned").near, 2, 2, tmp_path / "cache")
    assert run.py_func.__code__.co_filename.startswith("<")


def test_a_compile_waits_for_the_turn_another_process_holds(tmp_path: Path) -> None:
    """While the lock file is held (another process compiling), a new signature waits."""
    entry = numba.njit(lambda v: v + 1)
    lock = tmp_path / "join.lock"
    _predicate_join._compile_in_turn(entry, lock)
    results: list[int] = []
    with _held(lock):
        caller = threading.Thread(target=lambda: results.append(entry(41)))
        caller.start()
        caller.join(0.5)
        assert caller.is_alive()  # waiting for the turn, nothing compiled
        assert entry.signatures == []
    caller.join(60)
    assert results == [42]


def test_making_a_join_does_not_wait_for_its_compile_in_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only writing a missing module file takes the turn; a compile holds it for seconds."""
    monkeypatch.setattr(_predicate_join, "COMPILE_WAIT_S", 600.0)
    predicate = _module(tmp_path, "elsewhere").near
    folder = tmp_path / "cache"
    run, _ = _generate(predicate, 2, 2, folder)  # the file written
    lock = Path(run.py_func.__code__.co_filename).with_suffix(".lock")
    made: list[object] = []
    with _held(lock):  # another process compiling it
        maker = threading.Thread(
            target=lambda: made.append(_generate(predicate, 2, 2, folder)), daemon=True
        )
        maker.start()
        maker.join(60)
        assert not maker.is_alive()
    assert len(made) == 1


def test_a_turn_held_too_long_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_predicate_join, "COMPILE_WAIT_S", 0.2)
    entry = numba.njit(lambda v: v * 2)
    lock = tmp_path / "join.lock"
    _predicate_join._compile_in_turn(entry, lock)
    with _held(lock):
        assert entry(21) == 42  # compiled after the deadline, without the turn
    assert "waited 0 s for another process" in caplog.text


def test_processes_starting_one_join_at_once_compile_it_once(tmp_path: Path) -> None:
    """Two processes make the same new join together: one compiles, the other loads it."""
    _module(tmp_path, "together", band=7, weights=[3.0])
    code = f"""
import sys
sys.path.insert(0, {str(tmp_path)!r})
import stretch, together
from stretch.generate import scalejoin
from stretch.operators.kernels import _predicate_join
_predicate_join.FOLDER = _predicate_join.Path({str(tmp_path / "cache")!r})
op = stretch.band_join(
    "together", 1_000, left=stretch.Schema.of(x="int", y="float"),
    right=stretch.Schema.of(a="int", b="float", c="float", d="bool"),
    predicate=together.near, reads=(("x", "y"), ("a", "b")), output={{"x": "left.x"}},
)
out = stretch.run_vsn(op, scalejoin(300, 1000.0, 5), parallelism=1)
stats = _predicate_join.predicate_run(together.near, 2, 2).stats
print(out.num_rows, sum(stats.cache_misses.values()), sum(stats.cache_hits.values()))
"""
    runs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    lines = sorted(run.communicate(timeout=600)[0].split() for run in runs)
    assert [run.returncode for run in runs] == [0, 0]
    rows = {line[0] for line in lines}
    assert len(rows) == 1
    # (misses, hits) per process: the one that waited compiled nothing
    assert [line[1:] for line in lines] == [["0", "1"], ["1", "0"]]


@contextlib.contextmanager
def _held(lock: Path) -> Iterator[None]:
    """Hold ``lock`` as another process would."""
    with lock.open("a") as file:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX)
        yield
