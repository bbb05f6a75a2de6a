"""Mutants of the kernel samples: each ordering statement removed in turn, run in-process.

A *site* is one statement of a sample that orders work between cores, ranks or
launches: a call of :data:`ORDERING_CALLS` (``Wait``, ``SyncAll``, ...), a call of
a helper that consists only of such calls (``barrier()``), a flag poll
(``while <flag> != value: pass``), a flag check (an ``if`` whose test matches
one of the sample's :attr:`SampleSpec.checks` patterns: the scan loops that poll
many flags in turn, ``if <flag> != value: continue``) and a flag write (a
statement whose source matches one of the sample's :attr:`SampleSpec.flags`
patterns). A mutant is the sample with one site replaced by ``pass`` (or, for a
call whose result is used, by the constant ``HCCL_SUCCESS``; for a flag check
whose body is more than ``continue``, its test by ``True``: the flag is taken as
set); it is compiled from the AST and never written to a file.

:func:`judge` runs a mutant on the emulator as tests/test_samples.py runs the
samples, at a small size (:class:`SampleSpec`: 2 ranks unless a path of the
sample needs more, ``block_dim=2``), and says who reports it:

- ``default``: the default schedule raises (a ``WorldError``: deadlock, race,
  core misuse, ...) or the sample's own numpy check prints FAIL;
- ``explore``: otherwise ``hp.run(..., explore=16)`` raises (an error on some
  schedule, or ``HcclScheduleError``: results that differ between schedules) or
  its results FAIL the sample's check; not for a sample that finalizes without
  a SyncAll as its source does (``SampleSpec.warnings``): one of its own
  schedules hangs;
- ``missed``: neither.

Every run is deterministic: the default schedule is fixed and the explored ones
are seeded. ``python tests/mutants.py`` prints every site's verdict.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import os
import re
import sys
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import hccl_py as hp
from hccl_py.core.errors import HcclWarning, WorldError
from hccl_py.explore import HcclScheduleError

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "samples"
#: Calls that order work: removing one must be reported.
ORDERING_CALLS = frozenset(
    {
        "Wait",
        "SyncAll",
        "InterHcclGroupSync",
        "CrossCoreSetFlag",
        "CrossCoreWaitFlag",
        "QueueBarrier",
        "Drain",
    }
)
#: What a removed call whose result is used returns instead.
CALL_RESULT = int(hp.HCCL_SUCCESS)
#: Schedules of the explore stage (the default one and seeds 1 .. 15).
EXPLORE = 16
#: Variable naming the schedules with which the test suite confirms that a mutant the table
#: lists as not catchable stays unreported (:data:`MISSED_EXPLORE` by default).
MISSED_EXPLORE_ENV = "MUTANTS_MISSED_EXPLORE"
#: The suite's default for :data:`MISSED_EXPLORE_ENV`. Such a mutant runs every schedule to
#: the end (a caught one stops at its first report), and the 70 of them at 16 schedules were
#: 96 of the suite's 550 CPU-seconds: the suite runs the default one and seed 1 (the first 4
#: until 2026-11-30, 25 CPU-seconds of a suite past CI's five minutes), ``python
#: tests/mutants.py`` (and the variable set to 16) all of them.
MISSED_EXPLORE = 2
#: Limit of one run; the emulator reports deadlocks at once, this only bounds a runaway loop.
TIMEOUT = 30
#: Warning kinds of a sample that some explored schedule turns into a hang of the sample itself.
UNEXPLORABLE = frozenset({"finalize-unordered"})
#: Verdict line of a sample (see samples/_common.py).
FAIL_LINE = re.compile(r"^rank \d+: \S+ +FAIL\b")


@dataclass(frozen=True)
class SampleSpec:
    """How to run one sample and which of its statements are flag writes."""

    name: str
    #: World sizes of the runs, one run each: the fewest ranks that run every path of the sample.
    world_sizes: tuple[int, ...] = (2,)
    #: Sites judged at other world sizes (a path that only more ranks take, too slow to run
    #: for every site of the sample): site id -> its sizes.
    site_sizes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    #: Regular expressions over a statement's source that mark it as a flag write.
    flags: tuple[str, ...] = ()
    #: Regular expressions over an ``if`` statement's test that mark it as a flag check.
    checks: tuple[str, ...] = ()
    #: ``block_dim`` for launches that pass a literal one (the samples use 8); None keeps it.
    block_dim: int | None = 2
    #: Kernel launches of ``main``'s ``for launch in (1, 2):`` loop, when the suite needs more
    #: (a write that only the next launch reads) or the table's verdicts hold with fewer; None
    #: keeps the sample's.
    launches: int | None = None
    #: Sites judged with another launch count than :attr:`launches` (a write whose effect only
    #: a later launch reads): site id -> launches. Sites not named need only the spec's.
    site_launches: tuple[tuple[str, int], ...] = ()
    #: HcclWarning kinds the sample itself gives (its source's own races). With
    #: ``finalize-unordered`` some explored schedule of the sample itself hangs, so only the
    #: default schedule judges its mutants (:data:`UNEXPLORABLE`).
    warnings: tuple[str, ...] = ()
    #: Why some explored schedule of the unmutated sample fails (a race of its source), or
    #: None: with a reason only the default schedule judges its mutants.
    source_race: str | None = None

    def sizes(self, site_id: str | None) -> tuple[int, ...]:
        """The world sizes that judge ``site_id`` (None: every size some site is judged at)."""
        if site_id is None:
            return tuple(sorted({*self.world_sizes, *(n for _, ns in self.site_sizes for n in ns)}))
        return dict(self.site_sizes).get(site_id, self.world_sizes)

    def for_site(self, site_id: str | None) -> SampleSpec:
        """The spec that judges ``site_id``: with the site's own launch count, if it has one."""
        launches = dict(self.site_launches).get(site_id)
        if launches is None:
            return self
        return replace(self, launches=launches, site_launches=())

    def launch_counts(self) -> tuple[int | None, ...]:
        """Every launch count some site is judged with (None: the sample's own)."""
        return (self.launches, *sorted({n for _, n in self.site_launches}))

    @property
    def explorable(self) -> bool:
        """Whether the explore stage can judge a mutant: the sample passes every schedule."""
        return self.source_race is None and not UNEXPLORABLE & set(self.warnings)


@dataclass(frozen=True)
class Site:
    """One ordering statement of a sample."""

    function: str
    #: The call's name, the helper's name, ``flag`` (a flag write), ``poll`` (a flag poll) or
    #: ``check`` (a flag check).
    name: str
    #: 1-based among the sites of this name in this function, in source order.
    index: int
    line: int
    text: str

    @property
    def id(self) -> str:
        """``function:name#index``, stable while the function's own sites keep their order."""
        return f"{self.function}:{self.name}#{self.index}"


@dataclass(frozen=True)
class Verdict:
    """Who reported a mutant (``default``, ``explore`` or ``missed``) and with what."""

    stage: str
    evidence: str


def call_name(node: ast.AST) -> str | None:
    """The name a call is made by: ``hccl.Wait(h)``, ``hp.CrossCoreSetFlag[0, PIPE_FIX](6)``."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    while isinstance(func, ast.Subscript):
        func = func.value
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def barrier_helpers(tree: ast.Module) -> set[str]:
    """Module-level functions whose body (after a docstring) is only ordering calls."""
    found = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        body = node.body[1:] if ast.get_docstring(node) else node.body
        if body and all(
            isinstance(s, ast.Expr) and call_name(s.value) in ORDERING_CALLS for s in body
        ):
            found.add(node.name)
    return found


def _is_poll(stmt: ast.stmt) -> bool:
    """``while <condition>: pass``: a flag poll."""
    return isinstance(stmt, ast.While) and all(isinstance(s, ast.Pass) for s in stmt.body)


def _only_continue(stmt: ast.If) -> bool:
    """``if <condition>: continue``: a check that skips what is not ready yet."""
    return not stmt.orelse and all(isinstance(s, ast.Continue) for s in stmt.body)


def _header_calls(stmt: ast.stmt) -> Iterator[ast.Call]:
    """The calls in a statement's own expressions (not in the statements it contains)."""
    for child in ast.iter_child_nodes(stmt):
        if isinstance(child, (ast.stmt, ast.excepthandler)):
            continue
        yield from (n for n in ast.walk(child) if isinstance(n, ast.Call))


class _Walker:
    """Finds the sites of one parsed sample, in source order, with the nodes to replace."""

    def __init__(self, tree: ast.Module, source: str, spec: SampleSpec) -> None:
        self.lines = source.encode("utf-8").splitlines(keepends=True)
        self.helpers = barrier_helpers(tree)
        self.flags = [re.compile(p) for p in spec.flags]
        self.checks = [re.compile(p) for p in spec.checks]
        #: The ids of the flag checks' tests that a mutant replaces by True.
        self.tests: set[int] = set()
        self.counts: dict[tuple[str, str], int] = {}
        #: (site, statement list, index in it, expression to replace by the constant
        #: :data:`CALL_RESULT` or True, or None for the statement)
        self.found: list[tuple[Site, list[ast.stmt], int, ast.expr | None]] = []
        self._body(tree.body, "<module>")

    def _add(
        self, function: str, name: str, body: list, i: int, call: ast.expr | None, text: str = ""
    ) -> None:
        """Note a site; ``text`` shows it (by default the statement's source on one line)."""
        key = (function, name)
        self.counts[key] = self.counts.get(key, 0) + 1
        stmt = body[i]
        text = " ".join((text or self._segment(stmt)).split())
        site = Site(function, name, self.counts[key], stmt.lineno, text)
        self.found.append((site, body, i, call))

    def _segment(self, node: ast.stmt | ast.expr) -> str:
        """The statement's source (``ast.get_source_segment``, without re-splitting the file)."""
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            raw = self.lines[first][node.col_offset : node.end_col_offset]
        else:
            middle = b"".join(self.lines[first + 1 : last])
            raw = self.lines[first][node.col_offset :] + middle
            raw += self.lines[last][: node.end_col_offset]
        return raw.decode("utf-8")

    def _body(self, body: list[ast.stmt], function: str) -> None:
        for i in range(len(body)):
            self._stmt(body, i, function)

    def _stmt(self, body: list[ast.stmt], i: int, function: str) -> None:
        stmt = body[i]
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._body(stmt.body, stmt.name)
            return
        whole = call_name(stmt.value) if isinstance(stmt, ast.Expr) else None
        if whole in ORDERING_CALLS or whole in self.helpers:
            self._add(function, whole, body, i, None)
        elif _is_poll(stmt):
            self._add(function, "poll", body, i, None)
        elif isinstance(stmt, ast.If) and any(
            c.search(self._segment(stmt.test)) for c in self.checks
        ):
            node = None if _only_continue(stmt) else stmt.test
            if node is not None:
                self.tests.add(id(node))
            self._add(function, "check", body, i, node, f"if {self._segment(stmt.test)}:")
        elif (
            self.flags
            and isinstance(stmt, (ast.Assign, ast.Expr))
            and any(f.search(self._segment(stmt)) for f in self.flags)
        ):
            self._add(function, "flag", body, i, None)
        else:
            for call in _header_calls(stmt):
                if call_name(call) in ORDERING_CALLS:
                    self._add(function, call_name(call), body, i, call)
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and not _is_poll(stmt):
                self._body(inner, function)
        for handler in getattr(stmt, "handlers", []):
            self._body(handler.body, function)


def source_of(spec: SampleSpec) -> str:
    """The sample's source text."""
    return (SAMPLES_DIR / f"{spec.name}.py").read_text(encoding="utf-8")


def find_sites(spec: SampleSpec, source: str | None = None) -> list[Site]:
    """Every ordering site of the sample (or of ``source``), in source order."""
    source = source_of(spec) if source is None else source
    return [found[0] for found in _Walker(ast.parse(source), source, spec).found]


class _Resize(ast.NodeTransformer):
    """The run's size: ``launch(..., block_dim=8)`` with a literal block_dim gets
    ``spec.block_dim``; ``for launch in (1, 2):`` gets ``spec.launches`` launches."""

    def __init__(self, spec: SampleSpec) -> None:
        self.spec = spec
        self.loops = 0

    def visit_Call(self, node: ast.Call) -> ast.Call:  # noqa: N802 - ast's visitor name
        self.generic_visit(node)
        if call_name(node) == "launch" and self.spec.block_dim is not None:
            for kw in node.keywords:
                if kw.arg == "block_dim" and isinstance(kw.value, ast.Constant):
                    kw.value = ast.copy_location(ast.Constant(self.spec.block_dim), kw.value)
        return node

    def visit_For(self, node: ast.For) -> ast.For:  # noqa: N802 - ast's visitor name
        self.generic_visit(node)
        target = node.target
        if self.spec.launches and isinstance(target, ast.Name) and target.id == "launch":
            values = [ast.Constant(i) for i in range(1, self.spec.launches + 1)]
            node.iter = ast.copy_location(ast.Tuple(values, ast.Load()), node.iter)
            self.loops += 1
        return node


def _resized(spec: SampleSpec, tree: ast.Module) -> ast.Module:
    resize = _Resize(spec)
    tree = resize.visit(tree)
    if spec.launches and resize.loops != 1:
        raise ValueError(
            f"{spec.name}: launches={spec.launches} needs one `for launch in ...:` loop, "
            f"found {resize.loops}"
        )
    return tree


@functools.lru_cache(maxsize=4)
def _prepared(spec: SampleSpec, source: str) -> tuple[ast.Module, _Walker]:
    """The sample's AST with launches shrunk, and its sites: parsed and walked once per sample
    (about 50 ms for the largest), then mutated in place by :func:`_applied` one site at a time."""
    tree = ast.parse(source)
    walker = _Walker(tree, source, spec)
    return ast.fix_missing_locations(_resized(spec, tree)), walker


def prepared_cache_clear() -> None:
    """Forget the parsed samples (the tests parse afresh to compare)."""
    _prepared.cache_clear()


@contextlib.contextmanager
def _applied(spec: SampleSpec, site_id: str | None, source: str) -> Iterator[ast.Module]:
    """The prepared AST with site ``site_id`` removed; the site is put back on exit."""
    tree, walker = _prepared(spec, source)
    if site_id is None:
        yield tree
        return
    matches = [f for f in walker.found if f[0].id == site_id]
    if not matches:
        known = ", ".join(f[0].id for f in walker.found) or "none"
        raise ValueError(f"{spec.name} has no site {site_id!r}; its sites: {known}")
    _, body, i, call = matches[0]
    original = body[i]
    if call is None:
        body[i] = ast.copy_location(ast.Pass(), original)
    else:  # the call is replaced in a copy of its statement, so that the original stays intact
        copies: dict[int, Any] = {}
        body[i] = copy.deepcopy(original, copies)
        _replace_call(body[i], copies[id(call)], id(call) in walker.tests)
    try:
        yield tree
    finally:
        body[i] = original


def mutant_tree(spec: SampleSpec, site_id: str | None, source: str | None = None) -> ast.Module:
    """The sample's (or ``source``'s) AST with site ``site_id`` removed and launches shrunk."""
    source = source_of(spec) if source is None else source
    with _applied(spec, site_id, source) as tree:
        return copy.deepcopy(tree)


def mutant(spec: SampleSpec, site_id: str | None) -> types.ModuleType:
    """The sample as a module, with site ``site_id`` removed (None: the sample itself)."""
    path = SAMPLES_DIR / f"{spec.name}.py"
    with _applied(spec, site_id, source_of(spec)) as tree:
        code = compile(tree, str(path), "exec")
    module = types.ModuleType(f"mutant_{spec.name}")
    module.__file__ = str(path)
    exec(code, module.__dict__)  # noqa: S102 - our own samples
    return module


def _replace_call(stmt: ast.stmt, node: ast.expr, check: bool) -> None:
    """Replace ``node`` inside ``stmt``: a flag check's test by True, a call by the constant
    :data:`CALL_RESULT`."""
    if check:
        stmt.test = ast.copy_location(ast.Constant(True), node)
        return

    class Swap(ast.NodeTransformer):
        def visit_Call(self, found: ast.Call) -> ast.AST:  # noqa: N802 - ast's visitor name
            if found is node:
                return ast.copy_location(ast.Constant(CALL_RESULT), found)
            return self.generic_visit(found)

    Swap().visit(stmt)


@contextlib.contextmanager
def samples_on_path() -> Iterator[None]:
    """Make ``_common`` and ``_mc2`` importable, as running a sample from samples/ does."""
    added = str(SAMPLES_DIR) not in sys.path
    if added:
        sys.path.insert(0, str(SAMPLES_DIR))
    try:
        yield
    finally:
        if added:
            sys.path.remove(str(SAMPLES_DIR))


def run(
    spec: SampleSpec, module: types.ModuleType, world_size: int, **options: Any
) -> tuple[list[str], list[str]]:
    """Run the module's ``main`` on ``world_size`` emulated ranks: every rank's verdict lines and
    the kinds of the HcclWarnings the run gave (kept on the result, not shown: no report here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HcclWarning)
        result = hp.run(
            module.main,
            world_size=world_size,
            backend="emu",
            platform=getattr(module, "PLATFORM", "A2"),
            timeout=TIMEOUT,
            **getattr(module, "RUN_KWARGS", {}),
            **options,
        )
    lines = [line for lines in result for line in lines]
    return lines, [w.kind for w in result.all_warnings()]


def _evidence(err: BaseException) -> str:
    """The class names of a failed run's root causes (``HcclDeadlockError``, ...)."""
    if isinstance(err, WorldError):
        roots = err.root_causes or err.failures
        return "+".join(sorted({type(e).__name__ for e in roots.values()}))
    return type(err).__name__


def _stage(
    spec: SampleSpec, module: types.ModuleType, sizes: tuple[int, ...], **options: Any
) -> str | None:
    """What one stage reports at the first world size of ``sizes`` that reports anything: the
    error's classes, ``check FAIL``, or None (nothing at any size)."""
    for world_size in sizes:
        try:
            lines, _ = run(spec, module, world_size, **options)
        except (WorldError, HcclScheduleError) as err:
            return _evidence(err)
        if any(FAIL_LINE.match(line) for line in lines):
            return "check FAIL"
    return None


def missed_explore() -> int:
    """The schedules that confirm a not-catchable verdict in the test suite
    (:data:`MISSED_EXPLORE_ENV`)."""
    text = os.environ.get(MISSED_EXPLORE_ENV, str(MISSED_EXPLORE))
    if not text.isdigit() or not 1 <= int(text) <= EXPLORE:
        raise ValueError(f"{MISSED_EXPLORE_ENV}={text!r}: expected a number of 1 to {EXPLORE}")
    return int(text)


def judge(spec: SampleSpec, site_id: str, explore: int = EXPLORE) -> Verdict:
    """Who reports the mutant without ``site_id``: the default schedule, an exploration of
    ``explore`` schedules, or no one."""
    spec = spec.for_site(site_id)
    with samples_on_path():
        module, sizes = mutant(spec, site_id), spec.sizes(site_id)
        found = _stage(spec, module, sizes)
        if found is not None:
            return Verdict("default", found)
        if not spec.explorable:
            return Verdict("missed", "")
        found = _stage(spec, module, sizes, explore=explore)
    return Verdict("explore", found) if found is not None else Verdict("missed", "")


#: Expected verdicts: sample -> site id -> (stage, evidence; for ``missed``, why).
Expected = dict[str, dict[str, tuple[str, str]]]


def score_rows(expected: Expected) -> list[str]:
    """The doc's "Mutation score" table: per sample, sites and who catches them."""
    rows = [
        "| sample | sites | caught by the default schedule | caught by explore=16 | not catchable |",
        "|---|---|---|---|---|",
    ]
    totals = [0, 0, 0, 0]
    for sample, sites in expected.items():
        stages = [stage for stage, _ in sites.values()]
        counts = [len(stages), *(stages.count(s) for s in ("default", "explore", "missed"))]
        totals = [t + c for t, c in zip(totals, counts, strict=True)]
        rows.append(f"| `{sample}` | " + " | ".join(map(str, counts)) + " |")
    rows.append("| all | " + " | ".join(map(str, totals)) + " |")
    return rows


def uncatchable_lines(expected: Expected) -> list[str]:
    """The doc's list of uncatchable mutants: one bullet per reason, one sub-bullet per sample."""
    by_reason: dict[str, dict[str, list[str]]] = {}
    for sample, sites in expected.items():
        for site_id, (stage, reason) in sites.items():
            if stage == "missed":
                by_reason.setdefault(reason, {}).setdefault(sample, []).append(site_id)
    lines = []
    for reason, samples in by_reason.items():
        lines.append(f"- {reason}:")
        lines += [
            f"  - `{sample}`: " + ", ".join(f"`{s}`" for s in ids)
            for sample, ids in samples.items()
        ]
    return lines


def main() -> None:
    """Print every site's verdict next to the table's, then the doc's score table and list."""
    from test_mutations import EXPECTED, SPECS

    for spec in SPECS.values():
        if not (SAMPLES_DIR / f"{spec.name}.py").exists():
            print(f"{spec.name}: not in this checkout")
            continue
        for site in find_sites(spec):
            got = judge(spec, site.id)
            want = EXPECTED[spec.name].get(site.id)
            same = want is not None and want[0] == got.stage
            same = same and (got.stage == "missed" or want[1] == got.evidence)
            note = "" if same else f"   <- the table says {want}"
            print(f"{spec.name} {site.id}: {got.stage} {got.evidence!r}{note}  | {site.text}")
    print("\n".join(["", *score_rows(EXPECTED), "", *uncatchable_lines(EXPECTED)]))


if __name__ == "__main__":
    main()
