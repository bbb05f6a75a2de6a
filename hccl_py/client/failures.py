"""How a client call fails: one function applies the rule the call broke.

Every failure of the client names a rule of :data:`hccl_py.core.rules.RULES`;
:func:`breach` looks it up and does what its row says for this run's mode
(raise its error class, return the C++ result, or return it with an
:class:`~hccl_py.core.errors.HcclWarning`). :class:`Failures` is one Hccl
object's record of its last failure (``Hccl.last_error``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core import report
from ..core.constants import HCCL_FAILED, HCCL_SUCCESS, INVALID_HANDLE_ID
from ..core.errors import HcclWarning, InvalidCall
from ..core.rules import RAISE, RETURN, WARN, rule
from ..kernel.context import current_rank_context
from ..kernel.cores import CoreContext

if TYPE_CHECKING:
    from .handle import Handle


def breach(
    rule_id: str,
    reason: str,
    ret: Any = HCCL_FAILED,
    note: Callable[[str], None] | None = None,
    alone: bool = False,
    **facts: Any,
) -> Any:
    """A call broke rule ``rule_id``: raise, or return ``ret`` (with a warning), as its row says.

    ``facts`` (``domain``, ``handle``, ``op``, ``round``, ``expected``, ``actual``)
    name what the call concerns; ``rank`` is the calling rank unless given.
    ``note`` receives the text that says why (the error's, or the warning's).
    ``alone``: only the sending core can find this (the other cores of the kernel
    got a handle id for the same call), so a lenient run raises rather than return.
    """
    row = rule(rule_id)
    ctx = current_rank_context(required=False)
    facts = {"rank": ctx.rank if ctx else None} | facts
    action = row.strict if ctx is None or ctx.config.strict else row.lenient
    if alone and action == RETURN:
        action = RAISE
        reason += (
            " (only the sending core can check this: the other cores of the kernel got a "
            "handle id for this call, so it is an error even with strict=False)"
        )
    error = None
    if row.error is not None and action != WARN:
        error = row.error(reason, **facts)
        text = str(error)
    else:
        text = str(HcclWarning(row.warning, reason, **facts))
    if note is not None:
        note(text)
    if action == RAISE:
        raise error
    if action == WARN:
        report.warn(row.warning, reason, **facts)
    return ret


class Failures:
    """One Hccl object's failures: each through :func:`breach`, the last one kept."""

    def __init__(self, domain: Callable[[], str | None]) -> None:
        #: Why the last call failed or carried on (None after a call that succeeded).
        self.last_error: str | None = None
        self._domain = domain

    def _note(self, text: str) -> None:
        self.last_error = text

    def breach(
        self, rule_id: str, reason: str, ret: Any = HCCL_FAILED, alone: bool = False, **facts: Any
    ) -> Any:
        """:func:`breach` for this object's domain, kept as its ``last_error``."""
        return breach(rule_id, reason, ret, self._note, alone, domain=self._domain(), **facts)

    def unusable(self, binding: Any, call: str, sends: bool = True, **facts: Any) -> bool:
        """Whether ``binding`` (the object's :class:`~.binding.Binding`) cannot serve ``call``
        (not initialised, finalized ...); if so the breach is made (raised, or warned and kept
        as ``last_error``), and the call returns its failure value."""
        unusable = binding.unusable(sends=sends)
        if unusable:
            self.breach(unusable[0], f"{call}: {unusable[1]}", None, **facts)
        return bool(unusable)

    def refuse(self, name: str, bad: InvalidCall, alone: bool = False, **facts: Any) -> int:
        """A Prepare-like call ``name`` that ``bad`` says may not run: -1, or its error.

        ``alone``: only the sending core could find it (see :func:`breach`).
        """
        return self.breach(
            bad.rule,
            f"{name}: {bad.reason}",
            INVALID_HANDLE_ID,
            alone,
            op=name,
            **facts,
            **bad.facts,
        )

    def wrong_core(self, core: CoreContext, info: Handle, h: int, op: str) -> int:
        """A Wait from a core of the other kind than the one that prepared handle ``h``."""
        return self.breach(
            "wrong-core",
            f"Wait from an {core.kind.name} core of a handle prepared on {info.kind.name}",
            handle=h,
            op=op,
            round=info.waits,
            expected=info.kind.name,
            actual=core.kind.name,
        )

    def ok(self, value: Any = HCCL_SUCCESS) -> Any:
        """A call that succeeded: no error left; returns ``value``."""
        self.last_error = None
        return value
