"""What the samples share: rank data, verdict lines and the entry point.

Kernels and host tiling code stay in each sample, written as the AscendC original.

Each sample's ``main`` runs once per rank (``hp.run(main)``) and returns its
verdict lines; :func:`run_sample` prints them in the parent process and exits
with status 1 if any line says FAIL. A verdict line reads
``rank R: <case> PASS|FAIL|SKIP <detail>``. References are computed with numpy
from the inputs of every rank, independently of hccl_py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import numpy as np
import torch

import hccl_py as hp
from hccl_py import (
    HcclReduceOp,
)

#: Inputs are ``rank + RANK_SPAN * (position % PERIOD)``: element 0 of a block names its
#: sender, the pattern does not repeat at the tile sizes used (128, 100, 44), and the sums
#: of up to 8 ranks stay exact integers in FP16.
RANK_SPAN = 8
PERIOD = 13

SUM = HcclReduceOp.HCCL_REDUCE_SUM
WORLD_GROUP = "hccl_world_group"
#: A verdict line: ``rank R: <case> PASS|FAIL|SKIP <detail>``.
VERDICT_LINE = re.compile(r"^rank (\d+): (\S+) +(PASS|FAIL|SKIP)\b")


def Ceil(a: int, b: int) -> int:
    """AscendC's ``Ceil``: ``a / b`` rounded up."""
    return -(-a // b)


def i32(addr: hp.GmAddr, n: int) -> torch.Tensor:
    """``n`` int32 values at a GM address (a kernel's ``GlobalTensor<int32_t>``)."""
    return hp.gm_tensor(addr, torch.int32, n)


def f32(addr: hp.GmAddr, n: int) -> torch.Tensor:
    """``n`` float values at a GM address (a kernel's ``GlobalTensor<float>``)."""
    return hp.gm_tensor(addr, torch.float32, n)


def f16(addr: hp.GmAddr, n: int) -> torch.Tensor:
    """``n`` half values at a GM address (a kernel's ``GlobalTensor<half>``)."""
    return hp.gm_tensor(addr, torch.float16, n)


def rank_data(rank: int, count: int) -> np.ndarray:
    """The FP16 input of ``rank``: ``count`` values ``rank + 8 * (i % 13)``."""
    return (rank + RANK_SPAN * (np.arange(count) % PERIOD)).astype(np.float16)


def sender_of(values: np.ndarray) -> list[int]:
    """Decode the sending rank of blocks from their first elements (see :func:`rank_data`)."""
    return [int(v) % RANK_SPAN for v in np.asarray(values).tolist()]


def random_ints(seed: int, shape: tuple[int, ...], low: int = -1, high: int = 1) -> np.ndarray:
    """FP16 integers in ``[low, high]``: matmuls of them are exact in FP32 and FP16."""
    return np.random.default_rng(seed).integers(low, high + 1, size=shape).astype(np.float16)


def on_device(array: np.ndarray) -> torch.Tensor:
    """A contiguous copy of ``array`` on this rank's device (``hp.device()``)."""
    return torch.from_numpy(np.ascontiguousarray(array)).to(hp.device())


def zeros(*shape: int, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """A zero tensor on this rank's device."""
    return torch.zeros(shape, dtype=dtype, device=hp.device())


def _line(case: str, word: str, detail: str) -> str:
    return f"rank {hp.get_rank()}: {case:<14} {word} {detail}".rstrip()


def verdict(case: str, ok: bool, detail: str = "") -> str:
    """One verdict line of this rank: PASS or FAIL."""
    return _line(case, "PASS" if ok else "FAIL", detail)


def skip(case: str, why: str) -> str:
    """A verdict line for a case that this run does not execute, saying why."""
    return _line(case, "SKIP", why)


def compare(case: str, got: torch.Tensor, expected: np.ndarray, detail: str = "") -> str:
    """Verdict of an exact comparison; on failure the detail names the first wrong element."""
    actual = got.detach().cpu().numpy().reshape(-1)
    want = np.asarray(expected).reshape(-1)
    if actual.shape != want.shape:
        return verdict(case, False, f"{actual.size} elements, expected {want.size}")
    bad = np.flatnonzero(actual != want)
    if len(bad):
        i = int(bad[0])
        return verdict(
            case, False, f"{len(bad)} wrong elements; first at {i}: {actual[i]} != {want[i]}"
        )
    return verdict(case, True, detail)


def failed(lines: Iterable[str]) -> list[str]:
    """The lines whose verdict is FAIL."""
    return [line for line in lines if (m := VERDICT_LINE.match(line)) and m[3] == "FAIL"]


def report(per_rank: Iterable[Iterable[str]], show: bool = True) -> int:
    """Print (if ``show``) every rank's verdict lines; return the exit status (1 on any FAIL)."""
    lines = [line for rank_lines in per_rank for line in rank_lines]
    if show:
        print("\n".join(lines), flush=True)
    return 1 if failed(lines) else 0


class _RecordRank:
    """``main`` that also notes which ranks ran in this process (picklable for gloo workers)."""

    ran_here: set[int] = set()

    def __init__(self, main: Callable[[], list[str]]) -> None:
        self.main = main

    def __call__(self) -> list[str]:
        _RecordRank.ran_here.add(hp.get_rank())
        return self.main()


def run_sample(main: Callable[[], list[str]], **run_kwargs: Any) -> NoReturn:
    """Run ``main`` on every rank and exit with status 1 if any verdict is a FAIL.

    The emulator and gloo return every rank's verdicts to this process, which
    prints them. Under msrun or torchrun every process gets every rank's
    verdicts: only the process of rank 0 prints them, and all exit alike.
    """
    per_rank = hp.run(_RecordRank(main), **run_kwargs)
    ran_here = _RecordRank.ran_here
    raise SystemExit(report(per_rank, show=not ran_here or 0 in ran_here))
