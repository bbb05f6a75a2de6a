"""Exception classes: every failure names the rank, domain, handle, op and round it concerns."""

from __future__ import annotations

import ast

from .grouping import label
from .where import raise_site


class HcclError(RuntimeError):
    """A failed HCCL call or a misuse detected by hccl_py.

    The message says what went wrong; the attributes give the same facts for
    programs (any of them may be None when it does not apply).
    ``always_raise`` marks findings that hardware would hang or silently
    corrupt memory on: they raise even with ``strict=False``, where calls that
    the C++ API rejects return its error codes instead.
    """

    always_raise = False

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        domain: str | None = None,
        handle: int | None = None,
        op: str | None = None,
        round: int | None = None,  # noqa: A002 - the API's own word
        expected: object = None,
        actual: object = None,
    ) -> None:
        self.reason = message
        self.rank = rank
        self.domain = domain
        self.handle = handle
        self.op = op
        self.round = round
        self.expected = expected
        self.actual = actual
        super().__init__(self._format())

    def _format(self) -> str:
        return describe(self.reason, self.__dict__)


def describe(reason: str, facts: dict) -> str:
    """``[rank r, domain d, handle h, op o, round k] reason (expected e, got a)``, the known parts
    (each as :func:`shown`)."""
    where = [
        f"{name} {shown(facts.get(name))}"
        for name in ("rank", "domain", "handle", "op", "round")
        if facts.get(name) is not None
    ]
    text = f"[{', '.join(where)}] {reason}" if where else reason
    said = [
        f"{word} {shown(facts.get(name))}"
        for word, name in (("expected", "expected"), ("got", "actual"))
        if facts.get(name) is not None
    ]
    return f"{text} ({', '.join(said)})" if said else text


def shown(value: object) -> str:
    """``value`` as a report shows a fact: its ``str``, but quoted (its repr) for a string that
    would read as another value: ``'300'`` is not the number 300, nor ``'None'`` None, and
    an empty or padded string stays visible. Other strings are the callers' own wording
    (``< 8``, ``[0, 16)``, an op's name) or plain names, shown as they are."""
    if isinstance(value, str) and _reads_as_other(value):
        return repr(value)
    return str(value)


def _reads_as_other(text: str) -> bool:
    """Whether ``text`` shown unquoted could be taken for a value that is not this string."""
    if not text or text != text.strip() or not text.isprintable():
        return True
    try:
        float(text)  # a number, nan, inf
    except ValueError:
        pass
    else:
        return True
    try:
        ast.literal_eval(text)  # an int in any base, None, True, a list, a quoted string ...
    except Exception:  # noqa: BLE001 - anything that is not a Python literal
        return False
    return True


class HcclWarning(UserWarning):
    """Something hardware accepts and carries on with, but that is likely a mistake.

    The official client logs these and returns (a Commit beyond ``repeat``, a
    second Init, a Wait of a round this core did not commit). ``kind`` names
    the rule ("extra-commit" ...): ``hp.run(..., warnings_as_errors={kind})``
    raises it as an :class:`HcclUsageError` instead, for CI. The attributes are
    those of :class:`HcclError`.
    """

    def __init__(self, kind: str, reason: str, **facts: object) -> None:
        self.kind = kind
        self.reason = reason
        for name in ("rank", "domain", "handle", "op", "round", "expected", "actual"):
            setattr(self, name, facts.get(name))
        super().__init__(f"{describe(reason, facts)} [{kind}]")

    def facts(self) -> dict[str, object]:
        """The rank/domain/handle/op/round/expected/actual fields that are set."""
        names = ("rank", "domain", "handle", "op", "round", "expected", "actual")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def __reduce__(self) -> tuple:
        return (_rebuild_warning, (self.kind, self.reason, self.facts()))


def _rebuild_warning(kind: str, reason: str, facts: dict) -> HcclWarning:
    return HcclWarning(kind, reason, **facts)


class HcclUsageError(HcclError):
    """A call the C++ API rejects (it returns -1 or does nothing there)."""


class HcclBoundsError(HcclError):
    """A task reads or writes outside the allocation its GM address points into."""

    always_raise = True


class HcclOverlapError(HcclError):
    """Receive ranges of one task overlap (rounds or rank blocks write the same bytes)."""

    always_raise = True


class HcclSharedMemoryError(HcclError):
    """Two emulated ranks use one buffer and at least one of them writes it (emulator only)."""

    always_raise = True


class HcclMismatchError(HcclError):
    """Ranks of one domain issued different tasks at the same position."""

    always_raise = True


class HcclDeadlockError(HcclError):
    """No thread of the world can make progress; the message lists who waits for what."""

    always_raise = True


class HcclRaceError(HcclError):
    """An access that nothing orders with another writer of the same bytes.

    A read of window bytes that a peer writes (``poison=True``), or a kernel access
    of a collective buffer that a committed round reads or writes before the Wait
    that orders the round (every emulator run).
    """

    always_raise = True


class HcclTimeoutError(HcclError):
    """A blocking call did not finish within the configured timeout."""

    always_raise = True


class HcclUnfinishedError(HcclError):
    """A kernel returned with tasks left uncommitted, unwaited or unfinalized."""

    always_raise = True


class HcclCoreError(HcclError):
    """A call was made from the wrong core (type or block) of a kernel."""


class HcclRunnerStartError(HcclError):
    """The OS refused the thread of an emulator runner: the world (or a launch) needs more
    threads than it gives (``refusal`` is what the thread start said); or gloo ranks cannot
    be started (the fork server's folder cannot be made again)."""

    always_raise = True
    refusal = ""


class UnknownBackendError(ValueError, RuntimeError):
    """A backend name hccl_py does not know: a ValueError, as hp.run's other bad arguments,
    and the RuntimeError framework-ops.md names for an invalid backend."""


class HcclPeerError(HcclError):
    """This rank was stopped because another rank failed."""

    always_raise = True


class InvalidCall(Exception):  # noqa: N818 - internal control flow, never reaches users
    """A Prepare argument or task is invalid: the client turns it into -1 or an HcclError.

    ``rule`` is the id of the client rule it breaks (:data:`hccl_py.core.rules.RULES`,
    which gives its error class and outcome); ``facts`` its keyword fields
    (``round``, ``expected``, ``actual`` ...).
    """

    def __init__(self, rule: str, reason: str, **facts: object) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason
        self.facts = facts


def error_message(error: BaseException) -> str:
    """``str(error)``; one whose ``str()`` fails reads as Python's own traceback writes it,
    ``<exception str() failed>``, instead of failing the report."""
    try:
        return str(error)
    except Exception:  # noqa: BLE001 - the exception's own __str__: anything
        return "<exception str() failed>"


def error_text(error: BaseException) -> str:
    """``Type: message`` of ``error`` (:func:`error_message`)."""
    return f"{type(error).__name__}: {error_message(error)}"


class WorldError(HcclError):
    """Raised by :func:`hccl_py.run` when one or more ranks failed.

    ``failures`` maps each failed rank to its exception; the message lists them
    all, root causes first, with the traceback of any exception that is not an
    HcclError (a bug in the user's code rather than a reported misuse). With
    ``me`` (one process per rank, each raising this), only rank ``me``'s own
    traceback is shown, and a rank stopped by another's failure lists just the
    root causes and its own line, so a job's output has each traceback once.
    """

    def __init__(
        self, failures: dict[int, BaseException], world_size: int, me: int | None = None
    ) -> None:
        self.failures = dict(sorted(failures.items()))
        roots = {r: e for r, e in self.failures.items() if not isinstance(e, HcclPeerError)}
        lines = [f"{len(self.failures)} of {world_size} ranks failed:"]
        if me is not None and me not in roots and roots:
            # One process per rank, every one raising this: the root cause's own process
            # shows its traceback; this one says what stopped it, in one line per root cause.
            lines += [f"  rank {r}: {error_text(e)}" for r, e in roots.items()]
            if me in self.failures:
                lines.append(f"  rank {me} (this process): {error_text(self.failures[me])}")
            super().__init__("\n".join(lines))
            return
        # Ranks that failed with the same report share one entry ("ranks 0-3: ...").
        entries: dict[object, tuple[list[int], str, list[str]]] = {}
        for r, e in list(roots.items()) + [
            (r, e) for r, e in self.failures.items() if r not in roots
        ]:
            text = error_text(e)
            tb = getattr(e, "hccl_traceback", None)
            shown = tb and r in roots and me in (None, r) and not isinstance(e, HcclError)
            extra = ["    " + line for line in tb.rstrip().splitlines()] if shown else []
            if tb and r in roots and not shown:
                site = raise_site(tb)
                if site is not None and site.split(" in ")[0] not in text:
                    text += f"\n    at {site}"
            entry = entries.setdefault(r if extra else text, ([], text, extra))
            entry[0].append(r)
        for ranks, text, extra in entries.values():
            lines.append(f"  {label(ranks)}: {text}")
            lines.extend(extra)
        super().__init__("\n".join(lines))

    @property
    def root_causes(self) -> dict[int, BaseException]:
        """The failures that were not caused by another rank's failure."""
        return {r: e for r, e in self.failures.items() if not isinstance(e, HcclPeerError)}


class ForgedValueError(HcclError):
    """A value in the store that this run did not write, or cannot prove it wrote: never loaded."""
