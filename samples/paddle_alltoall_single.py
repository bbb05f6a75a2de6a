"""Paddle's ``distributed.alltoall_single`` examples, on hccl_py.

Run: ``python samples/paddle_alltoall_single.py`` (2 emulated ranks, as in the
documentation) or ``python -m hccl_py run -n 2 --backend gloo samples/paddle_alltoall_single.py``.

- ``equal-splits``: ``data = arange(N) + rank * N`` (int64); rank r receives element
  r of every rank: with 2 ranks, rank 0 gets [0, 2] and rank 1 gets [1, 3].
- ``uneven-async``: ``in_split_sizes = [1, 2]``, ``out_split_sizes = [rank + 1] * 2``,
  ``data = ones([3, 2]) * rank``, ``sync_op=False`` then ``task.wait()``: rank 0 gets
  [[0, 0], [1, 1]], rank 1 gets [[0, 0], [0, 0], [1, 1], [1, 1]]. It is defined for
  2 ranks; with another world size it is skipped and the output says so.
"""

import os

import numpy as np
import torch
from _common import compare, run_sample, skip

import hccl_py as hp


def equal_splits(rank: int, n: int) -> str:
    data = torch.arange(n, dtype=torch.int64, device=hp.device()) + rank * n
    out = torch.empty([n], dtype=torch.int64, device=hp.device())
    hp.alltoall_single(data, out)
    return compare("equal-splits", out, np.arange(n) * n + rank, f"got {out.tolist()}")


def uneven_async(rank: int) -> str:
    data = torch.ones([3, 2], dtype=torch.float32, device=hp.device()) * rank
    out = torch.empty([(rank + 1) * 2, 2], dtype=torch.float32, device=hp.device())
    task = hp.alltoall_single(data, out, [1, 2], [rank + 1, rank + 1], sync_op=False)
    task.wait()
    expected = np.repeat([0.0, 1.0], rank + 1)[:, None].repeat(2, axis=1)
    return compare("uneven-async", out, expected, f"got {out.tolist()}")


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    lines = [equal_splits(rank, n)]
    if n == 2:
        lines.append(uneven_async(rank))
    else:
        lines.append(skip("uneven-async", f"the documented example is for 2 ranks, not {n}"))
    return lines


if __name__ == "__main__":
    run_sample(main, world_size=None if os.environ.get(hp.runtime.WORLD_SIZE_ENV) else 2)
