"""TEST STAND-IN (see the package docstring): torch_npu's fused MC2 operators in plain torch.

Same signatures and argument checks as torch_npu's ``npu_all_gather_base_mm``
and ``npu_mm_reduce_scatter_base`` (non-quantised forms only); the collective
runs on the group that ``hcom`` names, the matmul accumulates in float32 and
rounds once to the input type, as the cube unit does. Nothing is fused or
overlapped.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ._hccl import group_of

#: torch's current names of the two collectives, or the older ones.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

_TYPES = (torch.float16, torch.bfloat16)
_WORLD_SIZES = (2, 4, 8, 16, 32)


def _check(op: str, x1: torch.Tensor, x2: torch.Tensor, world_size: int, group) -> None:
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise RuntimeError(f"{op} (torch_npu stand-in): {what}")

    need(x1.device.type == "npu" and x2.device == x1.device, "x1 and x2 must be on one NPU")
    need(x1.dim() == 2 and x2.dim() == 2, "x1 and x2 must be 2-D")
    need(x1.dtype in _TYPES and x2.dtype == x1.dtype, "x1 and x2 must both be float16 or bfloat16")
    need(x1.shape[1] == x2.shape[0], f"k of x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} differ")
    need(256 <= x1.shape[1] < 65535, f"k must lie in [256, 65535), not {x1.shape[1]}")
    need(world_size in _WORLD_SIZES, f"world_size must be one of {_WORLD_SIZES}")
    need(world_size == group.size(), f"world_size {world_size} but hcom has {group.size()} ranks")


def _unsupported(op: str, **given: object) -> None:
    names = [
        name
        for name, value in given.items()
        if not (value is None or (isinstance(value, int) and value == 0))
    ]
    if names:
        raise NotImplementedError(f"{op} (torch_npu stand-in) does not implement {names}")


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float()).to(a.dtype)


def _group_for(
    op: str, x1: torch.Tensor, x2: torch.Tensor, hcom: str, world_size: int, **options: Any
) -> Any:
    """The group ``hcom`` names, after the shape checks and the refusal of unsupported options."""
    group = group_of(hcom)
    _check(op, x1, x2, world_size, group)
    _unsupported(op, **options)
    return group


def npu_all_gather_base_mm(
    input: torch.Tensor,
    x2: torch.Tensor,
    hcom: str,
    world_size: int,
    *,
    bias: torch.Tensor | None = None,
    x1_scale: torch.Tensor | None = None,
    x2_scale: torch.Tensor | None = None,
    gather_index: int = 0,
    gather_output: bool = True,
    comm_turn: int = 0,
    output_dtype: torch.dtype | None = None,
    comm_mode: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(allgather(input) @ x2, allgather(input))`` over the group ``hcom`` names."""
    op = "npu_all_gather_base_mm"
    group = _group_for(
        op, input, x2, hcom, world_size,
        bias=bias, x1_scale=x1_scale, x2_scale=x2_scale, gather_index=gather_index,
        comm_turn=comm_turn, output_dtype=output_dtype, comm_mode=comm_mode,
    )  # fmt: skip
    rows, k = input.shape
    gathered = torch.empty(world_size * rows, k, dtype=input.dtype, device=input.device)
    _all_gather_single(gathered, input.contiguous(), group=group)
    output = _matmul(gathered, x2)
    if not gather_output:
        gathered = torch.empty(0, dtype=input.dtype, device=input.device)
    return output, gathered


def npu_mm_reduce_scatter_base(
    input: torch.Tensor,
    x2: torch.Tensor,
    hcom: str,
    world_size: int,
    *,
    reduce_op: str = "sum",
    bias: torch.Tensor | None = None,
    x1_scale: torch.Tensor | None = None,
    x2_scale: torch.Tensor | None = None,
    comm_turn: int = 0,
    output_dtype: torch.dtype | None = None,
    comm_mode: str | None = None,
) -> torch.Tensor:
    """``reducescatter(input @ x2)`` (sum, rows split by rank) over the group ``hcom`` names."""
    op = "npu_mm_reduce_scatter_base"
    group = _group_for(
        op, input, x2, hcom, world_size,
        bias=bias, x1_scale=x1_scale, x2_scale=x2_scale, comm_turn=comm_turn,
        output_dtype=output_dtype, comm_mode=comm_mode,
    )  # fmt: skip
    if reduce_op != "sum":
        raise RuntimeError(f"{op} (torch_npu stand-in): reduce_op must be 'sum', not {reduce_op!r}")
    if input.shape[0] % world_size:
        raise RuntimeError(
            f"{op} (torch_npu stand-in): m={input.shape[0]} is not a multiple of "
            f"world_size={world_size}"
        )
    product = _matmul(input, x2)
    output = torch.empty(
        input.shape[0] // world_size, x2.shape[1], dtype=input.dtype, device=input.device
    )
    _reduce_scatter_single(output, product, group=group)
    return output
