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


def _imported_from(tree: ast.Module, module: Module) -> dict[str, str]:
    """``{local name: tether module}`` for each name ``module`` takes with ``from x import``."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _source(module, node)
            for alias in node.names:
                if source in MODULES and f"{source}.{alias.name}" not in MODULES:
                    out[alias.asname or alias.name] = source
    return out


def _is_private(attr: str) -> bool:
    return attr.startswith("_") and not attr.startswith("__")


def _self_attr(node: ast.expr) -> str | None:
    """``X`` for ``self.X``, else ``None``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.attr if node.value.id == "self" else None
    return None


def _private_reaches(module: Module, source: str | None = None) -> list[str]:
    """``obj._name`` where ``obj`` is typed with a class of another package: a parameter
    annotated with it, an attribute of ``self`` such a parameter was stored in, or a local
    name bound to one of those.

    Only what an annotation says is known (an ``Any`` parameter is not followed): a reach
    found here is real, one not found may still be there.
    """
    tree = ast.parse(source if source is not None else module.path.read_text())
    imported = _imported_from(tree, module)

    def foreign(annotation: ast.expr | None) -> str | None:
        name = annotation.id if isinstance(annotation, ast.Name) else None
        owner = MODULES[imported[name]].package if name in imported else None
        return owner if owner is not None and not _within(module.package, owner) else None

    def typed_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
        params = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        return {a.arg: owner for a in params if (owner := foreign(a.annotation)) is not None}

    found: list[tuple[int, str]] = []
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
        functions = [
            n
            for n in ast.iter_child_nodes(scope)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        typed_self: dict[str, str] = {}  # self.<attr> -> the package of its class
        for fn in functions:
            params = typed_params(fn)
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
                    for target in node.targets:
                        attr = _self_attr(target)
                        if attr is not None and node.value.id in params:
                            typed_self[attr] = params[node.value.id]
        for fn in functions:
            typed = typed_params(fn)
            for node in ast.walk(fn):  # a local bound to a typed self attribute
                if isinstance(node, ast.Assign) and (attr := _self_attr(node.value)) in typed_self:
                    for target in node.targets:
                        if isinstance(target, ast.Name) and attr is not None:
                            typed[target.id] = typed_self[attr]
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                    continue
                value = node.value
                owner = typed.get(value.id) if isinstance(value, ast.Name) else None
                attr = _self_attr(value)
                if attr is not None:
                    owner = typed_self.get(attr)
                if owner is not None:
                    reach = f"{module.name}:{node.lineno} reaches {owner}'s .{node.attr}"
                    found.append((node.lineno, reach))
    return [reach for _, reach in sorted(found)]


def test_the_private_reach_checker_sees_a_typed_parameter_and_what_self_keeps_of_it() -> None:
    sample = (
        "from ...store.sqlite import SQLiteCheckpointer\n"
        "class Backend:\n"
        "    def __init__(self, store: SQLiteCheckpointer) -> None:\n"
        "        self._store = store\n"
        "    def run(self) -> None:\n"
        "        self._store._write()\n"
        "        store = self._store\n"
        "        store._conn()\n"
        "def read(store: SQLiteCheckpointer) -> None:\n"
        "    store._read()\n"
        "    store.driver.run()\n"
    )
    module = MODULES["tether.integrations.langgraph._backend"]
    assert _private_reaches(module, sample) == [
        "tether.integrations.langgraph._backend:6 reaches tether.store's ._write",
        "tether.integrations.langgraph._backend:8 reaches tether.store's ._conn",
        "tether.integrations.langgraph._backend:10 reaches tether.store's ._read",
    ]


def test_no_module_reaches_a_private_attribute_of_another_packages_object() -> None:
    wrong = [reach for module in MODULES.values() for reach in _private_reaches(module)]
    assert wrong == [], (
        "a private attribute is for its own package; give what another package needs a "
        f"public, documented name: {wrong}"
    )
