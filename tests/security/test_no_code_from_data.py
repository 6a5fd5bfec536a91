"""A row read from the database must not be able to run code (docs/design.md §7).

The source scan parses every module of ``src/`` with ``ast`` (strings and comments do not
count): no ``pickle``/``marshal``/``shelve``-family module is imported, no ``eval``/``exec``/
``compile``/``__import__`` is called, no ``yaml.load``; ``importlib.import_module`` appears only
where the module name comes from the operator or from tether itself, never from stored data.
The decoding tests then feed stored envelopes that name code to the real decoder."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tether import serde
from tether.errors import CorruptRecordError

SRC = Path(__file__).resolve().parents[2] / "src" / "tether"
FORBIDDEN_MODULES = {
    "pickle",
    "cPickle",
    "_pickle",
    "marshal",
    "shelve",
    "dill",
    "cloudpickle",
    "jsonpickle",
    "copyreg",
}
FORBIDDEN_BUILTINS = {"eval", "exec", "compile", "__import__", "execfile"}
UNSAFE_YAML = {"load", "load_all", "unsafe_load", "unsafe_load_all", "full_load"}
# importlib.import_module call sites, and why the module name is not stored data.
IMPORT_MODULE_ALLOWED = {
    "llm/__init__.py": "lazy attributes: the module is a constant of tether's own table",
    "registry.py": "load_app: the operator's --app / TETHER_APP spec, never a stored value",
}


def _modules() -> list[Path]:
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 30, "the scan found too few modules: wrong root?"
    return files


def _findings(path: Path, root: Path = SRC) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    rel = path.relative_to(root).as_posix()
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    out.append(f"{where} imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in FORBIDDEN_MODULES:
                out.append(f"{where} imports from {node.module}")
            if node.module == "importlib" and any(a.name == "import_module" for a in node.names):
                out.append(f"{where} import_module:from-import")
        elif isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Name) and fn.id in FORBIDDEN_BUILTINS:
                out.append(f"{where} calls {fn.id}()")
            elif isinstance(fn, ast.Attribute):
                owner = fn.value.id if isinstance(fn.value, ast.Name) else None
                if owner == "builtins" and fn.attr in FORBIDDEN_BUILTINS:
                    out.append(f"{where} calls builtins.{fn.attr}()")
                if owner == "yaml" and fn.attr in UNSAFE_YAML:
                    out.append(f"{where} calls yaml.{fn.attr}()")
                if owner in FORBIDDEN_MODULES:
                    out.append(f"{where} calls {owner}.{fn.attr}()")
                if owner == "importlib" and fn.attr == "import_module":
                    out.append(f"{rel} import_module")
    return out


def test_source_never_unpickles_evals_or_execs_anything() -> None:
    findings = [
        f for path in _modules() for f in _findings(path) if not f.endswith("import_module")
    ]
    assert findings == []


def test_import_module_is_called_only_where_the_name_is_not_stored_data() -> None:
    sites = {
        f.split(" ")[0]
        for path in _modules()
        for f in _findings(path)
        if f.endswith("import_module")
    }
    assert sites == set(IMPORT_MODULE_ALLOWED), (
        "a new importlib.import_module call: make sure its name never comes from stored data, "
        "then list it in IMPORT_MODULE_ALLOWED"
    )


def test_the_scan_catches_what_it_looks_for(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import pickle\nfrom marshal import loads\nimport yaml\n"
        "x = '''eval(1)'''  # exec('comment')\n"
        "eval('1')\nyaml.load(s)\npickle.loads(b'')\n__import__('os')\n",
        encoding="utf-8",
    )
    found = _findings(bad, tmp_path)
    assert len(found) == 6, found  # not the string, not the comment


def test_a_stored_envelope_naming_a_module_not_imported_is_refused_without_importing_it() -> None:
    # antigravity opens a web browser on import: the canonical "importing this runs code".
    probe = (
        "import sys\n"
        "from tether import serde\n"
        "from tether.errors import CorruptRecordError\n"
        "for tag in ('dataclass', 'pydantic', 'enum'):\n"
        '    raw = (\'{"__tether__": "%s", "v": {"cls": "antigravity:X", \'\n'
        '           \'"fields": {}, "data": {}, "value": 1}}\' % tag)\n'
        "    try:\n"
        "        serde.loads(raw)\n"
        "    except CorruptRecordError as exc:\n"
        "        assert 'not imported' in str(exc), exc\n"
        "    else:\n"
        "        raise SystemExit('decoded')\n"
        "assert 'antigravity' not in sys.modules\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@pytest.mark.parametrize(
    ("tag", "ref"),
    [
        ("dataclass", "subprocess:Popen"),  # a class, imported, but no dataclass
        ("pydantic", "os:system"),  # not a class at all
        ("enum", "builtins:eval"),
        ("dataclass", "subprocess"),  # malformed reference
    ],
)
def test_a_stored_envelope_naming_code_that_is_not_a_data_class_is_refused(
    tag: str, ref: str
) -> None:
    raw = json.dumps(
        {
            "__tether__": tag,
            "v": {"cls": ref, "fields": {"args": ["touch", "/x"]}, "data": {}, "value": 1},
        }
    )
    with pytest.raises(CorruptRecordError):
        serde.loads(raw)
