"""The package layout keeps its rules: no import cycle among tether's modules, no module that
reaches into another package's private modules, no module grown past one idea's size.

The imports are read from the source with :mod:`ast` (nothing is imported), at module level and
inside functions alike: an import inside a function is still a dependency, only a later one.
Imports under ``if TYPE_CHECKING:`` are left out; they never run.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import tether

SRC = Path(tether.__file__).resolve().parent.parent

MAX_MODULE_LINES = 500
"""A module past this many lines usually holds two ideas (STYLE.md, "Shape")."""


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def _modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for path in sorted((SRC / "tether").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        found[name] = Module(name, path, is_package)
    return found


MODULES = _modules()


def _known(name: str) -> str | None:
    """The longest prefix of ``name`` that is one of tether's modules (``from x import y``
    names a module ``x.y`` or a name in ``x``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(module: Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``module``, anywhere in its body but under TYPE_CHECKING."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(module.path.read_text(), str(module.path)))
    return found


def _source(module: Module, node: ast.ImportFrom) -> str:
    """The absolute name ``from <source> import ...`` reads from."""
    if not node.level:
        return node.module or ""
    base = module.package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(module: Module) -> set[str]:
    """The tether modules ``module`` imports."""
    out: set[str] = set()
    for node in _import_nodes(module):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            names = [f"{_source(module, node)}.{alias.name}" for alias in node.names]
        out.update(found for name in names if (found := _known(name)) is not None)
    out.discard(module.name)
    return out


def _private_names(module: Module) -> set[tuple[str, str]]:
    """``(module, name)`` for each private name ``module`` takes from one of tether's
    modules with ``from <module> import _name`` (a private module is counted by _imports)."""
    out: set[tuple[str, str]] = set()
    for node in _import_nodes(module):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = _source(module, node)
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            if private and f"{source}.{alias.name}" not in MODULES and source in MODULES:
                out.add((source, alias.name))
    return out


def _graph() -> dict[str, set[str]]:
    return {name: _imports(module) for name, module in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _owner_of_private(name: str) -> str | None:
    """The package a private module belongs to (``tether.store`` for ``tether.store._codec``),
    or ``None`` when no part of ``name`` is private."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def test_the_checker_reads_relative_function_level_and_type_checking_imports() -> None:
    # Pins the reader on modules whose imports are known, so a broken reader cannot pass the
    # checks below by seeing no imports at all.
    graph = _graph()
    assert "tether.errors" in graph["tether.interrupt"]  # from .errors import (...)
    assert "tether.serde" in graph["tether.interrupt"]  # inside Resume.__post_init__
    assert "tether.store.base" not in graph["tether.audit"]  # only under TYPE_CHECKING
    assert "tether.store.sqlite" in graph["tether.store"]  # a package's __init__: from .sqlite
    assert "tether._context" in graph["tether.chain._executor"]  # from .._context import ...
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    # from .._context import _agent_path, current_agent_path (a private name of a parent)
    assert ("tether._context", "_agent_path") in _private_names(MODULES["tether.engine.nesting"])


def test_no_import_cycle_among_tethers_modules() -> None:
    cycles = _cycles(_graph())
    assert cycles == [], (
        "these modules import each other (directly or through others); move what both need "
        f"into a module below them: {cycles}"
    )


def test_no_module_imports_a_private_module_of_another_package() -> None:
    graph = _graph()
    wrong = []
    for name, targets in sorted(graph.items()):
        package = MODULES[name].package
        for target in sorted(targets):
            owner = _owner_of_private(target)
            if owner is not None and not (package == owner or package.startswith(owner + ".")):
                wrong.append(f"{name} imports {target}")
    assert wrong == [], (
        "a private module is for its own package (and the packages inside it); give what "
        f"another package needs a public home: {wrong}"
    )


def test_no_module_takes_a_private_name_from_another_package() -> None:
    wrong = []
    for name, module in sorted(MODULES.items()):
        for source, private in sorted(_private_names(module)):
            owner = MODULES[source].package
            allowed = module.package == owner or module.package.startswith(owner + ".")
            if not allowed:
                wrong.append(f"{name} takes {private} from {source}")
    assert wrong == [], (
        "a private name is for its own package (and the packages inside it); give what "
        f"another package needs a public name: {wrong}"
    )


def test_no_module_is_past_the_size_of_one_idea() -> None:
    sizes = {name: len(module.path.read_text().splitlines()) for name, module in MODULES.items()}
    over = {name: n for name, n in sorted(sizes.items()) if n > MAX_MODULE_LINES}
    assert over == {}, f"split these modules by idea (lines > {MAX_MODULE_LINES}): {over}"


LAYERS = {
    # Storage knows nothing of the engine, the runners or the surfaces (STYLE.md, "Shape").
    "tether.store": (
        "tether.engine",
        "tether.chain",
        "tether.agent",
        "tether.llm",
        "tether.integrations",
        "tether.cli",
        "tether.web",
    ),
    # The engine every runner shares imports no runner (tether/engine/__init__.py).
    "tether.engine": (
        "tether.chain",
        "tether.agent",
        "tether.integrations",
        "tether.cli",
        "tether.web",
    ),
    # The web page and the CLI are two surfaces over the same modules, not one over the other.
    "tether.web": ("tether.cli",),
}
"""For each package, the packages none of its modules may import."""


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_each_layer_imports_only_the_layers_below_it() -> None:
    graph = _graph()
    wrong = [
        f"{name} imports {target}"
        for name, targets in sorted(graph.items())
        for package, below in LAYERS.items()
        if _within(name, package)
        for target in sorted(targets)
        if any(_within(target, other) for other in below)
    ]
    assert wrong == [], f"these imports point up or across the layers: {wrong}"
