"""What an Hccl object does after Finalize, as the official AI CPU client does it.

hccl_aicpu_impl.h, ``Finalize``: on the sending core ``Finalize<true>`` waits for the last
handle, sends the FINALIZE message, waits for the server to read it and resets the
finished-turn counters that Waits and Queries poll; on any other core it only takes a message
slot and changes nothing else. So on the sending core a later Wait of a round committed and
not waited, and a second Finalize, never return: reported in every mode. On another core,
Query and Wait go on as before its Finalize. A second InitV2 is refused ("Init repeatedly is
not allowed"), also after Finalize: the object stays finalized.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from cases import RUN_TIMEOUT, init_hccl, make_tiling
from expect import expects_warning

import hccl_py as hp
from hccl_py import Hccl, HcclDataType

FP32 = HcclDataType.HCCL_DATA_TYPE_FP32
N = 4


def _gather(h: Hccl, x: Any, y: Any, repeat: int = 1) -> int:
    """AllGather of N elements per rank and round, rounds side by side (strideCount)."""
    return h.AllGather[True](x, y, N, FP32, repeat * N, repeat)


def _run(kernel: Any, block_dim: int = 1, strict: bool = False) -> list:
    """Launch ``kernel(x, y, tiling, record)`` on 2 emulated ranks; every rank's record."""

    def main() -> list:
        record: list = []
        x = torch.arange(2.0 * N) + 10 * hp.get_rank()
        hp.launch(kernel, x, torch.zeros(4 * N), make_tiling(), record, block_dim=block_dim)
        return record

    return hp.run(main, world_size=2, strict=strict, timeout=RUN_TIMEOUT)


def _wait_after_finalize(x: Any, y: Any, t: Any, record: list) -> None:
    h = init_hccl(Hccl(), t)
    handle = _gather(h, x, y, repeat=2)
    h.Wait(handle)
    h.Finalize()
    h.Wait(handle)  # round 1: committed at Prepare, not waited; its counter was reset


def _finalize_twice(x: Any, y: Any, t: Any, record: list) -> None:
    h = init_hccl(Hccl(), t)
    h.Wait(_gather(h, x, y))
    h.Finalize()
    h.Finalize()


@pytest.mark.parametrize(
    "kernel, words",
    [
        (_wait_after_finalize, "round 1 was committed and not waited"),
        (_finalize_twice, "Finalize again on the sending core"),
    ],
    ids=["wait", "finalize"],
)
def test_what_never_returns_after_finalize_is_reported_in_a_lenient_run(
    kernel: Any, words: str
) -> None:
    """Before, a lenient run returned -1 from that Wait and nothing from that Finalize."""
    with pytest.raises(hp.WorldError) as info:
        _run(kernel)
    for error in info.value.root_causes.values():
        assert isinstance(error, hp.HcclUnfinishedError), error
        assert words in str(error) and "would never return" in str(error)


def _idle_core_after_its_finalize(x: Any, y: Any, t: Any, record: list) -> None:
    """Block 1 does not send: it waits round 0, finalizes, then queries and waits round 1;
    block 0 finalizes after a SyncAll, once block 1 is done."""
    h = init_hccl(Hccl(), t)
    handle = _gather(h, x, y, repeat=2)
    if hp.GetBlockIdx() == 1:
        h.Wait(handle)
        h.Finalize()
        record.append((h.Query(handle) >= 1, h.Wait(handle), h.Query(handle)))
    else:
        h.Wait(handle)
        h.Wait(handle)
    hp.SyncAll()
    if hp.GetBlockIdx() == 0:
        h.Finalize()


def test_another_cores_finalize_changes_nothing_for_its_query_and_wait() -> None:
    """Before, block 1's Query answered 0 and its Wait -1 after its own Finalize."""
    for record in _run(_idle_core_after_its_finalize, block_dim=2, strict=True):
        assert record == [(True, 0, 2)]


def _init_again_after_finalize(x: Any, y: Any, t: Any, record: list) -> None:
    h = init_hccl(Hccl(), t)
    h.Wait(_gather(h, x, y))
    h.Finalize()
    init_hccl(h, t)
    record.append(_gather(h, x, y))


@expects_warning("repeated-init")
def test_init_after_finalize_is_refused_and_the_object_stays_finalized() -> None:
    """Before, the object started over: handle 0 again, and its task ran, where the official
    client's Prepare sends into a server that stopped and its Wait never returns."""
    results = _run(_init_again_after_finalize)
    assert [record for record in results] == [[-1], [-1]]
    for warnings in results.warnings.values():
        assert any("Init repeatedly is not allowed" in str(w) for w in warnings)
        assert any("stays finalized" in str(w) for w in warnings)


def _wait_after_finalize_all_waited(x: Any, y: Any, t: Any, record: list) -> None:
    h = init_hccl(Hccl(), t)
    handle = _gather(h, x, y)
    h.Wait(handle)
    h.Finalize()
    record.append((h.Wait(handle), h.last_error))  # its one round was waited: nothing polled


def test_a_wait_after_finalize_of_a_handle_waited_in_full_is_no_hang() -> None:
    """Only a round committed and not waited makes a Wait after Finalize hang (its counter was
    reset); with every round waited the Wait is the finalized object's -1 (a usage error in a
    strict run), not that report."""
    results = _run(_wait_after_finalize_all_waited)
    for rank, record in enumerate(results):
        assert record == [
            (-1, f"[rank {rank}, domain hccl_world_group, handle 0] Wait: the Hccl object was "
             "finalized and cannot communicate again")
        ]  # fmt: skip
