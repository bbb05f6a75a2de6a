"""``python -m hccl_py bench`` keeps working: its quick sweep finds no wrong element anywhere.

No timing is asserted (machines are noisy); what is checked is that every op
and API it covers moves the right bytes, that the numbers obey the nccl-tests
formulas, that a broken executor is caught, and that bad flags get a clear error.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hccl_py.backends.emu import executor

import hccl_py as hp
from hccl_py.__main__ import main as cli
from hccl_py.bench.ops import BENCH_OPS, plan, uneven_counts
from hccl_py.bench.reference import TYPES, expected, values
from hccl_py.core.constants import HcclCMDType, HcclDataType, HcclReduceOp


def _bench(tmp_path: Path, *flags: str) -> tuple[int, list[dict]]:
    out = tmp_path / f"bench{len(list(tmp_path.glob('bench*.json')))}.json"  # files are new
    code = cli(["bench", "--quick", "--no-progress", "--json", str(out), *flags])
    return code, json.loads(out.read_text())["sweeps"]


@pytest.mark.parametrize("api", ["kernel", "framework"])
def test_quick_sweep_of_every_op_is_right_on_the_emulator(
    tmp_path: Path, api: str, capsys: pytest.CaptureFixture
) -> None:
    code, sweeps = _bench(tmp_path, "--op", "all", "--ranks", "4", "--api", api)
    assert code == 0
    assert [s["op"] for s in sweeps] == list(BENCH_OPS)
    for sweep in sweeps:
        assert [r["size"] for r in sweep["rows"]] == [1024, 8192, 65536]
        assert all(r["wrong"] == 0 for r in sweep["rows"]), sweep
        factor = BENCH_OPS[sweep["op"]].bus_factor(4)
        for row in sweep["rows"]:
            assert row["time_us"] > 0 and row["time_us"] == max(row["rank_us"])
            assert row["busbw"] == pytest.approx(row["algbw"] * factor)
    table = capsys.readouterr().out
    assert "#wrong" in table and "Out of bounds values : 0 OK" in table


def test_repeat_and_block_dim_and_types(tmp_path: Path) -> None:
    for flags in (
        ("--op", "allgather,reducescatter", "--repeat", "3", "--block-dim", "2"),
        ("--op", "allreduce", "-d", "bf16", "-o", "max"),
        ("--op", "alltoallv", "-d", "int8", "--ranks", "3"),
        ("--op", "alltoall,reducescatter", "--poison", "--schedule", "late"),
    ):
        code, sweeps = _bench(tmp_path, *flags)
        assert code == 0, flags
        assert all(r["wrong"] == 0 for s in sweeps for r in s["rows"]), flags


def test_platform_defaults_to_a2_as_in_run_and_an_op_a2_lacks_runs_on_a3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HCCL_PY_PLATFORM", raising=False)
    code, sweeps = _bench(tmp_path, "--op", "allgather,alltoallv", "--nproc", "2")
    assert code == 0
    assert [(s["op"], s["platform"], s["ranks"]) for s in sweeps] == [
        ("allgather", "A2", 2),
        ("alltoallv", "A3", 2),
    ]
    code, sweeps = _bench(tmp_path, "--op", "allgather", "--ranks", "2", "--platform", "950")
    assert code == 0 and sweeps[0]["platform"] == "950"


def test_gloo_backend_quick_sweep(tmp_path: Path) -> None:
    code, sweeps = _bench(
        tmp_path, "--op", "allgather,alltoallv", "--ranks", "2", "--backend", "gloo"
    )
    assert code == 0
    assert {s["ranks"] for s in sweeps} == {2}
    assert all(r["wrong"] == 0 for s in sweeps for r in s["rows"])


def test_a_broken_executor_is_counted_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    original = executor.ROUNDS[HcclCMDType.HCCL_CMD_ALLGATHER]

    def skip_fp32(tasks: list, r: int) -> None:  # the barrier's own int AllGathers still run
        if tasks[0].dtype != HcclDataType.HCCL_DATA_TYPE_FP32:
            original(tasks, r)

    monkeypatch.setitem(executor.ROUNDS, HcclCMDType.HCCL_CMD_ALLGATHER, skip_fp32)
    code, sweeps = _bench(tmp_path, "--op", "allgather", "--ranks", "2")
    assert code == 1
    rows = sweeps[0]["rows"]
    # nothing was written: every element of every receive buffer stayed poisoned
    assert [r["wrong"] for r in rows] == [2 * 2 * r["count"] for r in rows]
    assert "FAILED" in capsys.readouterr().out


def test_an_unwritten_unsigned_output_is_counted_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uint8 outputs were poisoned with 0, which is every element of a MIN at 5 ranks (and
    many an input): a reduce_scatter_tensor that wrote nothing scored #wrong 0."""
    monkeypatch.setattr(hp, "reduce_scatter_tensor", lambda *args, **kwargs: None)
    flags = ("--api", "framework", "--op", "reducescatter", "-d", "uint8", "-o", "min")
    code, sweeps = _bench(tmp_path, *flags, "--ranks", "5", "-e", "1K")
    assert code == 1
    # every rank's whole output (count / 5 elements) stayed poisoned
    assert [r["wrong"] for r in sweeps[0]["rows"]] == [r["count"] for r in sweeps[0]["rows"]]


def test_plot_and_sizes_with_suffixes(tmp_path: Path) -> None:
    png = tmp_path / "bw.png"
    code = cli(
        ["bench", "-b", "2K", "-e", "8K", "-f", "2", "-n", "1", "-w", "0", "--no-progress"]
        + ["--plot", str(png), "--json", str(tmp_path / "b.json")]
    )
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = json.loads((tmp_path / "b.json").read_text())["sweeps"][0]["rows"]
    assert [r["size"] for r in rows] == [2048, 4096, 8192]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--op", "gather"), "unknown op(s) ['gather']"),
        (("-b", "8K", "-e", "1K"), "need 0 < minimum bytes <= maximum bytes"),
        (("--api", "framework", "--repeat", "2"), "--repeat applies to --api kernel only"),
        (("-f", "1"), "need a step factor >= 2"),
        # -i used to win silently (nccl-tests takes -f over -i): both given is a usage error
        (("-i", "1K", "-f", "4"), "-i/--stepbytes and -f/--stepfactor both set the step"),
        (
            ("-d", "fp64", "--op", "allreduce"),
            "AllReduce does not take -d fp64 in the kernel API; choose one of int8, int16, "
            "int32, fp16, fp32, bfp16, or --api framework",
        ),
        (
            ("--op", "alltoallv", "--platform", "A2"),
            "AlltoAllV is not in the kernel API of --platform A2 (it is on A3, 950); choose "
            "--platform A3 or --api framework",
        ),
        (("--ranks", "0"), "--ranks must be >= 1, not 0"),
        (("-n", "0"), "iterations (-n/--iters) must be >= 1, not 0"),
        (("-w", "-1"), "warm-up iterations (-w/--warmup-iters) must be >= 0, not -1"),
        # --quick sets the sweep's defaults, not the options given with it (-n -1 was ignored)
        (("--quick", "-n", "-1"), "iterations (-n/--iters) must be >= 1, not -1"),
        (("--quick", "-b", "128K"), "need 0 < minimum bytes <= maximum bytes"),
    ],
)
def test_bad_flags_get_a_clear_error(
    flags: tuple[str, ...], message: str, capsys: pytest.CaptureFixture
) -> None:
    assert cli(["bench", "--no-progress", *flags]) == 2
    assert message in capsys.readouterr().err


def test_options_given_with_quick_set_their_own_values(tmp_path: Path) -> None:
    """--quick is 1K..64K by 8, 2 iterations; -e and -n given with it change those two only."""
    out = tmp_path / "rows.json"
    assert (
        cli(["bench", "--quick", "--no-progress", "-e", "8K", "-n", "3", "--json", str(out)]) == 0
    )
    (sweep,) = json.loads(out.read_text())["sweeps"]
    assert [row["size"] for row in sweep["rows"]] == [1024, 8192]
    assert (sweep["step_factor"], sweep["iters"], sweep["warmup"]) == (8, 3, 1)


def test_size_suffix_errors_are_argparse_errors(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        cli(["bench", "-b", "12Q"])
    assert info.value.code == 2
    assert "not a size: '12Q'" in capsys.readouterr().err


def test_reference_against_hand_computed_blocks() -> None:
    """The reference itself, on 2 ranks, against blocks written out by hand from values()."""
    fp32 = TYPES["fp32"]
    p = plan(BENCH_OPS["alltoall"], 2, 16, 4)  # 4 elements per rank: 2 per peer
    v0, v1 = (values(r, 0, 4, False, fp32) for r in (0, 1))
    got = {(s.start, s.stop): w for s, w in expected(p, 1, fp32, HcclReduceOp.HCCL_REDUCE_SUM)}
    assert np.array_equal(got[(0, 2)], v0[2:4]) and np.array_equal(got[(2, 4)], v1[2:4])
    p = plan(BENCH_OPS["allreduce"], 3, 12, 4)
    ((where, want),) = expected(p, 0, fp32, HcclReduceOp.HCCL_REDUCE_MAX)
    stacked = np.stack([values(r, 0, 3, True, fp32) for r in range(3)])
    assert where == slice(0, 3) and np.array_equal(want, stacked.max(axis=0))
    counts = uneven_counts(12, 3)
    assert counts.sum(axis=0).tolist() == [12] * 3 and counts.sum(axis=1).tolist() == [12] * 3
    assert len(set(counts[0].tolist())) == 3  # uneven


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("cpu_per_op.py", ["allgather", "kernel", "1024"]),
        ("thread_cpu.py", ["allgather", "kernel"]),
        ("cpu_per_op.py", ["allgather", "kernel", "1 KiB", "10", "1"]),
        ("speed_summary.py", ["a", "b"]),
        ("checked_floor.py", ["--sizes", "1024", "6"]),
    ],
)
def test_benchmark_scripts_name_a_missing_or_bad_argument(
    script: str, args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A benchmark script given too few or unusable arguments prints its usage and what is wrong
    (exit status 2), not a traceback of an index or a conversion. Run as ``python SCRIPT ARGS``
    runs it, in this process (runpy, as __main__, with its sys.argv and folder first on
    sys.path): any exception but that exit would be the traceback."""
    import runpy
    import sys

    root = Path(__file__).resolve().parents[1]
    path = str(root / "benchmarks" / script)
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, "argv", [path, *args])
    monkeypatch.setattr(sys, "path", [str(root / "benchmarks"), *sys.path])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(path, run_name="__main__")
    stderr = capsys.readouterr().err
    assert done.value.code == 2, stderr
    assert "usage:" in stderr and "Traceback" not in stderr, stderr


def test_checked_floor_times_every_variant_and_checks_their_values(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """benchmarks/checked_floor.py runs its four all-gathers on gloo (each one's output is
    compared with the expected values inside, a wrong one raises) and writes their times to a
    new file, never over an old one (its main() refuses before it runs anything: asked in this
    process)."""
    import importlib.util
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "floor.json"
    script = root / "benchmarks/checked_floor.py"
    options = ["--sizes", "64", "--iters", "2", "--json", str(out)]
    done = subprocess.run([sys.executable, str(script), *options], capture_output=True,
                          text=True, timeout=120, cwd=root)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["bytes"] == 64 and row["ranks"] == 2
    assert sorted(row["us"]) == sorted(["raw", "one call", "two calls", "hccl_py"])
    assert all(t > 0 for t in row["us"].values())
    spec = importlib.util.spec_from_file_location("checked_floor", script)
    assert spec and spec.loader
    floor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(floor)
    with pytest.raises(SystemExit) as again:
        floor.main(options)
    assert again.value.code == 2 and "the file exists" in capsys.readouterr().err


def _failing_sweep(sweep: object) -> None:
    raise ValueError("planted failure of a rank's sweep")


def test_a_failed_sweep_is_one_report_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Until stop 65 a run that failed (a rank's error, a timeout) left the bench through a
    Python traceback ending in the WorldError; it is now its report, with exit status 1."""
    from hccl_py.bench import cli as bench_cli

    monkeypatch.setattr(bench_cli, "rank_sweep", _failing_sweep)
    assert cli(["bench", "--quick", "-n", "1", "-w", "0", "--nproc", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("python -m hccl_py bench: allgather on emu failed: "), err
    assert "rank 0: ValueError: planted failure of a rank's sweep" in err, err
    assert "hccl_py.core.errors.WorldError" not in err  # how an uncaught one's traceback ends
