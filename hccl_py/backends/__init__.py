"""The backends: one server per way of running ranks, all behind :mod:`hccl_py.server.protocol`.

- :mod:`.emu` (from the repository's ``emu/`` folder): every rank runs in this
  process, one shared emulated server, every misuse reported.
- :mod:`.dist`: each rank its own process over torch.distributed; the "gloo" and
  "hccl" backends.

Modules are imported on use, so ``import hccl_py`` never touches torch_npu.

What each backend is (:data:`BACKENDS`) lives in :mod:`hccl_py.core.backend_info`, which
the command line reads without importing any backend.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..core.backend_info import BACKENDS, BackendInfo, backend_info

if TYPE_CHECKING:
    from ..server.protocol import Backend


def get_backend(name: str) -> Backend:
    """Instantiate the backend registered under ``name``."""
    module_name, _, cls_name = backend_info(name).target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RuntimeError(f"backend {name!r} is not available: {exc}") from exc
    return getattr(module, cls_name)()


__all__ = ["BACKENDS", "BackendInfo", "backend_info", "get_backend"]
