"""The client's rules table (issue 24, item 6): hccl_py.core.rules.RULES is what the client does.

- every rule id the code names is a row, and every row is named by the code;
- each row is consistent (a raise names an error class, a warning a kind of
  ``report.KINDS``, findings that always raise do so in lenient runs too);
- docs/troubleshooting.md shows the table as generated from RULES;
- a few rows by behaviour, and a changed row changes what the client does.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import Any

import cases
import pytest
from expect import expects_warning

import hccl_py as hp
from hccl_py import HCCL_FAILED, Hccl
from hccl_py.client.binding import UNUSABLE
from hccl_py.core.report import KINDS
from hccl_py.core.rules import ACTIONS, RAISE, RETURN, RULES, WARN, rule

ROOT = Path(__file__).resolve().parent.parent
#: Calls whose first argument is a rule id: the one failure function (``breach``, also as
#: ``Failures.breach`` and its local aliases) and InvalidCall, which the client passes to it.
RULE_CALLS = {"breach", "InvalidCall"}
#: First arguments that are not a literal id: where an id is passed on, not chosen.
PASSED_ON = {"rule_id", "bad.rule", "unusable[0]"}


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _literal_ids(arg: ast.expr) -> list[str] | None:
    """The ids a first argument names: a literal, or ``"a" if ... else "b"``; None otherwise."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.IfExp):
        both = (_literal_ids(arg.body), _literal_ids(arg.orelse))
        return None if None in both else [*both[0], *both[1]]
    return None


def rule_uses(source: str) -> tuple[set[str], list[str]]:
    """(rule ids named by the failure calls of ``source``, calls whose id is not literal)."""
    named: set[str] = set()
    unnamed: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and _name(node.func) in RULE_CALLS and node.args):
            continue
        ids = _literal_ids(node.args[0])
        if ids is not None:
            named.update(ids)
        elif ast.unparse(node.args[0]) not in PASSED_ON:
            unnamed.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return named, unnamed


def _code_uses() -> tuple[set[str], dict[str, list[str]]]:
    named: set[str] = set(UNUSABLE)
    unnamed: dict[str, list[str]] = {}
    for path in sorted([*(ROOT / "hccl_py").rglob("*.py"), *(ROOT / "emu").rglob("*.py")]):
        found, missing = rule_uses(path.read_text(encoding="utf-8"))
        named |= found
        if missing:
            unnamed[str(path.relative_to(ROOT))] = missing
    return named, unnamed


def test_the_scan_reads_rule_ids() -> None:
    source = (
        "breach('a', 'x')\nself._failures.breach('b' if s else 'c', 'y')\n"
        "raise InvalidCall('d', 'z')\nbreach(rule_id, r)\nbreach(other, r)\nprint('e')\n"
    )
    named, unnamed = rule_uses(source)
    assert named == {"a", "b", "c", "d"}
    assert unnamed == ["line 5: breach(other, r)"]


def test_every_rule_the_code_names_is_a_row_and_every_row_is_named() -> None:
    named, unnamed = _code_uses()
    assert unnamed == {}, "every failure call names its rule id as a literal"
    assert sorted(named - set(RULES)) == [], "rule ids missing from hccl_py.core.rules.RULES"
    assert sorted(set(RULES) - named) == [], "rows of RULES that no code names"


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_each_row_is_consistent(rule_id: str) -> None:
    row = RULES[rule_id]
    assert {row.strict, row.lenient} <= set(ACTIONS)
    assert row.means
    if RAISE in (row.strict, row.lenient):
        assert row.error is not None and issubclass(row.error, hp.HcclError)
    if WARN in (row.strict, row.lenient) or row.error is None:
        assert row.warning in KINDS, f"{rule_id}: warning kind {row.warning!r} not in KINDS"
    if row.error is not None and row.error.always_raise:
        assert row.strict == row.lenient == RAISE, f"{rule_id}: {row.error.__name__} always raises"
    if row.strict == RETURN or row.strict == WARN:
        assert row.lenient != RAISE, f"{rule_id}: a lenient run is never stricter"


def test_an_unknown_rule_id_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown client rule 'no-such-rule'.*RULES"):
        rule("no-such-rule")


def _gen() -> Any:
    spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "tools/gen_api_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_troubleshooting_shows_the_table() -> None:
    gen = _gen()
    text = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    start, end = text.index(gen.RULES_BEGIN), text.index(gen.RULES_END) + len(gen.RULES_END)
    assert text[start:end] == gen.render_rules_table(), "run python tools/gen_api_docs.py"
    for rule_id, row in RULES.items():
        line = next(li for li in text[start:end].splitlines() if li.startswith(f"| `{rule_id}` |"))
        assert row.means in line
        raises = RAISE in (row.strict, row.lenient)
        assert raises == (row.error is not None and f"raises `{row.error.__name__}`" in line)


# ------------------------------------------------------------------ behaviour
def _kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list, extra_commit: bool) -> None:
    """One AllGather (Commit twice when ``extra_commit``), Wait of handle 7 unless so."""
    h = cases.init_hccl(Hccl(), tilingGM, ops=("AllGather",))
    hd = h.AllGather[True](xGM, yGM, 4, hp.HCCL_DATA_TYPE_FP32, 0)
    if extra_commit:
        h.Commit(hd)
    else:
        record.append((h.Wait(7), h.last_error))
    record.append((h.Wait(hd), h.last_error))
    h.Finalize()


def _run(strict: bool, extra_commit: bool = False) -> Any:
    return hp.run(
        cases.probe,
        world_size=1,
        backend="emu",
        timeout=cases.RUN_TIMEOUT,
        strict=strict,
        args=(_kernel, extra_commit),
    )


def test_strict_raises_the_rows_error() -> None:
    with pytest.raises(hp.WorldError) as info:
        _run(strict=True)
    err = info.value.failures[0]
    assert type(err) is RULES["unknown-handle"].error
    assert err.handle == 7 and "Wait: handle 7 is out of range" in str(err)


def test_lenient_returns_the_cpp_result_with_last_error() -> None:
    ((record, _),) = _run(strict=False)
    (ret, why), after = record
    assert ret == HCCL_FAILED and "[rank 0, domain hccl_world_group, handle 7] Wait:" in why
    assert after == (0, None)


@expects_warning("extra-commit")
@pytest.mark.parametrize("strict", [True, False])
def test_a_carry_on_rule_warns_in_both_modes(strict: bool) -> None:
    out = _run(strict=strict, extra_commit=True)
    assert [w.kind for w in out.all_warnings()] == ["extra-commit"]
    ((record, _),) = out
    assert record == [(0, None)]


def test_a_changed_row_changes_what_the_client_does(monkeypatch: pytest.MonkeyPatch) -> None:
    swapped = dataclasses.replace(RULES["unknown-handle"], strict=RETURN, lenient=RAISE)
    monkeypatch.setitem(RULES, "unknown-handle", swapped)
    ((record, _),) = _run(strict=True)
    assert record[0][0] == HCCL_FAILED
    with pytest.raises(hp.WorldError, match="handle 7"):
        _run(strict=False)
