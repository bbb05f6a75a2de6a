"""The package keeps the shape docs/architecture.md describes: no import cycles, small modules.

Imports are read from the source with ``ast`` at every depth (an import inside a
function is still an import). The cycle check counts those under ``if
TYPE_CHECKING:`` too (a type-only cycle still ties two modules together); the
layer check leaves them out, since they never run. The emulator folder ``emu/``
is scanned under the package name it installs as (pyproject's ``package-dir``).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]
#: The most lines a module of hccl_py/ or emu/ may have.
MAX_LINES = 450


def _package_roots() -> dict[str, Path]:
    """Package name -> source folder: hccl_py itself plus pyproject's package-dir mappings."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapped = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    roots = {name: ROOT / folder for name, folder in mapped.items() if name}
    roots.setdefault("hccl_py", ROOT / "hccl_py")
    return roots


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (mapped folders included)."""
    found: dict[str, Path] = {}
    roots = _package_roots()
    for package, folder in sorted(roots.items(), key=lambda kv: kv[0].count(".")):
        for path in sorted(folder.rglob("*.py")):
            if any(part == "__pycache__" for part in path.parts):
                continue
            rel = path.relative_to(folder).with_suffix("")
            parts = [] if rel.parts == ("__init__",) else list(rel.parts)
            if parts and parts[-1] == "__init__":
                parts.pop()
            inner = [p for p in roots if p != package and p.startswith(package + ".")]
            name = ".".join([package, *parts])
            if not any(name == p or name.startswith(p + ".") for p in inner):
                found[name] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_only: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, at any depth (under ``if TYPE_CHECKING:``: with ``type_only``)."""
    out: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test) and not type_only:
                for sub in child.orelse:
                    visit_stmt(sub)
                continue
            visit_stmt(child)

    def visit_stmt(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        visit(node)

    visit(tree)
    return out


def _edges(modules: dict[str, Path], type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules its import statements load (``type_only``: or name)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _imports(ast.parse(path.read_text(), str(path)), type_only):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name in modules)
                continue
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    targets.add(sub)
                elif base in modules:
                    targets.add(base)
        targets.discard(name)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return result


def test_the_scan_sees_the_whole_package() -> None:
    modules = _modules()
    assert "hccl_py.client" in modules or any(m.startswith("hccl_py.client.") for m in modules)
    assert "hccl_py.ops" in modules
    assert not any(m == "emu" or m.startswith("emu.") for m in modules), (
        "emu must install under hccl_py"
    )


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse("if TYPE_CHECKING:\n    import x\ndef f():\n    import y\n")
    assert [a.name for node in _imports(tree) for a in node.names] == ["y"]
    assert [a.name for node in _imports(tree, type_only=True) for a in node.names] == ["x", "y"]


def test_no_import_cycles() -> None:
    cycles = _cycles(_edges(_modules(), type_only=True))
    assert not cycles, (
        "import cycles (imports inside functions and type-only ones count): "
        + "; ".join(" <-> ".join(c) for c in cycles)
    )


@pytest.mark.parametrize("package", ["hccl_py", "emu"])
def test_modules_are_small(package: str) -> None:
    too_big = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / package).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not too_big, f"modules over {MAX_LINES} lines: {too_big}"


def test_emu_installs_under_hccl_py(tmp_path: Path) -> None:
    """The installed package has the emulator as hccl_py.backends.emu and no bare ``emu``.

    Checked in a fresh interpreter started outside the checkout, so that the
    repository root (on ``sys.path`` under ``python -m pytest``) does not count.
    """
    probe = (
        "import importlib.util as u; "
        "print(u.find_spec('hccl_py.backends.emu') is not None, u.find_spec('emu') is None)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.split() == ["True", "True"], out.stdout + out.stderr


def test_pyproject_lists_every_package() -> None:
    """Each package folder (``__init__.py``) is in pyproject's explicit package list."""
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    present = {name for name, path in _modules().items() if path.name == "__init__.py"}
    assert present == listed, {
        "missing": sorted(present - listed),
        "stale": sorted(listed - present),
    }


#: The most modules that may sit directly under hccl_py/ (besides __init__ and __main__):
#: everything else lives in the package of its layer.
MAX_TOP_MODULES = 8


def test_the_top_of_the_package_is_small() -> None:
    top = sorted(
        p.name
        for p in (ROOT / "hccl_py").glob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    )
    assert len(top) <= MAX_TOP_MODULES, f"modules directly under hccl_py/: {top}"


def _doc_references(text: str) -> tuple[set[str], set[str]]:
    """Paths (``hccl_py/x/y.py``, ``emu/z.py``, folders ending in /) and dotted module names."""
    paths = set(re.findall(r"`((?:hccl_py|emu|tests|samples|benchmarks|tools)/[\w/.]*)`", text))
    dotted = set(re.findall(r"`(hccl_py(?:\.\w+)+)`", text))
    return paths, dotted


def test_architecture_doc_names_only_what_exists() -> None:
    """Every file, folder and module that docs/architecture.md names is in the tree."""
    paths, dotted = _doc_references((ROOT / "docs" / "architecture.md").read_text())
    assert len(paths) >= 30, "the architecture doc should name the modules of every layer"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    modules = _modules()
    unknown = sorted(
        d
        for d in dotted
        if d not in modules
        and not any(m.startswith(d + ".") for m in modules)
        and d.rpartition(".")[0] not in modules
    )
    assert not missing and not unknown, {"missing paths": missing, "unknown modules": unknown}


def test_the_reference_finder_reads_paths_and_modules() -> None:
    paths, dotted = _doc_references("`hccl_py/core/gm.py` and `emu/` and `hccl_py.ops.OPS`")
    assert paths == {"hccl_py/core/gm.py", "emu/"} and dotted == {"hccl_py.ops.OPS"}


#: The layers, bottom up (docs/architecture.md draws them): a module may import only from
#: its own layer or a lower one. "" is the package's own top (hccl_py/__init__, runtime).
LAYERS = [
    {"core", "ops"},
    {"tiling", "sanitizer"},
    {"server"},
    {"kernel", "trace"},
    {"client"},
    {"framework"},
    {"launcher"},
    {"backends"},
    {"", "runtime", "explore", "bench", "__main__"},
]


def _layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    found = [i for i, layer in enumerate(LAYERS) if top in layer]
    assert found, f"{module} is in no layer: add its package to LAYERS and the architecture doc"
    return found[0]


def test_dependencies_point_down_the_layers() -> None:
    upward = sorted(
        f"{src} -> {dst}"
        for src, targets in _edges(_modules()).items()
        for dst in targets
        if _layer(dst) > _layer(src)
    )
    assert not upward, "imports that point up the layers: " + "; ".join(upward)


def test_the_layer_check_sees_an_upward_import() -> None:
    assert _layer("hccl_py.core.gm") < _layer("hccl_py.kernel.context") < _layer("hccl_py.runtime")
    assert _layer("hccl_py.backends.emu.world") > _layer("hccl_py.launcher.store")


# ------------------------------------------------------------ issue 24, item 4
#: What a ``__dict__`` may not be used for: writing it, or (an object's own ``self.__dict__``)
#: reading attributes from it that ``__init__`` did not declare. Reading a whole ``__dict__``
#: (a repr, an error's facts) and a class's ``klass.__dict__`` (ctypes ``_fields_``) are fine.
_DICT_WRITES = {"setdefault", "update", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def _is_dict(node: ast.AST, own: bool = False) -> bool:
    """``x.__dict__`` (with ``own``: ``self.__dict__``)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "__dict__"
        and (not own or (isinstance(node.value, ast.Name) and node.value.id == "self"))
    )


def dict_state(source: str) -> list[str]:
    """Lines of ``source`` that write a ``__dict__`` or read lazy state from ``self.__dict__``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        bad = False
        if isinstance(node, ast.Subscript) and _is_dict(node.value):
            bad = not isinstance(node.ctx, ast.Load) or _is_dict(node.value, own=True)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target, method = node.func.value, node.func.attr
            bad = _is_dict(target) and (
                method in _DICT_WRITES or (method == "get" and _is_dict(target, own=True))
            )
        elif isinstance(node, ast.Compare):
            bad = any(
                isinstance(op, (ast.In, ast.NotIn)) and _is_dict(right, own=True)
                for op, right in zip(node.ops, node.comparators, strict=True)
            )
        if bad:
            found.append(f"line {node.lineno}: {ast.unparse(node)[:70]}")
    return found


def _dict_state_files() -> dict[str, list[str]]:
    return {
        str(path.relative_to(ROOT)): found
        for folder in ("hccl_py", "emu")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (found := dict_state(path.read_text()))
    }


def test_the_dict_check_sees_lazy_state() -> None:
    bad = (
        "self.__dict__.setdefault('_a', [])\nself.__dict__['_b'] = 1\n"
        "x = self.__dict__.get('_c')\nif '_d' in self.__dict__: pass\n"
        "other.__dict__.update(y)\ndel self.__dict__['_e']\n"
    )
    assert [line.split(":")[0] for line in dict_state(bad)] == [
        f"line {n}" for n in (1, 2, 3, 4, 5, 6)
    ]
    fine = (
        "describe(self.reason, self.__dict__)\nself.__dict__ | {}\nklass.__dict__.get('_fields_')\n"
    )
    assert dict_state(fine) == []


def test_state_is_declared_not_kept_in_dict() -> None:
    """No object keeps lazy state in ``__dict__``: it is assigned in ``__init__`` (issue 24, item 4)."""
    assert _dict_state_files() == {}


#: Client modules whose classes may subclass each other: the handle lifecycles, one strategy
#: class per lifecycle of the table LIFECYCLES. Everywhere else in hccl_py/client/ a class
#: has one job and is composed, not inherited; implementing a Protocol is not inheriting.
STRATEGY_MODULES = {"hccl_py/client/lifecycles.py"}


def _base_names(node: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]


def client_subclasses(sources: dict[str, str]) -> list[str]:
    """``module: Class(Base)`` for classes whose base is a (non-Protocol) class of ``sources``."""
    classes = {
        rel: [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ClassDef)]
        for rel, text in sources.items()
    }
    defined = {
        n.name for found in classes.values() for n in found if "Protocol" not in _base_names(n)
    }
    return [
        f"{rel}: {node.name}({base})"
        for rel, found in classes.items()
        if rel not in STRATEGY_MODULES
        for node in found
        for base in _base_names(node)
        if base in defined
    ]


def test_the_subclass_check_sees_a_split_class() -> None:
    sources = {
        "hccl_py/client/a.py": "class Base:\n    pass\nclass P(Protocol):\n    pass\n",
        "hccl_py/client/b.py": "class Calls(a.Base):\n    pass\nclass S(P):\n    pass\nclass T(Protocol):\n    pass\n",
        "hccl_py/client/lifecycles.py": "class Rounds(Base):\n    pass\n",
    }
    assert client_subclasses(sources) == ["hccl_py/client/b.py: Calls(Base)"]


def test_client_classes_are_composed_not_inherited() -> None:
    """No client class inherits from another only to split a file (issue 24, item 4)."""
    sources = {
        str(p.relative_to(ROOT)): p.read_text()
        for p in sorted((ROOT / "hccl_py" / "client").glob("*.py"))
    }
    assert client_subclasses(sources) == []


#: Files "Adding an op" names that an op does not always edit: a new kind of argument, a
#: new lifecycle, the registry of op modules, and the test that checks the executors.
OPTIONAL_OP_FILES = {
    "hccl_py/client/convert.py",
    "hccl_py/client/lifecycles.py",
    "hccl_py/ops/__init__.py",
    "tests/test_backends_cover_ops.py",
    "tests/test_structure.py",
}
#: Files that name every op without being a step of adding one: the enum itself, and the
#: framework collectives, which map torch.distributed calls onto the ops they use.
NOT_OP_FILES = {"hccl_py/core/constants.py", "hccl_py/framework/collectives.py"}


def _names_op(text: str, spec: object) -> bool:
    return bool(re.search(rf"\b({spec.cmd.name}|{spec.name})\b", text))


def test_adding_an_op_names_every_file_it_takes() -> None:
    from hccl_py.ops import OPS

    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("## Adding an op", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`((?:hccl_py|emu|tests)/[\w/]+\.py)`", section))
    executable = [spec for spec in OPS.values() if spec.executable]
    per_op = sorted(listed - OPTIONAL_OP_FILES)
    assert len(per_op) >= 5, per_op
    silent = {
        f: [s.name for s in executable if not _names_op((ROOT / f).read_text(), s)] for f in per_op
    }
    assert not any(silent.values()), f"listed files that do not name every op: {silent}"
    naming_all = {
        str(path.relative_to(ROOT))
        for folder in ("hccl_py", "emu")
        for path in (ROOT / folder).rglob("*.py")
        if all(re.search(rf"\b{s.cmd.name}\b", path.read_text()) for s in executable)
    }
    unlisted = sorted(naming_all - listed - NOT_OP_FILES)
    assert not unlisted, f"modules that name every op but are not in 'Adding an op': {unlisted}"
    registry = (ROOT / "hccl_py" / "ops" / "__init__.py").read_text()
    modules = [
        p.stem
        for p in (ROOT / "hccl_py" / "ops").glob("*.py")
        if p.stem not in ("__init__", "spec")
    ]
    assert all(m in registry for m in modules), (
        "every op module is listed in hccl_py/ops/__init__.py"
    )


#: The parts of the Server protocol (hccl_py/server/protocol.py).
PROTOCOL_PARTS = frozenset({"Tasks", "Windows", "Meetings", "Lifecycle"})
#: The folders whose classes hold their parts rather than mix them in.
COMPOSED = ("hccl_py/server", "hccl_py/backends", "emu")
MAX_BASES = 2


def _bases(node: ast.ClassDef) -> list[str]:
    """A class's bases as written, the Server protocol's parts among them counted as one."""
    names = [ast.unparse(base) for base in node.bases]
    parts = [n for n in names if n.rpartition(".")[2] in PROTOCOL_PARTS]
    return [n for n in names if n not in parts] + ([" + ".join(parts)] if parts else [])


def _mixed_classes(source: str) -> dict[str, list[str]]:
    """Class name -> bases, for the classes of ``source`` with more than MAX_BASES bases."""
    classes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]
    return {c.name: _bases(c) for c in classes if len(_bases(c)) > MAX_BASES}


def test_servers_hold_their_parts() -> None:
    """No class in hccl_py/server/, hccl_py/backends/ or emu/ has more than two bases.

    The rule: a class there lists at most two bases. The parts of the Server
    protocol (Tasks, Windows, Meetings, Lifecycle) are one interface cut into
    parts for reading: listed together they count as one base (``Server``
    joins all four). Windows, one-sided copies, the race check and reports are
    objects with one job each that a server builds in its ``__init__`` and
    holds as attributes, not mixins that keep state in the server.
    """
    mixed = {
        f"{path.relative_to(ROOT)}:{name}": bases
        for folder in COMPOSED
        for path in sorted((ROOT / folder).rglob("*.py"))
        for name, bases in _mixed_classes(path.read_text()).items()
    }
    assert not mixed, f"classes with more than {MAX_BASES} bases (hold parts instead): {mixed}"


def test_the_bases_check_sees_a_mixin_class() -> None:
    source = (
        "class A(B, m.C, D):\n    pass\n"
        "class S(Tasks, Windows, Meetings, Lifecycle):\n    pass\n"
        "class E(Base, p.Tasks, p.Windows):\n    pass\n"
    )
    assert _mixed_classes(source) == {"A": ["B", "m.C", "D"]}
