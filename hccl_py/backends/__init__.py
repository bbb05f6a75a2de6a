"""The backends: one server per way of running ranks, all behind :mod:`hccl_py.server.protocol`.

- :mod:`.emu` (from the repository's ``emu/`` folder): every rank runs in this
  process, one shared emulated server, every misuse reported.
- :mod:`.dist`: each rank its own process over torch.distributed; the "gloo" and
  "hccl" backends.

Modules are imported on use, so ``import hccl_py`` never touches torch_npu.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..core.errors import UnknownBackendError

if TYPE_CHECKING:
    from ..server.protocol import Backend

#: Backend name -> "module:Class"; modules are imported only when used.
BACKENDS: dict[str, str] = {
    "emu": "hccl_py.backends.emu.backend:EmuBackend",
    "gloo": "hccl_py.backends.dist.gloo:GlooBackend",
    "hccl": "hccl_py.backends.dist.hccl:HcclBackend",
}


def get_backend(name: str) -> Backend:
    """Instantiate the backend registered under ``name``."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise UnknownBackendError(
            f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}"
        ) from None
    module_name, _, cls_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RuntimeError(f"backend {name!r} is not available: {exc}") from exc
    return getattr(module, cls_name)()
