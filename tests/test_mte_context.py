"""The Ascend 950 MTE engine's context, and what the QuantAllReduce port found with it.

A 950 host that sets ``SetCommEngine(3)`` (``AIV_ENGINE``) on the cc tiling of a domain gets a
context that lists every rank's windows (ops-transformer's ``HcclCombinOpParam``: ``rankId``,
``rankDim``, ``windowsIn[r]``, ``windowsOut[r]``); any other engine keeps the CCU's context.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import torch

import hccl_py as hp
from hccl_py import HcclCMDType, Mc2CcTiling, Mc2CcTilingConfig, Mc2InitTiling, TilingData

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "samples"


class OneCcTiling(TilingData):
    _fields_ = [("init", Mc2InitTiling), ("cc", Mc2CcTiling), ("tag", ctypes.c_uint32)]


def tiling_for(engine: int) -> OneCcTiling:
    t = OneCcTiling()
    cfg = Mc2CcTilingConfig(
        "hccl_world_group", HcclCMDType.HCCL_CMD_ALLTOALLV, "AlltoAll=level0:fullmesh"
    )
    assert cfg.SetCommEngine(engine) == 0
    assert cfg.GetTiling(t.init) == 0 and cfg.GetTiling(t.cc) == 0
    return t


def ring(tilingGM) -> None:
    """Write this rank's id + 10 into the next rank's In window, through ``windowsIn[next]``."""
    ctx = hp.GetHcclContext(0)
    me, dim = ctx.rankId, ctx.rankDim
    hp.gm_tensor(ctx.windowsIn[(me + 1) % dim] + 4 * me, torch.int32, 1)[0] = 10 + me


def look(outGM, tilingGM) -> None:
    ctx = hp.GetHcclContext(0)
    prev = (ctx.rankId - 1) % ctx.rankDim
    out = hp.gm_tensor(outGM, torch.int32, 3)
    out[0] = int(hp.gm_tensor(ctx.windowsIn[ctx.rankId] + 4 * prev, torch.int32, 1)[0])
    out[1] = ctx.rankDim
    out[2] = int(int(ctx.windowsOut[ctx.rankId]) == int(ctx.windowsOut[0]))


def run_ring(engine: int) -> list[int]:
    t = tiling_for(engine)
    hp.launch(ring, t, block_dim=1, kernel_type="aiv")
    hp.barrier()
    out = torch.zeros(3, dtype=torch.int32)
    hp.launch(look, out, t, block_dim=1, kernel_type="aiv")
    return out.tolist()


def test_a_tiling_for_the_mte_engine_gets_every_ranks_windows() -> None:
    out = hp.run(lambda: run_ring(3), world_size=3, platform="950", buffsize_mb=1)
    assert out == [[10 + (r - 1) % 3, 3, int(r == 0)] for r in range(3)]


@pytest.mark.parametrize("engine", [0, 6])
def test_another_engine_keeps_the_ccu_context(engine: int) -> None:
    with pytest.raises(
        hp.WorldError, match=r"windowsIn\[1\]: on Ascend 950 the context is the CCU"
    ):
        hp.run(lambda: run_ring(engine), world_size=2, platform="950", buffsize_mb=1)


def test_the_urma_jetty_fields_say_they_are_not_modelled() -> None:
    """MoeDistributeDispatchSetup and MoeDistributeCombineSetup on Ascend 950 (ops-transformer
    arch35) read ``((HcclCombinOpParam *)context)->sqs[r]`` and ``cqs[r]`` to write their own WQEs
    into a peer's send queue (docs/notes/mc2-kernels.md, section 36). hccl_py has no NIC behind
    them: the read is a clear HcclUsageError, not a raw AttributeError."""

    def main() -> list[str]:
        got = []

        def kernel(tilingGM):
            ctx = hp.GetHcclContext(0)
            for table in (ctx.sqs, ctx.cqs):
                try:
                    table[1]
                except hp.HcclUsageError as e:
                    got.append(str(e))
            got.append(f"{len(ctx.sqs)} {len(ctx.cqs)}")

        hp.launch(kernel, tiling_for(3), block_dim=1, kernel_type="aiv")
        return got

    for got in hp.run(main, world_size=2, platform="950", buffsize_mb=1):
        sq, cq, lens = got
        assert sq.startswith("sqs[1] (HcclAiRMAWQ): the AIV URMA data plane")
        assert cq.startswith("cqs[1] (HcclAiRMACQ): the AIV URMA data plane")
        assert "is not modelled by hccl_py" in sq and "Hcomm client" in cq
        assert lens == "2 2"


class InheritedTiling(OneCcTiling):
    """A tiling struct whose Mc2InitTiling comes from its base class."""

    _fields_ = [("extra", ctypes.c_uint32)]


class NestedTiling(TilingData):
    """A tiling struct whose first member starts with the Mc2InitTiling."""

    _fields_ = [("head", OneCcTiling), ("extra", ctypes.c_uint32)]


def run_ring_in(cls: type) -> list[int]:
    """run_ring(3) with the tiling in a ``cls``: its bytes still start with the init tiling."""
    t = cls()
    inner = t.head if cls is NestedTiling else t
    cfg = Mc2CcTilingConfig("hccl_world_group", HcclCMDType.HCCL_CMD_ALLTOALLV, "")
    assert cfg.SetCommEngine(3) == 0
    assert cfg.GetTiling(inner.init) == 0 and cfg.GetTiling(inner.cc) == 0
    hp.launch(ring, t, block_dim=1, kernel_type="aiv")
    hp.barrier()
    out = torch.zeros(3, dtype=torch.int32)
    hp.launch(look, out, t, block_dim=1, kernel_type="aiv")
    return out.tolist()


@pytest.mark.parametrize("cls", [InheritedTiling, NestedTiling])
def test_an_inherited_or_nested_init_tiling_still_registers_its_engine(cls: type) -> None:
    """The struct's first bytes are the init tiling whether its first member comes from a base
    class or from a nested struct (the framework reads the head of the tiling data)."""
    out = hp.run(lambda: run_ring_in(cls), world_size=3, platform="950", buffsize_mb=1)
    assert out == [[10 + (r - 1) % 3, 3, int(r == 0)] for r in range(3)]


def test_quant_all_reduce_reads_past_its_scales_for_the_tail_block() -> None:
    """The source's CopyDataBlock copies a full block's scales for the tail block too: with the
    scales tensor passed at its exact size the read past its end is reported."""
    sys.path.insert(0, str(SAMPLES_DIR))
    try:
        import mc2_quant_all_reduce as qar
    finally:
        sys.path.remove(str(SAMPLES_DIR))

    def main() -> None:
        XType, ScalesType, OutputType = qar.LAUNCHES[1]
        x_np, scales_np = qar.inputs(hp.get_rank(), 1)
        x = torch.from_numpy(x_np).to(XType)
        scales = torch.from_numpy(scales_np).float()
        output = torch.zeros(qar.BS, qar.H, dtype=OutputType)
        tiling, numBlocks = qar.QuantAllReduceTilingFunc(
            x, scales, OutputType, "hccl_world_group", hp.get_world_size()
        )
        kernel = qar.quant_all_reduce_kernel(XType, ScalesType, OutputType)
        hp.launch(kernel, x, scales, output, None, tiling, block_dim=numBlocks, kernel_type="aiv")

    with pytest.raises(hp.WorldError, match=r"bytes \[128, 192\) of scales fall outside its 160"):
        hp.run(main, world_size=2, platform="950", **qar.RUN_KWARGS)
