"""Framework-level collectives of MindSpore and Paddle, on every hccl_py backend.

``all_gather_into_tensor``, ``alltoall_single``, ``global_scatter``,
``global_gather``, ``all_reduce``, ``reduce_scatter_tensor`` and ``barrier``
with the frameworks' signatures and semantics; see docs/framework.md. Each is
built on hccl_py's own Hccl client, so it runs on the emulator, on gloo and
on HCCL alike.
"""

from __future__ import annotations

from ._kernel import Work
from .collectives import (
    all_gather_into_tensor,
    all_reduce,
    alltoall_single,
    barrier,
    reduce_scatter_tensor,
)
from .moe import global_gather, global_scatter

__all__ = [
    "Work",
    "all_gather_into_tensor",
    "all_reduce",
    "alltoall_single",
    "barrier",
    "global_gather",
    "global_scatter",
    "reduce_scatter_tensor",
]
