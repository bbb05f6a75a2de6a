"""Memory of a gloo rank: resident MiB over many small launches, then the temporaries of one large op.

python benchmarks/memory_per_launch.py allgather 3000 16777216    # op, launches, bytes of the large op
"""

import json
import resource
import sys

import hccl_py as hp
from hccl_py.bench.calls import Step
from hccl_py.bench.ops import BENCH_OPS, plan
from hccl_py.bench.reference import REDUCE_OPS, TYPES


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def step(op: str, size: int) -> Step:
    kind = TYPES["fp32"]
    p = plan(BENCH_OPS[op], hp.get_world_size(), size, kind.size)
    return Step("kernel", p, kind, REDUCE_OPS["sum"], 1)


def body(op: str, launches: int, big: int) -> dict:
    small = step(op, 1 << 10)
    out = {"rss": []}
    for i in range(launches):
        small.run()
        if i in (99, launches // 3, launches - 1):
            out["rss"].append((i + 1, round(rss_mib(), 1)))
    s = step(op, big)
    base = rss_mib()
    s.run()
    out["op_bytes_mib"] = round(
        (s.send.numel() * s.send.element_size() + s.recv.numel() * s.recv.element_size()) / 2**20, 1
    )
    out["rss_with_buffers_mib"] = round(base, 1)
    out["temporaries_mib"] = round(max(peak_mib() - base, 0.0), 1)
    return out


if __name__ == "__main__":
    op, launches, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    res = hp.run(body, 4, backend="gloo", args=(op, launches, big))
    print(json.dumps(res[0]))
