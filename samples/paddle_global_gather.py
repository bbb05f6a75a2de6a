"""Paddle's ``distributed.utils.global_gather`` example (mixture of experts), on hccl_py.

Run: ``python samples/paddle_global_gather.py`` (2 emulated ranks) or
``python -m hccl_py run -n 2 --backend gloo samples/paddle_global_gather.py``.
Two cards with two experts each; on both ranks ``x = [[1, 2], ..., [9, 10]]``.
``a = global_gather(x, local_count, global_count)`` gives rank 0
[[1,2],[3,4],[7,8],[1,2],[7,8]] and rank 1 [[5,6],[9,10],[3,4],[5,6],[9,10]];
``(a * a).sum().backward()`` gives ``x.grad == 2 * x`` on both ranks.
"""

import os

import numpy as np
import torch
from _common import compare, run_sample, skip

import hccl_py as hp

COUNTS = {0: [2, 1, 1, 1], 1: [1, 1, 2, 1]}
EXPECTED = {
    0: [[1, 2], [3, 4], [7, 8], [1, 2], [7, 8]],
    1: [[5, 6], [9, 10], [3, 4], [5, 6], [9, 10]],
}


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    if n != 2:
        return [skip("global_gather", f"the documented example is for 2 ranks, not {n}")]
    x = torch.tensor([[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]], dtype=torch.float32)
    x = x.to(hp.device()).requires_grad_(True)
    local_count = torch.tensor(COUNTS[rank], dtype=torch.int64)
    global_count = torch.tensor(COUNTS[rank], dtype=torch.int64)
    a = hp.global_gather(x, local_count, global_count)
    c = a * a
    c.sum().backward()
    return [
        compare("global_gather", a, np.array(EXPECTED[rank]), f"local_count {COUNTS[rank]}"),
        compare("x.grad", x.grad, 2 * x.detach().cpu().numpy(), "== 2 * x"),
    ]


if __name__ == "__main__":
    # its backward pass waits for the other rank: the emulator runs ranks as threads for it
    os.environ.setdefault("HCCL_PY_EMU_RUNNERS", "threads")
    run_sample(main, world_size=None if os.environ.get(hp.runtime.WORLD_SIZE_ENV) else 2)
