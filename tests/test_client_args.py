"""Prepare arguments at the edges: uint64 AlltoAllV arrays and a server config naming a missing core."""

from __future__ import annotations

import cases
import numpy as np
import pytest
import torch
from cases import RUN_TIMEOUT, init_hccl, make_tiling
from expect import expects_warning

import hccl_py as hp
from hccl_py import CoreType, Hccl, HcclDataType, HcclServerConfig

FP32 = HcclDataType.HCCL_DATA_TYPE_FP32


def _a2av_with(counts: object) -> tuple[int, str | None]:
    """Prepare an AlltoAllV on one rank with ``counts`` as sendCounts; return (handle, reason)."""
    seen: list = []

    def kernel(x, y, tilingGM):
        hccl = init_hccl(Hccl(), tilingGM, ops=["AlltoAllV"])
        handle = hccl.AlltoAllV[True](x, counts, [0], FP32, y, [1], [0], FP32)
        seen.append((handle, hccl.last_error))
        if handle >= 0:
            hccl.Wait(handle)
            hccl.Finalize()

    def main():
        from cases import make_tiling

        hp.launch(kernel, torch.zeros(4), torch.zeros(4), make_tiling())
        return seen[0]

    return hp.run(main, world_size=1, platform="A3", strict=False, timeout=RUN_TIMEOUT)[0]


def test_alltoallv_uint64_list_beyond_int64_is_reported_as_out_of_bounds() -> None:
    with pytest.raises(hp.WorldError) as info:
        _a2av_with([2**63])
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclBoundsError)
    assert f"[0, {2**63 * 4})" in str(err) and "16 bytes" in str(err)


@pytest.mark.parametrize("counts", [[1.0], [True], ["1"]])
def test_alltoallv_non_integer_counts_are_rejected(counts: list) -> None:
    handle, reason = _a2av_with(counts)
    assert handle == -1
    assert "sendCounts must hold integers" in reason


@pytest.mark.parametrize(
    "counts", [[np.int64(1)], [np.uint64(1)], list(np.cumsum([1])), [torch.tensor(1)]]
)
def test_alltoallv_accepts_lists_of_numpy_and_torch_integers(counts: list) -> None:
    """docs/api.md: any sequence of non-negative ints; a list built with numpy holds np.int64."""
    handle, reason = _a2av_with(counts)
    assert (handle, reason) == (0, None)


def test_alltoallv_accepts_uint64_numpy_counts() -> None:
    handle, reason = _a2av_with(np.array([1], dtype=np.uint64))
    assert (handle, reason) == (0, None)


@pytest.mark.parametrize("block", [10, -1])
def test_server_config_naming_a_missing_block_fails_at_prepare(block: int) -> None:
    def kernel(x, y, tilingGM):
        hccl = init_hccl(Hccl(config=HcclServerConfig(CoreType.ON_AIV, block)), tilingGM)
        hccl.AllGather(x, y, 1, FP32)

    def main():
        from cases import make_tiling

        hp.launch(kernel, torch.zeros(4), torch.zeros(16), make_tiling(), block_dim=4)

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, timeout=RUN_TIMEOUT)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclCoreError)
    assert f"AIV block {block} as the sending core" in str(err)
    assert "4 AIV cores, blocks 0..3" in str(err) and "block_dim=4" in str(err)


# ------------------------------------------------------------------ declared type against tensor dtype
FP16 = HcclDataType.HCCL_DATA_TYPE_FP16
UINT8 = HcclDataType.HCCL_DATA_TYPE_UINT8


def _gather_bytes(x: torch.Tensor, y: torch.Tensor, dtype: HcclDataType, count: int) -> None:
    def kernel(xGM, yGM, tilingGM):
        hccl = init_hccl(Hccl(), tilingGM)
        hccl.Wait(hccl.AllGather[True](xGM, yGM, count, dtype, 0))
        hccl.Finalize()

    from cases import make_tiling

    hp.launch(kernel, x, y, make_tiling())


def declared_types() -> list[bytes]:
    """FP16 declared on fp32 data (warned), then uint8 raw GM, float16 and bool as UINT8 (not)."""
    x = torch.arange(4.0)
    y = torch.zeros(4)
    _gather_bytes(x, y, FP16, 8)  # 16 bytes as 8 FP16 elements: legal, reinterpreted
    _gather_bytes(x.view(torch.uint8), torch.zeros(16, dtype=torch.uint8), FP16, 8)
    _gather_bytes(x.half(), torch.zeros(4, dtype=torch.float16), FP16, 4)
    _gather_bytes(torch.ones(4, dtype=torch.bool), torch.zeros(4, dtype=torch.bool), UINT8, 4)
    return [x.numpy().tobytes(), y.numpy().tobytes()]


@expects_warning("dtype-mismatch")
def test_declared_type_other_than_the_tensors_dtype_is_a_warning() -> None:
    out = hp.run(declared_types, world_size=1, timeout=RUN_TIMEOUT)
    sent, received = out[0]
    assert received == sent, "the bytes move unchanged, as on hardware"
    ((warning,),) = out.warnings.values()
    assert warning.kind == "dtype-mismatch" and warning.op == "AllGather"
    assert (warning.handle, warning.rank, warning.expected) == (0, 0, "HCCL_DATA_TYPE_FP16")
    assert (
        "dataType HCCL_DATA_TYPE_FP16 (2-byte elements), but sendBuf (xGM) is a torch.float32 "
        "tensor and recvBuf (yGM) is a torch.float32 tensor: the bytes are reinterpreted as FP16, "
        "as hardware does; declare HCCL_DATA_TYPE_FP32 or pass a tensor of the declared type"
    ) in str(warning)
    with pytest.raises(hp.WorldError, match=r"\[dtype-mismatch, raised by warnings_as_errors\]"):
        hp.run(declared_types, world_size=1, timeout=RUN_TIMEOUT, warnings_as_errors=True)


# ------------------------------------------------------------------ wrong number of arguments
def wrong_arity_reports() -> list[str]:
    """Every call of the garbage harness with two arguments too many, then with none."""
    from test_reliability import PREPARES

    said: list[str] = []

    def kernel(xGM, yGM, tilingGM):
        buffers = {"x": xGM, "y": yGM}
        for name, regular in PREPARES.items():
            for args in ([*regular, 0, 0], []) if regular else ([0, 0],):
                hccl = init_hccl(Hccl(), tilingGM)
                call = getattr(hccl, name)
                args = [buffers.get(a, a) if isinstance(a, str) else a for a in args]
                got = (call[True] if name in hp.ops.BY_NAME else call)(*args)
                said.append(f"{name}{len(args)} -> {got}: {hccl.last_error}")
                hccl.Finalize()

    from cases import make_tiling

    hp.launch(kernel, torch.ones(8), torch.zeros(16), make_tiling())
    return said


def test_wrong_number_of_arguments_names_the_ascendc_signature() -> None:
    (said,) = hp.run(wrong_arity_reports, world_size=1, strict=False, platform="A3")
    for line in said:
        assert "the AscendC signature is" in line and " -> -1: " in line, line
    text = "\n".join(said)
    assert (
        "AllReduce: too many positional arguments (8 positional given); the AscendC signature is "
        "AllReduce[commit](sendBuf, recvBuf, count, dataType, op, repeat=1), with the template "
        "flag given as AllReduce[...]"
    ) in text
    assert "Wait: missing a required argument: 'handleId' (0 positional given)" in text


def test_strict_runs_raise_the_arity_report() -> None:
    def kernel(xGM, yGM, tilingGM):
        hccl = init_hccl(Hccl(), tilingGM)
        hccl.AllReduce(xGM, yGM, 4, FP32, 0, 0, 1)  # strideCount 0, repeat 1: no strideCount

    def main():
        from cases import make_tiling

        hp.launch(kernel, torch.ones(4), torch.zeros(4), make_tiling())

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=1, timeout=RUN_TIMEOUT)
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclUsageError) and err.op == "AllReduce"
    assert "AllReduce[commit](sendBuf, recvBuf, count, dataType, op, repeat=1)" in str(err)


def test_template_argument_that_is_not_a_flag_is_a_usage_error() -> None:
    with pytest.raises(hp.HcclUsageError, match=r"SyncAll\[...\] takes a bool template argument"):
        hp.SyncAll["yes"]
    with pytest.raises(hp.HcclUsageError, match="SyncAll: too many positional arguments"):
        hp.SyncAll(True, 1)


@pytest.mark.parametrize("scope", [99, -1, None, "ALL"])
def test_enum_template_argument_that_is_no_member_names_the_members(scope: object) -> None:
    """Before 2026-11-30 ``QueueBarrier[99]`` raised the enum's own "99 is not a valid
    ScopeType", and ``QueueBarrier[None]`` said it takes a bool."""
    with pytest.raises(hp.HcclUsageError) as info:
        Hccl().QueueBarrier[scope]
    assert str(info.value) == (
        "QueueBarrier[...] takes a ScopeType (ScopeType.ALL (0), ScopeType.QUEUE (1), "
        f"ScopeType.BLOCK (2)) template argument, not {scope!r}"
    )


@pytest.mark.parametrize("server_type", [1, 2, "x", None, True])
def test_a_server_type_that_is_none_names_the_types(server_type: object) -> None:
    """Before 2026-11-30 ``Hccl[1]()`` raised the enum's own "1 is not a valid HcclServerType"
    (1 was the CCU's value in headers before 2025-12)."""
    for make in (lambda: Hccl[server_type](), lambda: Hccl(server_type=server_type)):
        with pytest.raises(hp.HcclUsageError) as info:
            make()
        assert str(info.value).startswith(
            "Hccl[...]: the server type must be an HcclServerType (HCCL_SERVER_TYPE_AICPU (0), "
            f"HCCL_SERVER_TYPE_CCU (5), HCCL_SERVER_TYPE_END (6)), not {server_type!r}"
        )
    assert Hccl[np.int64(5)]().server_type is hp.HcclServerType.HCCL_SERVER_TYPE_CCU


class _SevenCc(hp.TilingData):
    _fields_ = [("init", hp.Mc2InitTiling)] + [(f"cc{i}", hp.Mc2CcTiling) for i in range(7)]


#: opTypes with no Python API (INVALID, BROADCAST, REDUCE, ALLTOALLVC, ALLGATHER_V, the gap 19)
#: and HCCL_CMD_ALL, the first value the client refuses.
_OP_TYPES = [0, 1, 3, 9, 16, 19, 21]


@pytest.mark.parametrize("init", ["InitV2", "Init"])
def test_set_cc_tiling_takes_any_op_type_below_all(init: str) -> None:
    # platform_v220/hccl_aicpu.h, SetCcTiling/SetCcTilingV2: the one check is opType < HCCL_CMD_ALL
    seen: list = []

    def kernel(tilingGM):
        h = Hccl()
        if init == "InitV2":
            h.InitV2(hp.GetHcclContext(0), tilingGM)
        else:
            h.Init(hp.GetHcclContext(0), tilingGM)
        for i in range(len(_OP_TYPES)):
            at = hp.offsetof(_SevenCc, f"cc{i}")
            ret = h.SetCcTilingV2(at) if init == "InitV2" else h.SetCcTiling(tilingGM + at)
            seen.append((ret, h.last_error))

    def main():
        t = _SevenCc()
        cfg = hp.Mc2CcTilingConfig("hccl_world_group", hp.HcclCMDType.HCCL_CMD_ALLGATHER, "")
        assert cfg.GetTiling(t.init) == 0
        for i, op in enumerate(_OP_TYPES):
            assert cfg.GetTiling(getattr(t, f"cc{i}")) == 0
            getattr(t, f"cc{i}").opType = op  # the host refuses 0 and 19 cannot be set there
        hp.launch(kernel, t)
        return seen

    got = hp.run(main, world_size=1, platform="A3", strict=False, timeout=RUN_TIMEOUT)[0]
    assert got[:-1] == [(0, None)] * (len(_OP_TYPES) - 1)
    assert got[-1][0] == -1
    name = "SetCcTilingV2(3136)" if init == "InitV2" else "SetCcTiling"
    assert got[-1][1] == (
        f"[rank 0, domain hccl_world_group] {name}: opType 21 in the Mc2CcTiling is not below "
        "HCCL_CMD_ALL (21) (expected < 21, got 21)"
    )


def test_a_bound_template_method_keeps_what_functools_wraps_gives_the_unbound_one() -> None:
    """``hccl.AllGather`` is bound at each access without ``functools.update_wrapper``."""
    hccl = object.__new__(Hccl)
    for name in ("AllGather", "AlltoAllV", "Finalize"):
        unbound, bound = getattr(Hccl, name), getattr(hccl, name)
        assert bound is not unbound and bound._bound is hccl and unbound._bound is None
        assert vars(bound).keys() == vars(unbound).keys()
        for attr in ("__module__", "__name__", "__qualname__", "__doc__", "__wrapped__"):
            assert getattr(bound, attr) == getattr(unbound, attr), (name, attr)
        assert bound.__wrapped__.__name__ == name


def _gather_from_the_first_member(x, y, tilingGM):
    """InitV2 given ``&tiling->mc2InitTiling``, the address of the tiling's first member, as
    the 2026 AlltoAllvGroupedMatMul passes it: the cc tiling is read at an offset from it."""
    from cases import KernelTiling, cc_member

    tiling = hp.GET_TILING_DATA_WITH_STRUCT(KernelTiling, tilingGM)
    hccl = Hccl()
    hccl.InitV2(hp.GetHcclContext(0), tiling.mc2InitTiling)
    member = cc_member("AllGather")
    assert hccl.SetCcTilingV2(hp.offsetof(KernelTiling, member)) == 0, hccl.last_error
    hccl.Wait(hccl.AllGather[True](x, y, 4, FP32))
    hccl.Finalize()


def test_init_v2_with_the_address_of_the_tilings_first_member_reads_on_into_the_tiling() -> None:
    def main() -> list[float]:
        from cases import make_tiling

        y = torch.zeros(8)
        hp.launch(_gather_from_the_first_member, torch.full((4,), hp.get_rank() + 1.0), y,
                  make_tiling())  # fmt: skip
        return y.tolist()

    got = hp.run(main, world_size=2, timeout=RUN_TIMEOUT)
    assert got == [[1.0] * 4 + [2.0] * 4] * 2


def _ccu_finalize_async(x, y, tilingGM):
    hccl = init_hccl(Hccl(hp.HCCL_SERVER_TYPE_CCU), tilingGM, ops=["AllGather"])
    assert hccl.AllGather[True](x, y, 4, FP32) == 0
    hccl.Finalize[False]()  # the CCU client never reads sync: it waits as Finalize<true>
    assert hccl.AllGather[True](x, y, 4, FP32) == -1  # finalized
    hp.gm_tensor(y, torch.float32, 8).sum()  # ordered: no race report


def test_finalize_false_on_the_ccu_client_is_finalize_true() -> None:
    """Ascend 950's CCU client ignores Finalize's template argument (hccl_ccu_v0.h): no
    refusal, and the Finalize waits for the task, as Finalize<true> does."""

    def main() -> list[float]:
        from cases import make_tiling

        y = torch.zeros(8)
        hp.launch(_ccu_finalize_async, torch.full((4,), hp.get_rank() + 1.0), y, make_tiling())
        return y.tolist()

    got = hp.run(main, world_size=2, platform="950", strict=False, timeout=RUN_TIMEOUT)
    assert got == [[1.0] * 4 + [2.0] * 4] * 2
    assert got.warnings == {}


def _finalize_async(x, y, tilingGM, said: list, waits: bool) -> None:
    hccl = init_hccl(Hccl(), tilingGM, ops=["AllGather"])
    handle = hccl.AllGather[True](x, y, 4, FP32)
    if waits:
        hccl.Wait(handle)
    hccl.Finalize[False]()
    said.append(hccl.last_error)


def _finalize_async_main(waits: bool) -> tuple[list[float], list]:
    from cases import make_tiling

    y, said = torch.zeros(8), []
    x = torch.full((4,), hp.get_rank() + 1.0)
    hp.launch(_finalize_async, x, y, make_tiling(), said, waits)
    return y.tolist(), said


@pytest.mark.parametrize(
    ("platform", "waits", "backend"),
    [("A2", True, "emu"), ("A3", True, "emu"), ("A2", False, "emu"), ("A2", False, "gloo")],
)
def test_a_lenient_finalize_false_still_finalizes(platform: str, waits: bool, backend: str) -> None:
    """hccl_aicpu_impl.h: Finalize<false> makes no platform or task check, sends the FINALIZE
    message and returns; the launch ends once the server finished every task
    (``CommKfcDispatcher::Run``). A lenient run goes on alike (last_error says what the
    documentation forbids); before, it skipped the Finalize and the launch then failed with
    "Finalize() was never called", and the first fix left rounds nobody waited for unrun."""
    got = hp.run(
        _finalize_async_main, args=(waits,), world_size=2, platform=platform, strict=False,
        backend=backend, timeout=RUN_TIMEOUT,
    )  # fmt: skip
    for y, said in got:
        assert y == [1.0] * 4 + [2.0] * 4
        assert said and all("Finalize<false> is only allowed on Atlas A3" in s for s in said)


def _finalize_after_waits(x, y, tilingGM, server: int, waited: tuple[int, ...]) -> None:
    hccl = init_hccl(Hccl(server), tilingGM, ops=["AllGather"])
    handles = [hccl.AllGather[True](x, y, 4, FP32) for _ in range(2)]
    for h in waited:
        hccl.Wait(handles[h])
    hccl.Finalize()


def _run_finalize_after_waits(
    platform: str, server: int, waited: tuple[int, ...], strict: bool = True
) -> list:
    def main() -> list[float]:
        from cases import make_tiling

        y = torch.zeros(8)
        hp.launch(_finalize_after_waits, torch.full((4,), hp.get_rank() + 1.0), y,
                  make_tiling(), server, waited)  # fmt: skip
        return y.tolist()

    return hp.run(main, world_size=2, platform=platform, strict=strict, timeout=RUN_TIMEOUT)


@pytest.mark.parametrize("strict", [True, False])
def test_ccu_finalize_with_an_earlier_handle_not_waited_never_finishes(strict: bool) -> None:
    """The CCU client's Finalize Waits only the last handle and writes its message into the
    slot after the rounds *waited* (hccl_ccu_v0.h, Finalize: ``globalCurWaitId_``), not
    after the rounds sent: with handle 0 not waited it lands on handle 1's slot, which the
    CCU has read, and the kernel never finishes. An error in every run."""

    def main() -> None:
        from cases import make_tiling

        hp.launch(_finalize_after_waits, torch.ones(4), torch.zeros(8), make_tiling(),
                  hp.HCCL_SERVER_TYPE_CCU, (1,))  # fmt: skip

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, platform="950", strict=strict, timeout=RUN_TIMEOUT)
    causes = info.value.root_causes or info.value.failures
    assert {type(e).__name__ for e in causes.values()} == {"HcclUnfinishedError"}
    text = str(causes[0])
    assert "handle 0" in text and "waited 0 of 1 committed rounds" in text
    assert "slot after the rounds waited (1), not after the rounds sent (2)" in text


@pytest.mark.parametrize("strict", [True, False])
def test_a_wait_beyond_the_commits_on_the_ccu_client_is_an_error(strict: bool) -> None:
    """The CCU client's Wait checks only that the handle was committed once (hccl_ccu_v0.h,
    Wait) and polls the slot after its last round: a second Wait of a one-round handle hangs,
    or takes the next handle's completion so that its Wait hangs. The AI CPU client returns
    -1 at once there (a ``wait-not-committed`` warning); on the CCU it is an error in every
    run."""
    with pytest.raises(hp.WorldError) as info:
        _run_finalize_after_waits("950", hp.HCCL_SERVER_TYPE_CCU, (0, 0, 1), strict=strict)
    causes = info.value.root_causes or info.value.failures
    assert {type(e).__name__ for e in causes.values()} == {"HcclUsageError"}
    err = causes[0]
    assert (err.handle, err.round, err.actual) == (0, 1, 2)
    assert "Wait of handle 0 after its 1 committed round(s) were all waited" in str(err)


def _ccu_extra_round(x, y, tilingGM) -> None:
    hccl = init_hccl(Hccl(hp.HCCL_SERVER_TYPE_CCU), tilingGM, ops=["AllGather"])
    handle = hccl.AllGather[True](x, y, 4, FP32)
    hccl.Commit(handle)  # beyond repeat = 1: the CCU sends it as one more round
    got = [hccl.Wait(handle), hccl.Wait(handle)]
    hccl.Finalize()
    hp.gm_tensor(y, torch.float32, 2)[:] = torch.tensor(got, dtype=torch.float32) + 10


@expects_warning("extra-commit")
def test_a_wait_of_the_ccu_client_s_extra_round_returns() -> None:
    """The CCU client sent the extra Commit as a round (hccl_ccu_v0.h, CommitMsg), so a second
    Wait polls exactly that round's slot and returns: no ccu-wait-beyond error."""

    def main() -> list[float]:
        from cases import make_tiling

        y = torch.zeros(8)
        hp.launch(_ccu_extra_round, torch.full((4,), hp.get_rank() + 1.0), y, make_tiling())
        return y.tolist()

    got = hp.run(main, world_size=2, platform="950", timeout=RUN_TIMEOUT)
    assert got == [[10.0, 10.0, 1.0, 1.0] + [2.0] * 4] * 2


@expects_warning("wait-not-committed")
def test_a_wait_beyond_the_commits_on_the_950_ai_cpu_client_returns_minus_1() -> None:
    got = _run_finalize_after_waits("950", hp.HCCL_SERVER_TYPE_AICPU, (0, 0, 1), strict=False)
    assert got == [[1.0] * 4 + [2.0] * 4] * 2


@pytest.mark.parametrize(
    ("platform", "server", "waited"),
    [
        ("950", hp.HCCL_SERVER_TYPE_CCU, (0, 1)),  # every round waited: the next slot
        ("950", hp.HCCL_SERVER_TYPE_CCU, (0,)),  # the last handle: Finalize Waits it itself
        ("950", hp.HCCL_SERVER_TYPE_AICPU, (1,)),  # the AI CPU message goes to the next slot
        ("A3", hp.HCCL_SERVER_TYPE_AICPU, ()),
    ],
)
def test_finalize_without_every_wait_is_fine_where_its_message_takes_the_next_slot(
    platform: str, server: int, waited: tuple[int, ...]
) -> None:
    got = _run_finalize_after_waits(platform, server, waited)
    assert got == [[1.0] * 4 + [2.0] * 4] * 2
    assert got.warnings == {}


def _extra_commit(x, y, tilingGM, server: int) -> None:
    hccl = init_hccl(Hccl(server), tilingGM, ops=["AllGather"])
    handle = hccl.AllGather[True](x, y, 4, FP32)
    hccl.Commit(handle)  # beyond repeat = 1
    hccl.Wait(handle)
    hccl.Finalize()


@expects_warning("extra-commit")
@pytest.mark.parametrize(
    ("platform", "server", "says"),
    [
        ("A3", hp.HCCL_SERVER_TYPE_AICPU, "the official client ignores it"),
        ("950", hp.HCCL_SERVER_TYPE_CCU, "the CCU client sends it as round 1, past the task's"),
    ],
)
def test_an_extra_commit_says_what_each_client_does_with_it(
    platform: str, server: int, says: str
) -> None:
    """The AI CPU client drops a Commit beyond repeat; the CCU client sends it as one more
    round (hccl_ccu_v0.h, Commit and CommitMsg), which reads and writes past the buffers."""

    def main() -> None:
        from cases import make_tiling

        hp.launch(_extra_commit, torch.ones(4), torch.zeros(8), make_tiling(), server)

    out = hp.run(main, world_size=2, platform=platform, timeout=RUN_TIMEOUT)
    kinds = {w.kind for ws in out.warnings.values() for w in ws}
    assert kinds == {"extra-commit"}
    assert all(says in str(w) for ws in out.warnings.values() for w in ws)


def test_template_arguments_take_numpy_bools_and_integers() -> None:
    """Before, SyncAll[np.False_] (a flag computed with numpy) was refused as not a flag."""
    passed: list[int] = []

    def kernel() -> None:
        hp.SyncAll[np.False_]()  # every core of the mixed kernel
        if hp.g_coreType == hp.AIV:
            hp.SyncAll[np.int64(1)]()  # the AIV cores
        passed.append("AIV" if hp.g_coreType == hp.AIV else "AIC")

    def main() -> None:
        hp.launch(kernel, block_dim=2, kernel_type="mix_aic_1_2")

    hp.run(main, world_size=1, timeout=RUN_TIMEOUT)
    assert sorted(passed) == ["AIC"] * 2 + ["AIV"] * 4


#: A kernel made by ``exec`` in a module's namespace, its lines past that file's end: until
#: stop 64 its warning raised an IndexError (Python took the source line from this module's
#: loader, given the module's globals).
_GENERATED = (
    "\n" * 2000
    + """
def generated_kernel(x, y, tilingGM):
    hccl = init_hccl(Hccl(), tilingGM, ops=["AllGather"])
    handle = hccl.AllGather[True](x, y, 4, HcclDataType.HCCL_DATA_TYPE_FP32)
    got = [hccl.Wait(handle), hccl.Wait(handle)]  # one Wait too many: -1 and a warning
    hccl.Finalize()
    return got
"""
)


@expects_warning("wait-not-committed")
def test_a_warning_from_code_made_by_exec_is_a_warning() -> None:
    # the namespace of a module that a plain loader imported (pytest's loader of this test
    # module gives Python no source to take a line from)
    space = dict(vars(cases), Hccl=Hccl, HcclDataType=HcclDataType, init_hccl=init_hccl)
    exec(compile(_GENERATED, "<generated kernel>", "exec"), space)  # noqa: S102

    def main():
        out = []
        y = torch.zeros(8)
        hp.launch(
            lambda *a: out.append(space["generated_kernel"](*a)),
            torch.full((4,), hp.get_rank() + 1.0),
            y,
            make_tiling(),
        )
        return out[0], y.tolist()

    got = hp.run(main, world_size=2, strict=False, timeout=RUN_TIMEOUT)
    assert got == [([0, -1], [1.0] * 4 + [2.0] * 4)] * 2
    kinds = {rank: [w.kind for w in found] for rank, found in got.warnings.items()}
    assert kinds == {0: ["wait-not-committed"], 1: ["wait-not-committed"]}, kinds
