"""The packages' imports point one way: model <- operators <- vsn <- (api, controller, cli).

Reads every module's imports (including those under ``TYPE_CHECKING`` and inside
functions) with ``ast`` and checks the layering of docs/design.md and that no two modules
import each other, directly or through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("stretch", "scalegate")
FOLDERS = {"stretch": "stretch", "scalegate": "scalegate", "api": "stretch.api"}
FOLDERS["controller"] = "stretch.controller"
"""The repository's package folders and the modules they install as (api/ and controller/
are linked into stretch/: the wheel has no top-level api or controller)."""

LAYERS = {
    "stretch.model": {"stretch.errors", "stretch.model"},
    "stretch.operators": {"stretch.errors", "stretch.model", "stretch.operators"},
    "scalegate": {"stretch.errors", "scalegate"},
}
"""What each low layer may import of the project (anything else of it is a higher layer)."""

HIGHER = ("stretch.api", "stretch.controller", "stretch.spark", "stretch.cli", "stretch.demo")


def _module_name(path: Path) -> str:
    folder, *parts = path.relative_to(ROOT).with_suffix("").parts
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([FOLDERS[folder], *parts])


def _files(folders: tuple[str, ...] = tuple(FOLDERS)) -> list[Path]:
    """The modules in ``folders``, each once (the links in stretch/ are not followed)."""
    return [
        path
        for folder in folders
        for path in (ROOT / folder).rglob("*.py")
        if not (ROOT / folder / path.relative_to(ROOT / folder).parts[0]).is_symlink()
    ]


def _imports(path: Path) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def _graph() -> dict[str, set[str]]:
    paths = _files()
    modules = {_module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        # An import of a name from a module is an edge to that module.
        graph[name] = {m if m in modules else m.rpartition(".")[0] for m in _imports(path)}
        graph[name] = {m for m in graph[name] if m in modules and m != name}
    return graph


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_low_layers_import_nothing_above_them() -> None:
    wrong = [
        (module, target)
        for module, targets in _graph().items()
        for layer, allowed in LAYERS.items()
        if _within(module, layer)
        for target in targets
        if not any(_within(target, a) for a in allowed)
    ]
    assert not wrong, wrong


def test_the_runtime_imports_no_service_layer() -> None:
    wrong = [
        (module, target)
        for module, targets in _graph().items()
        if _within(module, "stretch.vsn")
        for target in targets
        if any(_within(target, h) for h in HIGHER)
    ]
    assert not wrong, wrong


def test_no_import_cycle_between_modules() -> None:
    graph = _graph()
    # Package __init__ files re-export their modules; an edge into a package is taken as
    # an edge into what it re-exports, which the module-level graph already has.
    packages = {m for m in graph if (ROOT / m.replace(".", "/") / "__init__.py").exists()}
    edges = {m: {t for t in ts if t not in packages} for m, ts in graph.items()}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(module: str, path: list[str]) -> bool:
        state[module] = 1
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                cycle.extend([*path, module, target])
                return True
            if target not in state and visit(target, [*path, module]):
                return True
        state[module] = 2
        return False

    for module in sorted(edges):
        if module not in state and visit(module, []):
            break
    assert not cycle, " -> ".join(cycle)


RUNTIME_INTERNALS = {"reorder", "pool", "compiled", "feeder", "gate", "sigma"}
"""Attributes of the runtime's private parts: code outside ``stretch.vsn`` reads none."""

DOOR_USERS = ("api", "controller", "stretch")
"""Folders whose modules use the runtime only through its front door (``stretch.vsn``)."""


def _outside_the_runtime() -> list[Path]:
    return [path for path in _files(DOOR_USERS) if not _within(_module_name(path), "stretch.vsn")]


def test_code_outside_the_runtime_imports_only_its_front_door() -> None:
    """Outside ``stretch/vsn/`` only ``stretch.vsn`` and the names it exports are imported,
    and outside ``stretch/operators/`` no private kernel module."""
    import stretch.vsn

    door = {"stretch.vsn", *(f"stretch.vsn.{name}" for name in stretch.vsn.__all__)}
    wrong = []
    for path in _outside_the_runtime():
        module = _module_name(path)
        for target in _imports(path):
            if _within(target, "stretch.vsn") and target not in door:
                wrong.append((module, target))
            kernel = _within(target, "stretch.operators.kernels") and "._" in target
            if kernel and not _within(module, "stretch.operators"):
                wrong.append((module, target))
    assert not wrong, wrong


def test_code_outside_the_runtime_reads_no_runtime_internal() -> None:
    """No attribute of the runtime's private parts, and no private attribute of another
    object, is read outside ``stretch/vsn/`` (an AST walk over every attribute access)."""
    wrong = []
    for path in _outside_the_runtime():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            owner = node.value
            own = isinstance(owner, ast.Name) and owner.id in {"self", "cls"}
            if node.attr in RUNTIME_INTERNALS or (
                node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not own
                and node.attr != "_exit"  # os._exit, Python's documented exit without cleanup
            ):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
            chain = isinstance(owner, ast.Attribute) and owner.attr == "pipeline"
            if chain and node.attr in {"sources", "log", "instances", "esg_in", "esg_out"}:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: .pipeline.{node.attr}")
    assert not wrong, wrong
