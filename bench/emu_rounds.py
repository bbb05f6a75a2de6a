"""Benchmark: emulator cost per round and bandwidth per op, next to a plain memcpy.

Prints a table; ``--json FILE`` also writes the rows. Not a test: timings on
shared machines are noisy, so no goal is asserted here.

    python bench/emu_rounds.py --ranks 4 --sizes 1024 1048576 --json bench-results/emu.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import hccl_py as hp
from hccl_py import HcclCMDType, HcclDataType, HcclReduceOp

FP32 = HcclDataType.HCCL_DATA_TYPE_FP32
SUM = HcclReduceOp.HCCL_REDUCE_SUM
OPS = {
    "AllReduce": HcclCMDType.HCCL_CMD_ALLREDUCE,
    "AllGather": HcclCMDType.HCCL_CMD_ALLGATHER,
    "ReduceScatter": HcclCMDType.HCCL_CMD_REDUCE_SCATTER,
    "AlltoAll": HcclCMDType.HCCL_CMD_ALLTOALL,
}


class Tiling(hp.TilingData):
    _fields_ = [("init", hp.Mc2InitTiling), ("cc", hp.Mc2CcTiling)]


def _tiling(op: int) -> Tiling:
    tiling = Tiling()
    cfg = hp.Mc2CcTilingConfig("hccl_world_group", op, "")
    cfg.GetTiling(tiling.init)
    cfg.GetTiling(tiling.cc)
    return tiling


def _prepare(hccl: hp.Hccl, name: str, x: hp.GmAddr, y: hp.GmAddr, count: int, rounds: int) -> int:
    if name == "AllReduce":
        return hccl.AllReduce[True](x, y, count, FP32, SUM, rounds)
    if name == "AllGather":
        return hccl.AllGather[True](x, y, count, FP32, count * rounds, rounds)
    if name == "ReduceScatter":
        return hccl.ReduceScatter[True](x, y, count, FP32, SUM, count * rounds, rounds)
    return hccl.AlltoAll[True](x, y, count, FP32, count * rounds, rounds)


def _kernel(name: str, count: int, rounds: int):
    def kernel(x, y, tilingGM):
        hccl = hp.Hccl()
        hccl.InitV2(hp.GetHcclContext(0), hp.GET_TILING_DATA_WITH_STRUCT(Tiling, tilingGM))
        hccl.SetCcTilingV2(hp.offsetof(Tiling, "cc"))
        handle = _prepare(hccl, name, x, y, count, rounds)
        for _ in range(rounds):
            hccl.Wait(handle)
        hccl.Finalize()

    return kernel


def _measure(name: str, ranks: int, count: int, rounds: int) -> float:
    """Seconds per round, measured inside the world (launch and thread start excluded)."""

    def main() -> float:
        n = hp.get_world_size()
        elems = count * rounds * n
        x = torch.ones(elems)
        y = torch.zeros(elems)
        tiling = _tiling(OPS[name])
        kernel = _kernel(name, count, rounds)
        hp.launch(kernel, x, y, tiling)
        start = time.perf_counter()
        hp.launch(kernel, x, y, tiling)
        return time.perf_counter() - start

    return max(hp.run(main, world_size=ranks)) / rounds


def _memcpy(nbytes: int, repeat: int = 20) -> float:
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    start = time.perf_counter()
    for _ in range(repeat):
        dst.copy_(src)
    return (time.perf_counter() - start) / repeat


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[256, 65536, 1048576], help="elements per block"
    )
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    args = parser.parse_args()
    rows = []
    for count in args.sizes:
        block_bytes = count * 4
        copy_s = _memcpy(block_bytes * args.ranks)
        for name in OPS:
            per_round = _measure(name, args.ranks, count, args.rounds)
            moved = block_bytes * args.ranks * args.ranks
            rows.append(
                {
                    "op": name,
                    "ranks": args.ranks,
                    "block_bytes": block_bytes,
                    "us_per_round": per_round * 1e6,
                    "GB_per_s": moved / per_round / 1e9,
                    "memcpy_us_same_bytes_per_rank": copy_s * 1e6,
                }
            )
    header = f"{'op':14s} {'ranks':>5s} {'block B':>10s} {'us/round':>10s} {'GB/s':>8s} {'memcpy us':>10s}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['op']:14s} {r['ranks']:5d} {r['block_bytes']:10d} {r['us_per_round']:10.1f} "
            f"{r['GB_per_s']:8.2f} {r['memcpy_us_same_bytes_per_rank']:10.1f}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
