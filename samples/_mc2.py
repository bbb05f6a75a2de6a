"""What the fused matmul + collective samples share: inputs, tilings, matmul and torch_npu checks.

Inputs are small integers (:func:`_common.random_ints`), so every matmul and every sum
over ranks is exact in FP16 and FP32 whatever the order of the additions.
"""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from _common import skip

import hccl_py as hp
from hccl_py import HcclDataType

FP16 = HcclDataType.HCCL_DATA_TYPE_FP16
SIZEOF_HALF = 2
#: ``hp.launch`` arguments of the fused samples' kernels: two cube (AIC) cores only.
AIC_KERNEL = dict(block_dim=2, kernel_type="aic")


def uint32_fields(*names: str) -> list[tuple[str, type]]:
    """``uint32_t`` members of a TilingData struct, in order."""
    return [(name, ctypes.c_uint32) for name in names]


#: The TilingData members of a fused matmul + collective: shapes and the row tiling.
MATMUL_FIELDS = uint32_fields("rankM", "rankK", "rankN", "tileM", "tileNum", "tailM", "tailNum")


def matmul_tiling(m: int, k: int, n: int, tile_m: int) -> dict[str, int]:
    """Values of :data:`MATMUL_FIELDS`: ``m`` rows cut into tiles of ``tile_m`` and a tail."""
    tile_num, tail_m = divmod(m, tile_m)
    return dict(
        rankM=m,
        rankK=k,
        rankN=n,
        tileM=tile_m,
        tileNum=tile_num,
        tailM=tail_m,
        tailNum=int(tail_m > 0),
    )


def matmul(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``c = a @ b`` with FP32 accumulation, as the cube unit computes FP16 matmuls."""
    c.copy_((a.float() @ b.float()).to(c.dtype))


def torch_npu_check(op: str, check: Callable[[Callable[..., Any], str], list[str]]) -> list[str]:
    """On NPUs: ``check(torch_npu.<op>, hcom)``; elsewhere one SKIP line saying why."""
    hcom = npu_hcom()
    if hcom is None:
        return [skip("torch_npu", f"{op} needs torch_npu on NPU hardware")]
    import torch_npu

    return check(getattr(torch_npu, op), hcom)


def npu_hcom() -> str | None:
    """The HCCL communicator name of the world group when running on NPUs, else None.

    That name is what ``torch_npu``'s fused MC2 operators take as ``hcom``;
    ``torch_npu`` is imported only when present.
    """
    if hp.device().type != "npu" or importlib.util.find_spec("torch_npu") is None:
        return None
    import torch.distributed as dist
    import torch_npu  # noqa: F401 - registers the NPU backend

    group = dist.distributed_c10d._get_default_group()
    return group._get_backend(hp.device()).get_hccl_comm_name(hp.get_rank())


def split_to_core(total: int, cores: int, core: int) -> tuple[int, int]:
    """The MoE kernels' ``SplitToCore``: [start, end) of ``core``'s share, the first cores one more."""
    per, rest = divmod(total, cores)
    start = per * core + min(core, rest)
    return start, start + per + (core < rest)


def moe_inputs(
    rank: int, launch: int, bs: int, k: int, h: int, local_experts: int
) -> tuple[np.ndarray, np.ndarray]:
    """The MoE samples' tokens (exact FP16 integers naming rank, token, column) and routing.

    ``bs`` tokens of ``h`` columns per rank, each sent to ``k`` distinct experts of the
    ``local_experts * world size`` experts, drawn from a seed of (launch, rank).
    """
    x = (100 * rank + 10 * np.arange(bs)[:, None] + np.arange(h) + launch).astype(np.float16)
    rng = np.random.default_rng(1000 * launch + rank)
    n_experts = local_experts * hp.get_world_size()
    ids = np.stack([rng.permutation(n_experts)[:k] for _ in range(bs)]).astype(np.int32)
    return x, ids
