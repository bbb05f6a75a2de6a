"""Everything NPU-specific: importing torch_npu and binding a rank to its device.

torch_npu registers the "npu" device and the "hccl" process-group backend with
torch when imported. Its import fails without the CANN toolkit (its shared
libraries come from ``set_env.sh``), so it is imported only here, only when
the "hccl" backend is chosen, and a failure says what is missing.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Callable
from types import ModuleType

import torch


def torch_npu() -> ModuleType:
    """Import torch_npu, or raise a RuntimeError that says how to make it importable."""
    if importlib.util.find_spec("torch_npu") is None:
        raise RuntimeError(
            "backend 'hccl' needs torch_npu, which is not installed: install the torch_npu "
            f"release that matches torch {torch.__version__} (pip install torch_npu) on a "
            "machine with Ascend NPUs and the CANN toolkit; use backend 'gloo' on CPUs"
        )
    try:
        import torch_npu as module
    except Exception as exc:  # noqa: BLE001 - any import failure gets the same advice
        raise RuntimeError(
            f"backend 'hccl' needs torch_npu, which is installed but cannot be imported "
            f"({type(exc).__name__}: {exc}). torch_npu needs the CANN toolkit: source "
            "<CANN install dir>/set_env.sh (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh) "
            "so that its libraries are found, and a torch_npu release matching torch "
            f"{torch.__version__}"
        ) from exc
    return module


def npus_visible() -> bool:
    """Whether torch_npu imports and sees at least one NPU (False, with a warning, if it is broken)."""
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        return bool(torch_npu().npu.is_available())
    except RuntimeError as exc:
        warnings.warn(f"{exc}; falling back to backend 'gloo'", stacklevel=3)
        return False


def bind_device(local_rank: int) -> torch.device:
    """Make NPU ``local_rank`` the current device of this thread and return it."""
    npu = torch_npu().npu
    count = npu.device_count()
    if not 0 <= local_rank < count:
        raise RuntimeError(
            f"local rank {local_rank} has no NPU: this host shows {count} NPU(s) "
            "(check LOCAL_RANK / DEVICE_ID and ASCEND_RT_VISIBLE_DEVICES)"
        )
    npu.set_device(local_rank)
    return torch.device("npu", local_rank)


def thread_binder(device: torch.device) -> Callable[[], None]:
    """A function that makes ``device`` current in the calling thread (the current NPU is per thread)."""
    npu = torch_npu().npu
    return lambda: npu.set_device(device)


#: HCCL's limit on one call's execution, in seconds, where ``HCCL_EXEC_TIMEOUT`` does not set it.
HCCL_EXEC_TIMEOUT_S = 1836.0


def exec_timeout() -> float:
    """HCCL's limit on one call's execution (``HCCL_EXEC_TIMEOUT``; its default if unset or
    not a number of seconds)."""
    try:
        seconds = float(os.environ.get("HCCL_EXEC_TIMEOUT", HCCL_EXEC_TIMEOUT_S))
    except ValueError:
        return HCCL_EXEC_TIMEOUT_S
    return seconds if 0 < seconds < float("inf") else HCCL_EXEC_TIMEOUT_S
