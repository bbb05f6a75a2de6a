"""The oldest torch hccl_py runs on, checked once when it is imported."""

from __future__ import annotations

import re

import torch

#: The oldest torch release hccl_py is tested with. Older ones fail in ways that are torch's:
#: before 2.6 the emulator cannot carry a rank's torch function state between its runners,
#: before 2.9 it cannot list the autocast device types, and gloo's native MIN and MAX of
#: torch 2.8 gave other values (an FP16 MIN reduce-scatter, NaN propagation).
OLDEST_TORCH = (2, 9)


def check_torch(version: str = torch.__version__) -> None:
    """Refuse a torch older than :data:`OLDEST_TORCH` with an ImportError that says so (pip
    does too, through the package's requirement, unless told not to look)."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found and (int(found[1]), int(found[2])) < OLDEST_TORCH:
        oldest = ".".join(map(str, OLDEST_TORCH))
        raise ImportError(
            f"hccl_py needs torch {oldest} or newer; this is torch {version}: "
            f"pip install 'torch>={oldest}' (on Ascend hardware, with the torch_npu release "
            "that matches it)"
        )
