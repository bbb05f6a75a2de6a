"""The copies a server lands for BatchWrite items and Hcomm channel writes (server/remote_writes.py).

A copy whose source and destination overlap (an item a rank sends into its own window, over the
bytes it sends from) lands as ``memmove`` does: every source byte as it was before the copy.
Before, torch refused the overlapping copy with a raw RuntimeError from inside the server.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hccl_py.server.remote_writes import Immediate, run_copies


class _Bytes:
    """A range of one byte buffer, addressed as the servers address GM."""

    def __init__(self, memory: torch.Tensor, start: int) -> None:
        self.memory, self.start = memory, start

    def bytes_view(self, nbytes: int) -> torch.Tensor:
        return self.memory[self.start : self.start + nbytes]


@pytest.mark.parametrize(
    ("source", "target", "nbytes"), [(0, 4, 16), (4, 0, 16), (3, 3, 8), (0, 16, 16)]
)
def test_a_copy_lands_as_memmove_does(source: int, target: int, nbytes: int) -> None:
    memory = torch.arange(40, dtype=torch.uint8)
    want = np.arange(40, dtype=np.uint8)
    want[target : target + nbytes] = want[source : source + nbytes].copy()
    run_copies([(_Bytes(memory, source), _Bytes(memory, target), nbytes)])
    assert memory.numpy().tolist() == want.tolist()


def test_copies_land_in_order_and_an_immediate_is_its_value() -> None:
    memory = torch.zeros(16, dtype=torch.uint8)
    run_copies(
        [
            (Immediate(0x0102030405060708), _Bytes(memory, 0), 8),
            (_Bytes(memory, 0), _Bytes(memory, 4), 8),  # reads what the first copy wrote
        ]
    )
    assert memory.tolist() == [8, 7, 6, 5, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0]
