"""TEST STAND-IN for ``torch_npu.npu`` (see the package docstring): the device module.

Pretends that this host has ``HCCL_PY_STANDIN_NPUS`` NPUs (default 8). The
current device is per thread, as on real NPUs; nothing here touches hardware.
"""

from __future__ import annotations

import os
import threading

import torch

#: Environment variable: how many NPUs the stand-in pretends to have.
COUNT_ENV = "HCCL_PY_STANDIN_NPUS"
DEFAULT_COUNT = 8

_current = threading.local()


def device_count() -> int:
    """The number of pretend NPUs (``HCCL_PY_STANDIN_NPUS``, default 8)."""
    return int(os.environ.get(COUNT_ENV, DEFAULT_COUNT))


def is_available() -> bool:
    """Whether there is at least one pretend NPU."""
    return device_count() > 0


def _index(device: int | str | torch.device | None) -> int:
    """The device index that ``device`` names (None / "npu": the current device)."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    dev = torch.device(device)
    if dev.type != "npu":
        raise ValueError(f"expected an npu device, got {dev}")
    return current_device() if dev.index is None else dev.index


def set_device(device: int | str | torch.device) -> None:
    """Make ``device`` the current NPU of the calling thread."""
    index = _index(device)
    if not 0 <= index < device_count():
        raise RuntimeError(
            f"torch_npu stand-in: invalid device index {index}, "
            f"{device_count()} NPU(s) ({COUNT_ENV})"
        )
    _current.index = index


def current_device() -> int:
    """The calling thread's current NPU index (0 until set_device)."""
    return getattr(_current, "index", 0)


def synchronize(device: int | str | torch.device | None = None) -> None:
    """Nothing to wait for: every stand-in operation is synchronous."""


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    """Nothing to initialise."""


def _is_in_bad_fork() -> bool:
    return False


def manual_seed_all(seed: int) -> None:
    """Stand-in NPU tensors draw random numbers from the CPU generator."""
    torch.manual_seed(seed)


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]
