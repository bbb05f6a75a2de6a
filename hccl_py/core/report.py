"""Warnings as a first-class outcome: one way for any layer to report what hardware carries on with.

:func:`warn` builds an :class:`~hccl_py.core.errors.HcclWarning`, keeps it on the
calling rank (``hp.run(...).warnings``), shows it through Python's
``warnings`` pointing at the user's own line, and raises it as an
:class:`~hccl_py.core.errors.HcclUsageError` when the run's ``warnings_as_errors``
names its kind.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from types import FrameType

from .current import current_rank as current_rank_context
from .errors import HcclUsageError, HcclWarning
from .where import PACKAGE_DIR

#: File name -> whether it is hccl_py's (a frame then costs one lookup, not an abspath).
_PACKAGE_FILES: dict[str, bool] = {}


def in_package(frame: object) -> bool:
    """Whether ``frame`` runs hccl_py's code: a file under the package folder, or a module of
    the package that lives elsewhere (the emulator's ``emu/`` folder of a source checkout,
    installed as ``hccl_py.backends.emu``), so that a report names the same line whichever
    way hccl_py was installed."""
    filename = frame.f_code.co_filename
    known = _PACKAGE_FILES.get(filename)
    if known is None:
        name = frame.f_globals.get("__name__") or ""
        known = os.path.abspath(filename).startswith(PACKAGE_DIR) or name.startswith("hccl_py.")
        _PACKAGE_FILES[filename] = known
    return known


#: What each hp.run call has shown of its warnings, by file (Python's registries, one per
#: module, outlive the call: the same warning of a later run in this process was not shown).
_SHOWN: dict[str, dict] = {}


def new_run() -> None:
    """A new hp.run call: show its warnings as if none had been shown (its explored schedules
    share it: a warning each of them gives is shown once)."""
    _SHOWN.clear()


def _user_code() -> FrameType | None:
    """The innermost frame of the caller's code outside hccl_py (None: there is none)."""
    frame = sys._getframe(1)
    while frame is not None and in_package(frame):
        frame = frame.f_back
    return frame


def _show(warning: HcclWarning) -> None:
    """``warnings.warn`` of ``warning`` at the caller's code outside hccl_py, with the run's
    registry of the caller's file.

    As ``warnings.warn``, it passes no module globals: with them, Python takes the source line
    from the module's loader, whose source is not that of code made by ``exec`` in the
    module's namespace (or of a file changed since), and a line beyond its end raised an
    IndexError instead of the warning."""
    frame = _user_code()
    if frame is None:  # as warnings.warn places a warning with no frame
        filename, lineno, place = "sys", 1, sys.__dict__
    else:
        filename, lineno, place = frame.f_code.co_filename, frame.f_lineno, frame.f_globals
    module = place.get("__name__")
    warnings.warn_explicit(
        warning,
        HcclWarning,
        filename,
        lineno,
        module if isinstance(module, str) else "<string>",
        _SHOWN.setdefault(filename, {}),
    )


#: `` at 0x7f...`` in a default repr (``<Tiling object at 0x7f...>``): an address, which no two
#: runs share.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def plain_repr(value: object) -> str:
    """``repr(value)`` without the addresses of default reprs: the same text in every run."""
    return _ADDRESS.sub("", repr(value))


def user_frame() -> str:
    """Where the caller's code (outside hccl_py) made the current call: ``file:line in fn``."""
    frame = _user_code()
    if frame is None:
        return "an unknown place"
    code = frame.f_code
    return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"


#: Every kind of :class:`HcclWarning`, with what it means (docs/troubleshooting.md#hcclwarning
#: shows each one).
KINDS: dict[str, str] = {
    "alg-config": "the host's algConfig string names no algorithm the op knows",
    "batch-write-server": (
        "an Atlas A2 BatchWrite item towards the own rank or a rank of the same server, which "
        "BatchWrite.md forbids and the shipping fullmesh MoE kernels send; hccl_py copies it"
    ),
    "buffer-race": "the buffer race check cannot decide: a numpy view of bytes a round will write",
    "cc-tiling-offset": (
        "a host cc tiling placed before its init tiling or 4 GiB past it: its offset is "
        "stored as a wrapped uint32, as the C++ GetTiling stores it"
    ),
    "ccu-tiling-types": (
        "a CCU Prepare whose dataType or reduce op differs from its cc tiling's, which the CCU "
        "client uses instead (not a type as wide on an op that does not reduce)"
    ),
    "compute-only": (
        "the init tiling's debugMode is 1 (SetDebugMode(1), HCCL_ONLY_COMPUTE): the kernel's "
        "collectives move no data and their Waits return at once"
    ),
    "dtype-mismatch": "a Prepare's dataType is not the dtype of a tensor passed as its buffer",
    "extra-commit": "a Commit beyond the handle's repeat; the official client ignores it",
    "finalize-unordered": (
        "a core's Wait is not ordered before the sending core's Finalize by a SyncAll: "
        "Finalize's counter reset may come first on hardware, and that Wait hangs"
    ),
    "group-name": "a tiling's groupName is not the domain of the Hccl object that uses it",
    "hcomm-uncommitted": (
        "a kernel returned with Hcomm requests posted with commit=False that no Commit rang: "
        "they run only if a later launch rings the channel's doorbell"
    ),
    "message-slots": "an InterHcclGroupSync beyond the domain's message slots is ignored",
    "overlap": "overlapping receive ranges, run with overlap='warn'",
    "repeated-init": "a second Init of an initialised Hccl object is ignored",
    "wait-not-committed": "a Wait with no committed round left returns -1 at once",
    "wait-order": "Waits of different handles out of Prepare order (non-strict runs)",
    "window-race": "the window race check cannot decide: the kernel holds a numpy view of a window",
    "window-rank": "GetWindows*Addr of a rank outside the domain gives the null address",
}


def warn(kind: str, reason: str, **facts: object) -> HcclWarning:
    """Report a warning of ``kind`` on the calling rank (``rank`` is filled in when omitted)."""
    if kind not in KINDS:
        raise ValueError(f"unknown warning kind {kind!r}; add it to hccl_py.core.report.KINDS")
    ctx = current_rank_context(required=False)
    if ctx is not None and facts.get("rank") is None:
        facts["rank"] = ctx.rank
    warning = HcclWarning(kind, reason, **facts)
    if ctx is not None and ctx.config.raises(kind):
        raise HcclUsageError(f"{reason} [{kind}, raised by warnings_as_errors]", **facts)
    if ctx is not None:
        ctx.warnings.append(warning)
    _show(warning)
    return warning
