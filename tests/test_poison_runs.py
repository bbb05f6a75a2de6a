"""Poison saves and fills a round's receive blocks run by run (adjacent blocks merged).

The bytes it touches are exactly the blocks' bytes: a gap between blocks (a
strided AllGather) keeps what it held, and the blocks hold NaN until the round
runs, then the data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from cases import make_tiling
from test_sanitizer import F32, TIMEOUT, N, comm

import hccl_py as hp
from hccl_py.core import layout
from hccl_py.sanitizer.poison import _merged

GAP = -7.0  # what the bytes between the blocks hold


def test_adjacent_blocks_merge_in_block_order_and_empty_ones_drop() -> None:
    blocks = layout.Blocks(np.array([0, 4, 12, 16, 20, 8]), np.array([4, 4, 4, 0, 4, 4]))
    assert _merged(blocks) == [(0, 8), (12, 4), (20, 4), (8, 4)]
    assert _merged(layout.Blocks(np.array([0, 4]), np.array([0, 0]))) == []


def test_a_strided_all_gather_poisons_its_blocks_and_leaves_the_gaps() -> None:
    seen: dict[int, np.ndarray] = {}

    def kernel(xGM: Any, yGM: Any, tilingGM: Any) -> None:
        h = comm(tilingGM)
        view = hp.gm_tensor(yGM, torch.float32, 4 * N).numpy()  # taken before: not checked
        handle = h.AllGather[True](xGM, yGM, N, F32, 2 * N)  # blocks at 0 and 2N, gaps after
        seen[hp.get_rank()] = view.copy()
        h.Wait(handle)
        h.Finalize()

    def main() -> torch.Tensor:
        x = torch.full((N,), float(hp.get_rank() + 1))
        y = torch.full((4 * N,), GAP)
        hp.launch(kernel, x, y, make_tiling())
        return y

    results = hp.run(main, world_size=2, schedule="late", poison=True, timeout=TIMEOUT)
    gaps = np.r_[N : 2 * N, 3 * N : 4 * N]
    for rank, y in enumerate(results):
        early = seen[rank].reshape(2, 2 * N)
        assert np.isnan(early[:, :N]).all(), "the blocks read before Wait hold the poison"
        np.testing.assert_array_equal(seen[rank][gaps], GAP)
        want = np.r_[[1.0] * N, [GAP] * N, [2.0] * N, [GAP] * N]
        np.testing.assert_array_equal(y.numpy(), want)
