"""Fine-grained AlltoAllV (tiling stepSize > 0) at Finalize: reports count its steps.

A fine-grained handle's Commits and Waits count steps (``rankDim`` per round), and so must
what Finalize and a Wait after it report.
"""

from __future__ import annotations

import pytest
import torch
from test_iterate import FP32, client, tiling

import hccl_py as hp

N, C = 4, 2


def _run(body) -> hp.WorldError:
    def kernel(x, y, tilingGM):
        h = client(tilingGM)
        counts, displs = [C] * N, [C * j for j in range(N)]
        body(h, h.AlltoAllV(x, counts, displs, FP32, y, counts, displs, FP32, 1))

    def main() -> None:
        hp.launch(kernel, torch.zeros(N * C), torch.zeros(N * C), tiling(1))

    with pytest.raises(hp.WorldError) as info:
        hp.run(main, world_size=N, platform="A3", timeout=30, strict=False)
    return info.value


def test_a_wait_after_finalize_of_a_committed_step_is_reported() -> None:
    """4 steps committed, 2 waited, Finalize, Wait: the official Wait polls for step 2 a
    finished-turn counter that Finalize reset to 0 (hccl_aicpu_impl.h), so it never returns.
    Until stop 65 hccl_py compared rounds (1 waited of 1 committed) and returned -1 silently."""

    def body(h, handle):
        for _ in range(N):
            h.Commit(handle)
        assert [h.Wait(handle), h.Wait(handle)] == [0, 0]
        hp.SyncAll()
        h.Finalize()
        h.Wait(handle)

    err = _run(body).failures[0]
    assert isinstance(err, hp.HcclUnfinishedError)
    assert "Wait of handle 0 after Finalize: its step 2 was committed and not waited" in str(err)
    assert (err.handle, err.round) == (0, 0)  # step 2 of 4 per round: round 0


def test_finalize_with_steps_left_names_the_steps_committed() -> None:
    """3 of 4 steps committed: until stop 65 the report read "committed 0 of 1 rounds",
    though reports count a fine-grained task's steps as its rounds."""

    def body(h, handle):
        for _ in range(N - 1):
            h.Commit(handle)
            h.Wait(handle)
        hp.SyncAll()
        h.Finalize()

    err = _run(body)
    causes = err.root_causes or err.failures
    assert isinstance(causes[0], hp.HcclUnfinishedError)
    assert "committed 3 of 4 steps (0 of 1 rounds): the server would wait" in str(causes[0])
