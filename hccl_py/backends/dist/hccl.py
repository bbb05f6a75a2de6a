"""The "hccl" backend: one process per Ascend NPU over torch_npu's HCCL process group.

It runs the gloo backend's code (:class:`~.server.DistServer`) with native
reductions and no task check by default; what is NPU-specific (importing
torch_npu, binding the device, HCCL's execution limit) is in :mod:`.npu`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import npu
from .server import PG_MARGIN_S, DistBackend


class HcclBackend(DistBackend):
    """One process per Ascend NPU over torch_npu's HCCL process group."""

    name = "hccl"
    pg_backend = "hccl"
    check_tasks = False
    exact = False
    #: torch_npu completes a call's future once the call is queued on its HCCL stream.
    device_async = True

    def pg_timeout(self, seconds: float) -> float:
        """Above HCCL's own execution limit (``HCCL_EXEC_TIMEOUT``, 1836 s by default):
        torch_npu warns at every group made with less, and its watchdog would end the
        process without hccl_py's report of who is missing."""
        return max(seconds, npu.exec_timeout() + PG_MARGIN_S)

    def __init__(self) -> None:
        npu.torch_npu()

    def bind_device(self, local_rank: int) -> torch.device:
        return npu.bind_device(local_rank)

    def thread_binder(self, device: torch.device) -> Callable[[], None]:
        return npu.thread_binder(device)
