"""hccl_py next to its peers, in one run on one machine: tables of times and ratios, JSON, PNG.

    python benchmarks/compare.py                      # 2, 4, 8 ranks, 1 KiB..16 MiB, all ops
    python benchmarks/compare.py --quick              # a smaller sweep
    python benchmarks/compare.py --ranks 4 --ops allgather --json out.json --plot out.png

Columns (time per op, the slowest rank, the median of the iterations):
``emu`` hccl_py's emulator through the kernel API (one launch per op:
InitV2, SetCcTilingV2, Op[True], Wait, Finalize); ``emu/r8`` the same per
round of an 8-round task; ``emu-fw`` the framework collectives
(all_gather_into_tensor ...) on the emulator; ``tpg`` PyTorch's threaded
process group; ``gloo`` torch.distributed gloo processes; ``ours-gloo``
hccl_py's gloo backend through the kernel API; ``ours-gloo-fw`` its framework
collectives; ``limit`` the memory-copy limit. Ratios: ``emu/limit``,
``emu/tpg``, ``fw/tpg``, ``gloo/emu`` (how much faster the emulator is than
gloo processes), ``ours/gloo`` and ``fw/gloo``. The gloo backend reduces as
``HCCL_PY_REDUCE`` says (exact by default; native is what HCCL does). Not a
test: machines are noisy, so compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import peers

from hccl_py.bench.ops import BENCH_OPS
from hccl_py.bench.sweep import Options
from hccl_py.bench.table import machine
from hccl_py.trace.plotting import pyplot, save

#: Column -> how it is measured: (function, extra arguments).
COLUMNS = {
    "emu": lambda op, n, sizes, o: peers.hccl_py_times(op, n, sizes, o, "emu", "kernel"),
    "emu/r8": lambda op, n, sizes, o: {
        s: t / 8
        for s, t in peers.hccl_py_times(
            op, n, [s for s in sizes if s <= R8_MAX], replace(o, repeat=8), "emu", "kernel"
        ).items()
    },
    "emu-fw": lambda op, n, sizes, o: peers.hccl_py_times(op, n, sizes, o, "emu", "framework"),
    "emu-poison": lambda op, n, sizes, o: peers.hccl_py_times(
        op, n, sizes, o, "emu", "kernel", poison=True
    ),
    "emu-late": lambda op, n, sizes, o: peers.hccl_py_times(
        op, n, sizes, o, "emu", "kernel", schedule="late"
    ),
    "tpg": peers.threaded_pg_times,
    "gloo": peers.raw_gloo_times,
    "ours-gloo": lambda op, n, sizes, o: peers.hccl_py_times(op, n, sizes, o, "gloo", "kernel"),
    "ours-gloo-fw": lambda op, n, sizes, o: peers.hccl_py_times(
        op, n, sizes, o, "gloo", "framework"
    ),
    "limit": peers.copy_limit_times,
}
#: Largest size of the per-round column (8 rounds of 16 MiB per rank need GiBs per world).
R8_MAX = 1 << 20
#: Ratio columns: (numerator column, denominator column).
RATIOS = {
    "emu/limit": ("emu", "limit"),
    "emu/tpg": ("emu", "tpg"),
    "fw/tpg": ("emu-fw", "tpg"),
    "gloo/emu": ("gloo", "emu"),
    "ours/gloo": ("ours-gloo", "gloo"),
    "fw/gloo": ("ours-gloo-fw", "gloo"),
    "poison/emu": ("emu-poison", "emu"),
    "late/emu": ("emu-late", "emu"),
}
#: Emulator scale points: (op, ranks, bytes per rank).
SCALE = [
    ("allgather", 16, 64 << 10),
    ("allgather", 32, 64 << 10),
    ("allgather", 64, 64 << 10),
    ("alltoall", 16, 64 << 10),
    ("alltoall", 32, 64 << 10),
    ("alltoall", 64, 64 << 10),
    ("alltoall", 128, 64 << 10),
]


def scale(opts: Options) -> tuple[str, list[dict]]:
    """Time and peak memory of large emulated worlds; time per byte moved (n*n*S) should stay flat."""
    lines = ["## scale (emulator, kernel API)", f"{'op':>10s} {'ranks':>6s} {'bytes':>8s} "
             f"{'ms/op':>9s} {'ns/KiB moved':>13s} {'peak MiB':>9s}"]  # fmt: skip
    rows = []
    for op, n, size in SCALE:
        seconds, peak = peers.scale_point(op, n, size, opts)
        per_kib = seconds / (n * n * size / 1024) * 1e9
        lines.append(f"{op:>10s} {n:6d} {size:8d} {seconds * 1e3:9.1f} {per_kib:13.1f} {peak:9.0f}")
        rows.append({"op": op, "ranks": n, "size": size, "seconds": seconds, "peak_mib": peak})
    return "\n".join(lines), rows


def _rss_mib() -> float:
    """This process's resident memory now (Linux), MiB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20
    except OSError:
        return float("nan")


def _sizes(lo: int, hi: int, factor: int) -> list[int]:
    out = [lo]
    while out[-1] * factor <= hi:
        out.append(out[-1] * factor)
    return out


def measure(op: str, ranks: int, sizes: list[int], opts: Options, columns: list[str]) -> dict:
    """Every column's seconds per op at every size (None where a peer failed)."""
    times: dict[str, dict[int, float | None]] = {}
    for col in columns:
        try:
            times[col] = dict.fromkeys(sizes) | COLUMNS[col](op, ranks, sizes, opts)
        except Exception as exc:  # noqa: BLE001 - a peer without the op: shown as '-'
            print(f"  {col} {op} on {ranks} ranks: {type(exc).__name__}: {exc}", file=sys.stderr)
            times[col] = dict.fromkeys(sizes)
    return times


def _cell(value: float | None, scale: float = 1e6, fmt: str = "10.1f") -> str:
    return f"{'-':>10s}" if value is None else f"{value * scale:{fmt}}"


def table(op: str, ranks: int, sizes: list[int], times: dict) -> str:
    """One op on one rank count: times in us, then the ratios."""
    cols = list(times)
    ratios = [r for r, (a, b) in RATIOS.items() if a in times and b in times]
    head = f"{'bytes':>10s} " + " ".join(f"{c:>10s}" for c in cols + ratios)
    lines = [f"## {op}, {ranks} ranks (times in us)", head]
    for s in sizes:
        cells = [_cell(times[c][s]) for c in cols]
        for r in ratios:
            a, b = (times[k][s] for k in RATIOS[r])
            cells.append(_cell(a / b if a and b else None, 1, "10.2f"))
        lines.append(f"{s:10d} " + " ".join(cells))
    return "\n".join(lines)


def plot(path: str, results: list[dict]) -> None:
    """Time per op against size, one panel per (op, ranks), one line per column."""
    plt = pyplot("--plot")
    fig, axes = plt.subplots(
        len(results), 1, figsize=(7, 3 * len(results)), squeeze=False, sharex=True
    )
    for ax, res in zip(axes[:, 0], results, strict=True):
        for col, per_size in res["times"].items():
            pts = [(int(s), t) for s, t in per_size.items() if t]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker=".", label=col)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{res['op']}, {res['ranks']} ranks", fontsize="small")
        ax.set_ylabel("s per op")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="x-small", ncol=4)
    axes[-1, 0].set_xlabel("bytes per rank")
    save(fig, path, dpi=80)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; print the tables; write JSON and PNG when asked."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--ops", nargs="+", default=list(BENCH_OPS), choices=list(BENCH_OPS))
    p.add_argument("--min-bytes", type=int, default=1 << 10)
    p.add_argument("--max-bytes", type=int, default=16 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="explicit sizes (bytes)")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--columns", nargs="+", default=list(COLUMNS), choices=list(COLUMNS))
    p.add_argument("--quick", action="store_true", help="4 ranks, allgather, 1 KiB..1 MiB")
    p.add_argument("--scale", action="store_true", help="also run 16..128 emulated ranks")
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.ranks, args.ops, args.max_bytes = [4], ["allgather"], 1 << 20
    sizes = args.sizes or _sizes(args.min_bytes, args.max_bytes, args.factor)
    opts = Options(iters=args.iters, warmup=args.warmup)
    results = []
    for n in args.ranks:
        for op in args.ops:
            times = measure(op, n, sizes, opts, args.columns)
            print(table(op, n, sizes, times), flush=True)
            print(f"(this process: {_rss_mib():.0f} MiB resident)", flush=True)
            results.append({"op": op, "ranks": n, "times": times})
    scaled: list[dict] = []
    if args.scale:
        text, scaled = scale(replace(opts, iters=max(3, opts.iters // 3), warmup=1))
        print(text, flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        data = {"machine": machine(), "results": results, "scale": scaled}
        Path(args.json).write_text(json.dumps(data, indent=1))
    if args.plot:
        plot(args.plot, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
