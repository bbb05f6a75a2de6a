"""GM addresses: byte arithmetic, allocation and rank knowledge, typed views, bounds, tilings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cases
import numpy as np
import pytest
import torch
from cases import RUN_TIMEOUT

import hccl_py as hp
from hccl_py import GmAddr, HcclDataType
from hccl_py.core.gm import to_gm
from hccl_py.explore import first_difference

FLOATS = 16  # the test allocation: 16 float32 = 64 bytes


@pytest.fixture
def buf() -> torch.Tensor:
    return torch.arange(FLOATS, dtype=torch.float32)


@pytest.fixture
def addr(buf: torch.Tensor) -> GmAddr:
    return to_gm(buf, rank=1, name="x")


def test_byte_offsets_add_and_subtract(addr: GmAddr) -> None:
    moved = addr + 12
    assert isinstance(moved, GmAddr) and moved.offset == 12 and moved.alloc is addr.alloc
    assert (4 + addr).offset == 4
    assert (moved - 8).offset == 4
    assert moved - addr == 12 and addr - moved == -12
    p = addr
    p += 8  # the kernels' `xGM += tileLen * tileNum * sizeof(half)`
    assert p.offset == 8 and addr.offset == 0, "+= makes a new address"
    assert addr + 8 == p and hash(addr + 8) == hash(p) and addr + 4 != p


def test_offsets_must_be_whole_bytes(addr: GmAddr) -> None:
    assert (addr + np.int64(8)).offset == 8 and (addr + torch.tensor(4)).offset == 4
    with pytest.raises(TypeError, match="whole bytes"):
        _ = addr + 2.5
    with pytest.raises(TypeError, match="whole bytes"):
        _ = addr - 1.0


def test_subtracting_addresses_of_different_allocations_fails(addr: GmAddr) -> None:
    other = to_gm(torch.zeros(4), rank=1)
    with pytest.raises(ValueError, match="different allocations"):
        _ = addr - other


def test_address_knows_rank_and_allocation(addr: GmAddr, buf: torch.Tensor) -> None:
    assert addr.rank == 1 and (addr + 20).rank == 1
    assert addr.alloc.nbytes == buf.numel() * 4 == 64
    assert addr.alloc.dtype == buf.dtype
    assert not addr.is_null and bool(addr)
    assert "x" in repr(addr + 4) and "rank 1" in repr(addr)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((1 << 34,), "GmAddr(alloc, offset) takes an allocation, not an int (17179869184); for an "
                     "integer address use hp.GmAddr.from_int(value)"),
        ((None, "x"), "GmAddr offset must be an int, not a str ('x')"),
    ],
)  # fmt: skip
def test_a_gm_address_of_something_else_is_a_clear_error(args: tuple, said: str) -> None:
    """Before 2026-11-30: an AttributeError of 'int' deep in gm.py, or int()'s ValueError."""
    with pytest.raises(TypeError) as info:
        GmAddr(*args)
    assert str(info.value) == said


def test_none_becomes_the_null_address() -> None:
    null = to_gm(None, rank=0)
    assert null is hp.NULL and null.is_null and not null and null == None  # noqa: E711
    assert null.rank is None


def test_other_arguments_pass_unchanged() -> None:
    marker = object()
    assert to_gm(marker, 0) is marker and to_gm(7, 0) == 7


def test_gm_tensor_is_a_view_sharing_memory(addr: GmAddr, buf: torch.Tensor) -> None:
    view = hp.gm_tensor(addr + 8, torch.float32, 4)
    assert view.tolist() == [2.0, 3.0, 4.0, 5.0]
    view.fill_(-1.0)  # writes through to the allocation
    assert buf[2:6].tolist() == [-1.0] * 4 and buf[1] == 1.0 and buf[6] == 6.0
    buf[3] = 42.0  # and the other way round
    assert view[1] == 42.0


def test_gm_tensor_accepts_hccl_data_types(addr: GmAddr, buf: torch.Tensor) -> None:
    as_int = hp.gm_tensor(addr, HcclDataType.HCCL_DATA_TYPE_INT32, 2)
    assert as_int.dtype == torch.int32
    assert as_int.tolist() == buf[:2].view(torch.int32).tolist()
    half = hp.gm_tensor(addr + 2, int(HcclDataType.HCCL_DATA_TYPE_FP16), 3)
    assert half.dtype == torch.float16 and half.numel() == 3
    raw = hp.gm_tensor(addr + 3, HcclDataType.HCCL_DATA_TYPE_HIF8, 5)  # byte-only type
    assert raw.dtype == torch.uint8
    assert raw.tolist() == buf.view(torch.uint8)[3:8].tolist()


def test_gm_tensor_of_int128_views_16_bytes_per_element(addr: GmAddr, buf: torch.Tensor) -> None:
    wide = hp.gm_tensor(addr + 16, HcclDataType.HCCL_DATA_TYPE_INT128, 2)
    assert wide.dtype == torch.uint8 and tuple(wide.shape) == (2, 16)
    assert wide.reshape(-1).tolist() == buf.view(torch.uint8)[16:48].tolist()
    with pytest.raises(hp.HcclBoundsError, match="not aligned to the 16-byte element size"):
        hp.gm_tensor(addr + 8, HcclDataType.HCCL_DATA_TYPE_INT128, 1)
    with pytest.raises(hp.HcclBoundsError, match=r"bytes \[48, 80\)"):
        hp.gm_tensor(addr + 48, HcclDataType.HCCL_DATA_TYPE_INT128, 2)


@pytest.mark.parametrize(
    "dtype", [HcclDataType.HCCL_DATA_TYPE_RESERVED, 13, 99, -1, "fp32", None, True, 4.0]
)
def test_gm_tensor_refuses_types_without_an_element_size(addr: GmAddr, dtype: Any) -> None:
    with pytest.raises(hp.HcclUsageError, match="dtype must be a torch dtype or an HcclDataType"):
        hp.gm_tensor(addr, dtype, 1)


@pytest.mark.parametrize("count", [2.5, "4", None, [1]])
def test_gm_tensor_refuses_counts_that_are_not_ints(addr: GmAddr, count: Any) -> None:
    with pytest.raises(hp.HcclUsageError, match="gm_tensor: count must be an int"):
        hp.gm_tensor(addr, torch.float32, count)


@pytest.mark.parametrize("where", [torch.zeros(4), 0, None])
def test_gm_tensor_needs_a_gm_address(where: Any) -> None:
    with pytest.raises(hp.HcclUsageError, match="gm_tensor: addr must be a GM address"):
        hp.gm_tensor(where, torch.float32, 1)


class _T:
    """An object with Python's default repr, ``<test_gm._T object at 0x7f...>``."""


def test_reports_name_no_address() -> None:
    """A default repr holds an address that no two runs share: the reports leave it out."""
    with pytest.raises(hp.HcclUsageError) as info:
        hp.gm_tensor(_T(), torch.float32, 1)
    assert str(info.value).endswith("not a test_gm._T (<test_gm._T object>)"), info.value
    assert first_difference([_T()], [0], "r") == "r[0]: _T vs int"
    assert first_difference({"k": _Unequal()}, {"k": _Unequal()}, "r") == (
        "r['k']: <test_gm._Unequal object> vs <test_gm._Unequal object>"
    )


class _Unequal:
    """Equal only to itself (an ``==`` of its own), with Python's default repr."""

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = None  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("offset", "count", "span"),
    [(8, 15, "[8, 68)"), (64, 1, "[64, 68)"), (-4, 1, "[-4, 0)")],
)
def test_bounds_errors_name_the_range_and_size(
    addr: GmAddr, offset: int, count: int, span: str
) -> None:
    with pytest.raises(hp.HcclBoundsError) as info:
        hp.gm_tensor(addr + offset, torch.float32, count)
    text = str(info.value)
    assert f"bytes {span}" in text and "64 bytes" in text and "x" in text and "rank 1" in text


def test_negative_view_size_is_rejected(addr: GmAddr) -> None:
    with pytest.raises(hp.HcclBoundsError, match="negative size of -4 bytes"):
        hp.gm_tensor(addr + 8, torch.float32, -1)


@pytest.mark.parametrize(
    ("size", "shown"), [(None, "a NoneType (None)"), ("4", "a str ('4')"), (2.0, "a float (2.0)")]
)
def test_byte_ranges_need_an_int_size(addr: GmAddr, size: Any, shown: str) -> None:
    """Before 2026-11-30 ``None < 0`` or a float slice index raised Python's own TypeError."""
    for call, what in ((addr.read_bytes, "GM view"), (addr.bytes_view, "GM view"),
                       (addr.check_range, "access")):  # fmt: skip
        with pytest.raises(hp.HcclUsageError) as info:
            call(size)
        assert f"{what}: the size must be an int number of bytes, not {shown}" in str(info.value)
    assert addr.read_bytes(np.int64(4)) == bytes(addr.bytes_view(4).tolist())


def test_a_view_up_to_the_last_byte_is_fine(addr: GmAddr) -> None:
    assert hp.gm_tensor(addr + 60, torch.float32, 1).item() == 15.0
    assert hp.gm_tensor(addr + 64, torch.float32, 0).numel() == 0


def test_unaligned_typed_view_is_rejected(addr: GmAddr) -> None:
    with pytest.raises(hp.HcclBoundsError, match=r"offset 2 .* not aligned .*4-byte"):
        hp.gm_tensor(addr + 2, torch.float32, 1)


def test_only_contiguous_tensors_are_gm_buffers() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        to_gm(torch.zeros(4, 4).t(), rank=0)
    # before 2026-11-30 a sparse tensor was "not contiguous, strides (0,)"
    with pytest.raises(ValueError, match=r"dense memory; got a torch.sparse_coo tensor of shape"):
        to_gm(torch.ones(4).to_sparse(), rank=0)


def test_tiling_struct_becomes_a_readable_copy() -> None:
    tiling = cases.make_tiling()
    gm = to_gm(tiling, rank=0)
    assert isinstance(gm, GmAddr) and gm.alloc.nbytes == len(bytes(tiling))
    back = hp.GET_TILING_DATA_WITH_STRUCT(cases.KernelTiling, gm)
    assert bytes(back) == bytes(tiling)
    tiling.mc2InitTiling.version = 7  # the GM copy does not follow the host struct
    assert hp.GET_TILING_DATA_WITH_STRUCT(cases.KernelTiling, gm).mc2InitTiling.version == 100


def _arg_kernel(xGM: Any, nullGM: Any, tilingGM: Any, scale: float, record: list) -> None:
    """Record what the launch passed; double x in place through a typed view."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(cases.KernelTiling, tilingGM)
    x = hp.gm_tensor(xGM, torch.float32, 4)
    x.mul_(scale)
    record.append(
        (
            type(xGM).__name__,
            xGM.rank,
            xGM.alloc.nbytes,
            nullGM.is_null,
            tiling.mc2InitTiling.mc2HcommCnt,
            scale,
        )
    )


def launch_args_rank() -> tuple[list, list]:
    """Per rank: what the kernel saw, and x after it."""
    x = torch.full((4,), float(hp.get_rank() + 1), device=hp.device())
    record: list = []
    hp.launch(_arg_kernel, x, None, cases.make_tiling(), 2.0, record)
    return record, x.cpu().tolist()


def test_launch_passes_tensors_as_addresses_of_this_rank() -> None:
    out = hp.run(launch_args_rank, world_size=2, backend="emu", timeout=RUN_TIMEOUT)
    for rank, (record, x) in enumerate(out):
        registered = sum(len(ops) for ops in cases.CONTEXT_OPS.values())  # cc tilings
        assert record == [("GmAddr", rank, 16, True, registered, 2.0)]
        assert x == [2.0 * (rank + 1)] * 4


def _foreign_kernel(xGM: Any, yGM: Any, tilingGM: Any, record: list, other: list) -> None:
    hccl = cases.init_hccl(hp.Hccl(), tilingGM, ops=("AllGather",))
    hccl.AllGather[True](other[0], yGM, 1, HcclDataType.HCCL_DATA_TYPE_FP32)


def foreign_rank() -> None:
    """Rank 0 passes an address of memory it does not own as sendBuf."""
    foreign = [to_gm(torch.zeros(4), rank=1 - hp.get_rank())]
    cases.probe(_foreign_kernel, foreign)


def test_send_buffer_of_another_rank_is_rejected() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(foreign_rank, world_size=2, backend="emu", timeout=RUN_TIMEOUT)
    for rank, err in info.value.root_causes.items():
        assert isinstance(err, hp.HcclUsageError)
        assert f"rank {1 - rank}'s memory" in str(err) and "sendBuf" in str(err)


def test_reference_numpy_views_match_gm_bytes(addr: GmAddr, buf: torch.Tensor) -> None:
    """The bytes a kernel sees at addr + k are the tensor's bytes k.. (little-endian layout)."""
    raw = addr.read_bytes(8)
    assert np.frombuffer(raw, dtype=np.float32).tolist() == buf[:2].tolist()


def _launch_meta() -> None:
    hp.launch(lambda x: None, torch.empty(4, device="meta"))


def test_a_meta_tensor_is_refused_with_what_to_do() -> None:
    with pytest.raises(hp.WorldError) as info:
        hp.run(_launch_meta, world_size=1, timeout=RUN_TIMEOUT)
    err = info.value.failures[0]
    assert isinstance(err, ValueError)
    assert "meta device" in str(err) and "hp.device()" in str(err)


def _gm_tensor_of_a_class(x: Any, seen: list) -> None:
    try:
        hp.gm_tensor(x, np.float16, 4)  # the numpy scalar class, where a dtype belongs
    except hp.HcclError as exc:
        seen.append(str(exc))


def test_a_class_passed_for_a_value_is_named_in_the_report() -> None:
    """Classes have a ``shape`` attribute of their own (a descriptor): describing one as an
    array raised "TypeError: 'getset_descriptor' object is not iterable" instead."""

    def main() -> list:
        seen: list = []
        hp.launch(_gm_tensor_of_a_class, torch.zeros(4), seen)
        return seen

    (seen,) = hp.run(main, world_size=1, timeout=RUN_TIMEOUT)
    assert len(seen) == 1 and "not a type (<class 'numpy.float16'>)" in seen[0], seen


def test_an_init_tiling_too_small_for_what_init_v2_reads_names_the_field_and_init_v2() -> None:
    """A buffer given to InitV2 that is not the tiling (launch arguments in the wrong order):
    InitV2 reads debugMode (platform_v220/hccl_aicpu.h) and names the field and InitV2, not
    only the bytes of a GM view (before 2026-11-30 the Wait that read queueNum did)."""

    def kernel(tilingGM: hp.GmAddr) -> None:
        hccl = hp.Hccl()
        hccl.InitV2(hp.GetHcclContext(0), tilingGM)
        hccl.Wait(0)

    with pytest.raises(hp.WorldError) as info:
        hp.run(lambda: hp.launch(kernel, torch.zeros(4)), world_size=1, strict=False)
    error = info.value.failures[0]
    assert isinstance(error, hp.HcclBoundsError) and error.rank == 0
    assert str(error) == (
        "[rank 0] Mc2InitTiling.debugMode (bytes [40, 41)) of the init tiling given to InitV2: "
        "GM view: bytes [0, 41) of tilingGM fall outside its 16 bytes"
    )


def test_a_bad_view_of_a_peer_s_window_names_the_rank_that_made_it() -> None:
    """The report's rank is the caller's; the window's name says whose it is (before, both
    the prefix and ``err.rank`` named the owner, rank 1)."""

    def kernel() -> None:
        ctx = hp.GetHcclContext(0)
        if ctx.rankId == 0:  # 4 bytes straddling the end of rank 1's In window
            hp.gm_tensor(ctx.windowsIn[1] + (1 << 20) - 2, torch.int32, 1)[:] = 1

    with pytest.raises(hp.WorldError) as info:
        hp.run(lambda: hp.launch(kernel), world_size=2, buffsize_mb=1)
    error = info.value.failures[0]
    assert isinstance(error, hp.HcclBoundsError) and error.rank == 0
    assert str(error).startswith(
        "[rank 0] GM view: bytes [1048574, 1048578) of WindowsIn of rank 1 fall outside its "
        "1048576 bytes"
    )


def _init_with(make_tiling: Callable[[], object]) -> None:
    hccl = hp.Hccl()
    hccl.InitV2(hp.GetHcclContext(0), make_tiling())
    hccl.Wait(0)


@pytest.mark.parametrize(
    ("tiling", "error", "said"),
    [
        (
            lambda: torch.zeros(3),
            hp.HcclUsageError,
            "InitV2: initTiling must be the kernel's tiling: its GM address "
            "(GET_TILING_DATA_WITH_STRUCT, hp.gm_addr), a TilingData struct or bytes",
        ),
        (lambda: 12345, hp.HcclUsageError, "InitV2: initTiling must be the kernel's tiling"),
        (
            lambda: b"\0" * 8,
            hp.HcclBoundsError,
            "Mc2InitTiling.debugMode (bytes [40, 41)) of the init tiling given to InitV2: "
            "the tiling source bytes holds 8 bytes, 41 are needed",
        ),
    ],
    ids=["tensor", "int", "short bytes"],
)
def test_an_init_tiling_of_the_wrong_kind_is_a_usage_error_not_a_raw_one(
    tiling: Callable[[], object], error: type, said: str
) -> None:
    """Before, a tensor or an int raised a raw TypeError from the tiling reader, and bytes too
    short a raw ValueError, in every mode (an audit's probes)."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(lambda: hp.launch(_init_with, tiling), world_size=1, strict=True)
    failure = info.value.failures[0]
    assert isinstance(failure, error) and failure.rank == 0, repr(failure)
    assert said in str(failure), failure


def _kernel_of_one_buffer(xGM: hp.GmAddr) -> None:
    pass


def launch_on_another_device() -> list[str]:
    """A rank whose device is not the CPU (as an NPU rank's) given CPU tensors."""
    hp.kernel.context.current_rank_context().device = torch.device("meta")
    said = []
    for call in (
        lambda: hp.launch(_kernel_of_one_buffer, torch.zeros(4)),
        lambda: hp.all_gather_into_tensor(torch.zeros(8), torch.zeros(4)),
    ):
        try:
            call()
        except ValueError as exc:
            said.append(str(exc))
    return said


def test_a_tensor_on_another_device_than_the_ranks_is_refused_by_name() -> None:
    """On an NPU rank a CPU tensor (or one on another NPU) failed inside torch_npu's process
    group, in a domain thread, or made it build a communicator for that device (a torch_npu
    audit): the launch and the framework collectives now name the device."""
    (said,) = hp.run(launch_on_another_device, world_size=1, timeout=RUN_TIMEOUT)
    assert len(said) == 2, said
    assert said[0] == (
        "GM buffer xGM of shape (4,) is on cpu, but rank 0 runs on meta: create it on "
        "hp.device() or move it there (.to(hp.device()))"
    )
    assert "output_tensor (shape (8,)) is on cpu, but rank 0 runs on meta" in said[1], said[1]


def _view_of_the_null_address() -> None:
    hp.gm_tensor(hp.GmAddr.from_int(0), torch.float32, 1)[0] = 1.0


def test_a_view_of_the_null_address_names_the_rank() -> None:
    """A window address that GetWindowsInAddr returned null for (a rank out of range) was viewed:
    the report had no [rank N] head, unlike every other (a new porter's trial)."""

    def main() -> None:
        if hp.get_rank() == 1:
            hp.launch(_view_of_the_null_address)

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=2, timeout=RUN_TIMEOUT)
    error = info.value.failures[1]
    assert isinstance(error, hp.HcclBoundsError) and error.rank == 1
    assert str(error).startswith("[rank 1] GM view: null address"), str(error)
