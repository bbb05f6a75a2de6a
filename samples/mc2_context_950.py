"""DistributeBarrierExtend and MoeDistributeDispatchV3 on Ascend 950, through one ``mc2Context``.

Source: mirror-cann/ops-transformer at 3a280bcc (2026-07-21): the Ascend 950 entries
``mc2/distribute_barrier_extend/op_kernel/arch35/distribute_barrier_extend_apt.cpp`` (it ships
for ``ascend950`` alone) and the MTE build of ``mc2/moe_distribute_dispatch_v3/op_kernel/arch35/
moe_distribute_dispatch_v3_apt.cpp``, which ``aclnnDistributeBarrier`` and
``aclnnMoeDistributeDispatchV2`` (``commAlg`` not "ccu") launch on that chip
(``distribute_barrier_base.cpp``, ``moe_distribute_dispatch_v2_base.cpp``); the context built by
``Mc2Context::GetMc2ContextTensor`` (``mc2/common/op_api/mc2_context.cpp``).
docs/notes/mc2-kernels.md, section 24.

What it checks: the two entries' kernels are the A3 ports' (samples/mc2_distribute_barrier.py,
samples/mc2_moe_distribute_dispatch_v2_full_mesh.py, imported, not copied), run here on the
platform they ship for, where a rank reaches its peers through the context's
``epHcclBuffer_[r]`` alone: the HCCL buffer of every rank of ``groupEp``, twice ``HCCL_BUFFSIZE``
on this chip (``hcclBuffSize``, the v3 tiling's ``ccl_buffer_size``: ``CheckActualWinSize``
reports ``HCCL_BUFFSIZE`` as half of it). As on the chip, both ops read contexts of one
communicator: the barrier's state and flags and the dispatch's share each buffer's first MiB.
The sample's own kernels around the barrier reach the peers the same way: before it, every rank
writes a 256-byte row into each peer's data area (``epHcclBuffer_[peer] + STATE_SIZE``, at
``ROWS_AT``, which the dispatch's two halves leave unused); after it, every rank reads the rows
it received.

Launches: barrier 1 and 2 (the state flips, the second uses the other half), then dispatch 1
and 2 (the data state flips as well).

Run: ``python samples/mc2_context_950.py`` (4 emulated ranks),
``python -m hccl_py run -n 2 --backend gloo samples/mc2_context_950.py``.
"""

import numpy as np
import torch
from _common import compare, f32, i32, run_sample
from _mc2_context import GetMc2ContextTensor, Mc2MoeContextHolder
from mc2_distribute_barrier import (
    AIV_NUM,
    HALF,
    ROW,
    STATE_WIN_OFFSET,
    WIN_STATE_OFFSET,
    DistributeBarrierTilingFunc,
    distribute_barrier_extend,
    expected_state,
    row,
)
from mc2_moe_distribute_dispatch_v2_full_mesh import (
    DispatchV3Tiling,
    H,
    inputs,
    launch_dispatch,
    reference,
)

import hccl_py as hp

PLATFORM = "950"
RUN_KWARGS = {"buffsize_mb": 2}
ROWS_AT = 512 * 1024  # into the data area: past the first dispatch half's tokens


def holder_of(mc2Context, n: int) -> Mc2MoeContextHolder:
    holder = Mc2MoeContextHolder()
    holder.InitAndCheck(mc2Context, n, 0)
    return holder


def write_rows(rowsGM, launchGM, mc2Context):
    """Before the barrier: row ``peer`` into each peer's data area, at this rank's slot."""
    n, launch = (int(v) for v in i32(launchGM, 2))
    holder = holder_of(mc2Context, n)
    me = holder.GetEpRankId()
    rows = f32(rowsGM, n * ROW).view(n, ROW)
    for peer in range(hp.GetBlockIdx(), n, hp.GetBlockNum()):
        area = holder.GetWindAddrByRankId(peer, me) + ROWS_AT + (launch - 1) % 2 * HALF
        f32(area + me * ROW * 4, ROW)[:] = rows[peer]


def read_back(outGM, launchGM, mc2Context):
    """After the barrier: the rows received, then the per-core state words, the status blocks
    and finish flags of the half this launch used (as the barrier sample's ``read_state``)."""
    n, launch = (int(v) for v in i32(launchGM, 2))
    holder = holder_of(mc2Context, n)
    me = holder.GetEpRankId()
    rows = f32(holder.GetWindAddrByRankId(me, me) + ROWS_AT + (launch - 1) % 2 * HALF, n * ROW)
    f32(outGM, n * ROW)[:] = rows
    status = holder.GetStatusDataSpaceGm()
    out = i32(outGM + n * ROW * 4, AIV_NUM + (n + AIV_NUM) * 8)
    out[:AIV_NUM] = i32(status + STATE_WIN_OFFSET, AIV_NUM * 32)[::32]
    base = status + (launch - 1) % 2 * WIN_STATE_OFFSET
    out[AIV_NUM : AIV_NUM + n * 8] = i32(base, n * 128).view(n, 128)[:, :8].reshape(-1)
    finish = i32(base + STATE_WIN_OFFSET + AIV_NUM * 128, AIV_NUM * 32).view(AIV_NUM, 32)
    out[AIV_NUM + n * 8 :] = finish[:, :8].reshape(-1)


def barrier(launch: int, mc2Context: torch.Tensor) -> str:
    rank, n, dev = hp.get_rank(), hp.get_world_size(), hp.device()
    launch_t = torch.tensor([n, launch], dtype=torch.int32, device=dev)
    rows = torch.from_numpy(np.stack([row(launch, rank, d) for d in range(n)])).to(dev)
    hp.launch(write_rows, rows, launch_t, mc2Context, block_dim=2, kernel_type="aiv")
    x_ref = torch.arange(16, dtype=torch.float16, device=dev)
    tiling, numBlocks = DistributeBarrierTilingFunc(n, None, False, False, True)
    hp.launch(distribute_barrier_extend, mc2Context, x_ref, None, None, x_ref, None, tiling,
              block_dim=numBlocks, kernel_type="aiv")  # fmt: skip
    got = torch.zeros(n * ROW + AIV_NUM + (n + AIV_NUM) * 8, dtype=torch.int32, device=dev)
    hp.launch(read_back, got, launch_t, mc2Context, block_dim=1, kernel_type="aiv")
    want_rows = np.stack([row(launch, s, rank) for s in range(n)]).reshape(-1)
    got_all = np.concatenate(
        [got[: n * ROW].view(torch.float32).cpu().numpy(), got[n * ROW :].cpu().numpy()]
    )
    want = np.concatenate([want_rows, expected_state(launch, n)])
    return compare(f"barrier-{launch}", torch.from_numpy(got_all.astype(np.float64)), want)


def dispatch(launch: int, v3: tuple) -> str:
    rank = hp.get_rank()
    expand_x, expand_idx, token_nums, send_counts = launch_dispatch(*inputs(rank, launch), v3)
    total = int(send_counts[-1])
    got = torch.cat(
        [
            expand_x[: total * H].double(),
            expand_idx[: total * 3].double(),
            send_counts.double(),
            token_nums.double(),
        ]
    )
    return compare(f"dispatch-{launch}", got, reference(rank, launch), f"{total} tokens")


def main() -> list[str]:
    """One EP communicator, two barriers, two dispatches. aclnn caches a context per ``groupEp
    + opName`` ("distribute_barrier_extend", "moe_distribute_v2"): two contexts, each built
    with channels of its own, listing the same buffers."""
    n = hp.get_world_size()
    groupEp = hp.new_group(list(range(n)))
    barrierContext, _ = GetMc2ContextTensor(groupEp)
    lines = [barrier(launch, barrierContext) for launch in (1, 2)]
    dispatchContext, hcclBuffSize = GetMc2ContextTensor(groupEp)
    assert hcclBuffSize == 2 * RUN_KWARGS["buffsize_mb"] * 2**20  # twice HCCL_BUFFSIZE
    v3 = (dispatchContext, DispatchV3Tiling(n, hp.get_rank(), hcclBuffSize))
    return lines + [dispatch(launch, v3) for launch in (1, 2)]


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM, **RUN_KWARGS)
