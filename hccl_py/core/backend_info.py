"""What each backend is, for ``hp.run`` and the command line, before any backend is imported.

The backends themselves live in :mod:`hccl_py.backends`; here is only their registry: where
each one is, and the few facts in which they differ for their callers, so that no caller
branches on a backend's name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from .errors import UnknownBackendError


@dataclass(frozen=True)
class BackendInfo:
    """What ``hp.run`` and the command line know of a backend before importing it: where it
    is, and the facts in which backends differ for them (none of them asks for a name)."""

    #: ``"module:Class"`` of its :class:`~hccl_py.server.protocol.Backend`.
    target: str
    #: Every rank is a runner of this process (the emulator): its schedules can be seeded
    #: and explored, and its ranks share one host.
    in_process: bool = False
    #: One rank per device: the world is the launcher's, buffers are in device memory.
    on_device: bool = False
    #: A module it needs besides hccl_py's own, and what that module needs in turn.
    requires: tuple[str, str] | None = None
    #: ``"module:function"`` that reads its own settings from the environment, as its ranks
    #: read them (a mistake then stops the run before any rank starts).
    settings: str = ""

    def check_settings(self) -> None:
        """Read the backend's own settings from the environment (ValueError for a bad one)."""
        module_name, _, function = self.settings.partition(":")
        if module_name:
            getattr(importlib.import_module(module_name), function)()


#: Where ranks run when nothing says (no ``backend=``, ``--backend``, ``HCCL_PY_BACKEND`` or
#: launcher): the emulator.
DEFAULT_BACKEND = "emu"
#: Backend name -> what it is; modules are imported only when used.
BACKENDS: dict[str, BackendInfo] = {
    "emu": BackendInfo(
        "hccl_py.backends.emu.backend:EmuBackend",
        in_process=True,
        settings="hccl_py.backends.emu.runners:check_settings",
    ),
    "gloo": BackendInfo(
        "hccl_py.backends.dist.gloo:GlooBackend",
        settings="hccl_py.backends.dist.settings:check_settings",
    ),
    "hccl": BackendInfo(
        "hccl_py.backends.dist.hccl:HcclBackend",
        on_device=True,
        requires=("torch_npu", "Ascend NPUs and the CANN toolkit"),
        settings="hccl_py.backends.dist.settings:check_settings",
    ),
}


def backend_info(name: object) -> BackendInfo:
    """What the backend registered under ``name`` is (:class:`UnknownBackendError` otherwise)."""
    info = BACKENDS.get(name) if isinstance(name, str) else None
    if info is None:
        raise UnknownBackendError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    return info
