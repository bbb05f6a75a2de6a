"""The documentation is complete and current.

- docs/api_reference.md is what tools/gen_api_docs.py generates now, and it
  names every entry of ``hccl_py.__all__``; public classes and functions have
  docstrings.
- docs/troubleshooting.md covers every error class, and each example program
  still produces the error and the message shown under it.
- The README example runs and prints what its comment says; the Python blocks
  of the hand-written guides compile; relative links point to existing files
  and headings.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import inspect
import io
import re
import sys
from pathlib import Path

import pytest
from expect import expects_warning

import hccl_py as hp
from hccl_py.core.report import KINDS
from hccl_py.core.rules import RULES

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GUIDES = sorted(
    p.name
    for p in (Path(__file__).resolve().parent.parent / "docs").glob("*.md")
    if p.name != "api_reference.md"  # generated signatures, not Python
)
PYTHON_BLOCK = re.compile(r"```python[^\n]*\n(.*?)```", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def gen():
    """tools/gen_api_docs.py as a module."""
    spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "tools/gen_api_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_api_reference_is_current(gen) -> None:
    assert _read(DOCS / "api_reference.md") == gen.render_api_reference(), (
        "docs/api_reference.md is stale: run python tools/gen_api_docs.py"
    )


def test_api_reference_names_every_public_name() -> None:
    text = _read(DOCS / "api_reference.md")
    missing = [name for name in hp.__all__ if f"`{name}`" not in text]
    assert missing == []


def test_api_reference_lists_every_hccl_method() -> None:
    """Inherited calls too: InitV2, SetCcTilingV2, the Prepare calls, windows, BatchWrite."""
    text = _read(DOCS / "api_reference.md")
    calls = [name for name in dir(hp.Hccl) if name[0].isupper()]
    assert {"InitV2", "SetCcTilingV2", "AllGather", "GetWindowsInAddr", "BatchWrite"} <= set(calls)
    missing = [name for name in calls if not re.search(rf"`Hccl\.{name}[`\[]", text)]
    assert missing == []


def test_public_classes_and_functions_have_docstrings(gen) -> None:
    assert gen.undocumented() == []


def test_generator_finds_a_name_missing_from_all(gen, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hp, "__all__", [*hp.__all__, "no_such_name"])
    with pytest.raises(AttributeError, match="no_such_name"):
        gen.render_api_reference()


def test_generator_renders_a_new_public_function(gen, monkeypatch: pytest.MonkeyPatch) -> None:
    def new_collective(tensor: int, group: str | None = None) -> None:
        """A collective added after the reference was written."""

    monkeypatch.setattr(hp, "new_collective", new_collective, raising=False)
    monkeypatch.setattr(hp, "__all__", [*hp.__all__, "new_collective"])
    text = gen.render_api_reference()
    assert "### `new_collective`" in text
    assert "new_collective(tensor: int, group: str | None = None) -> None" in text
    assert "A collective added after the reference was written." in text


def test_troubleshooting_covers_every_error_class() -> None:
    headings = set(re.findall(r"^## (\w+)$", _read(DOCS / "troubleshooting.md"), re.M))
    errors = {
        name
        for name in hp.__all__
        if inspect.isclass(obj := getattr(hp, name)) and issubclass(obj, hp.HcclError)
    }
    assert errors - {"HcclError"} <= headings


def test_troubleshooting_shows_every_warning_kind() -> None:
    text = _read(DOCS / "troubleshooting.md")
    section = text.split("\n## HcclWarning\n", 1)[1].split("\n## ", 1)[0]
    shown = re.findall(r"^### `([a-z-]+)`$", section, re.M)
    assert shown == sorted(KINDS)
    raised = set()
    for path in [*(ROOT / "hccl_py").rglob("*.py"), *(ROOT / "emu").rglob("*.py")]:
        source = path.read_text(encoding="utf-8")
        raised |= set(re.findall(r"\bwarn\(\s*\"([a-z-]+)\"", source))
    # the client's warnings come from the rows of its rules table (tests/test_rule_table.py)
    raised |= {row.warning for row in RULES.values() if row.warning}
    assert raised == set(KINDS)


@expects_warning(*KINDS)  # the warning kinds' examples run here
def test_troubleshooting_messages_are_current(gen) -> None:
    text = _read(DOCS / "troubleshooting.md")
    assert text == gen.refresh_troubleshooting(text), (
        "an example's message changed: run python tools/gen_api_docs.py"
    )


def test_readme_example_runs() -> None:
    code = PYTHON_BLOCK.search(_read(ROOT / "README.md"))[1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})  # noqa: S102
    assert ast.literal_eval(out.getvalue().strip()) == [[0.0, 1.0, 2.0, 3.0]] * 4


def test_readme_test_command_is_what_ci_runs() -> None:
    """.ci/run says it is exactly the README's test command (they once differed by pip's -q)."""
    ci = [
        li
        for li in _read(ROOT / ".ci/run").splitlines()
        if li and not li.startswith(("#", "set ", "cd "))
    ]
    bash = re.search(r"```bash\n(.*?)```", _read(ROOT / "README.md"), re.S)[1]
    assert ci == [bash.splitlines()[-1]]


def test_api_guide_example_runs() -> None:
    code = PYTHON_BLOCK.search(_read(DOCS / "api.md"))[1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "api.md", "exec"), {"__name__": "__main__"})  # noqa: S102
    assert ast.literal_eval(out.getvalue().strip()) == [[3.0] * 4] * 3


@pytest.mark.parametrize("name", GUIDES)
def test_guide_python_blocks_compile(name: str) -> None:
    for block in PYTHON_BLOCK.findall(_read(DOCS / name)):
        compile(block, name, "exec")


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings (empty for other files)."""
    if path.suffix != ".md":
        return set()
    text = _read(path)
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    ids = set(re.findall(r'<a id="([^"]+)"></a>', text))
    return ids | {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def _resolves(source: Path, target: str) -> bool:
    path, _, anchor = target.partition("#")
    resolved = (source.parent / path).resolve() if path else source
    return resolved.exists() and (not anchor or anchor in _anchors(resolved))


@pytest.mark.parametrize(
    "page", ["README.md", "docs/api_reference.md", *(f"docs/{g}" for g in GUIDES)]
)
def test_relative_links_resolve(page: str) -> None:
    source = ROOT / page
    prose = re.sub(r"`[^`\n]*`", "", _read(source))  # code spans hold Python, not links
    targets = [t for t in LINK.findall(prose) if not re.match(r"[a-z]+:", t)]
    assert [t for t in targets if not _resolves(source, t)] == []


def test_porting_table_covers_the_constructs_users_meet() -> None:
    text = _read(DOCS / "porting.md")
    constructs = [
        "GM_ADDR",
        "AllGather<true>",
        "Finalize<false>",
        "offsetof(",
        "GET_TILING_DATA_WITH_STRUCT",
        "g_coreType",
        "GetBlockIdx()",
        "SyncAll",
        "GetHcclContext<1>",
        "Mc2CcTilingConfig",
        "struct T {",
    ]
    assert [c for c in constructs if c not in text] == []


#: A test the prose cites: ``test_x.py::test_name`` (a parameter in brackets allowed).
CITED_TEST = re.compile(r"`(?:tests/)?(test_\w+\.py)::(test_\w+)")


NOTES = sorted(f"docs/notes/{p.name}" for p in (DOCS / "notes").glob("*.md"))


@pytest.mark.parametrize("page", ["README.md", *(f"docs/{g}" for g in GUIDES), *NOTES])
def test_cited_tests_exist(page: str) -> None:
    """Every ``test_file.py::test_name`` the docs cite names a test function of that file
    (a rename once left docs/sanitizer.md citing a test that no longer existed)."""
    cited = CITED_TEST.findall(_read(ROOT / page))
    assert [f"{f}::{name}" for f, name in cited if name not in _functions_of(f)] == []


@functools.cache
def _functions_of(file: str) -> frozenset[str]:
    """The functions tests/``file`` defines (none where there is no such file)."""
    path = ROOT / "tests" / file
    if not path.exists():
        return frozenset()
    tree = ast.parse(_read(path))
    return frozenset(n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))
