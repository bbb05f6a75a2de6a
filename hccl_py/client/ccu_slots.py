"""The CCU client's message slots (Ascend 950): where a round goes, and where its Wait looks.

hccl_ccu_v0.h gives each handle, at Prepare, the slot its first round's completion is
polled at: the previous handle's slot plus that handle's ``repeat`` (``handleReqId_``), as
if each handle's rounds filled consecutive slots. A Wait polls that slot plus the handle's
finished count. A round goes to the next free slot when it is committed
(``globalCurResId_``, in Commit order). Commits that interleave handles, or a handle that
leaves rounds uncommitted before a later handle's, put rounds elsewhere than their Waits
look: the Wait then returns on another round's completion (the kernel reads a round that
may not have run) or polls a slot no round was sent to (it never returns). Only the sending
core's slots count; a Commit that finds all 64 slots in flight is sent later by a Wait
(``CommitMsg`` from ``Wait``), which is not modelled: the check stops there.
"""

from __future__ import annotations

from ..core.task import op_name
from .binding import Binding
from .failures import Failures
from .handle import Handle

#: The CCU client's message slots (hccl_inner_def.h, ``CCU_MAX_MSG_NUM``).
CCU_MAX_MSG_NUM = 64


def sent(b: Binding, h: int, rounds: range) -> None:
    """The CCU object ``b`` sent rounds ``rounds`` of handle ``h`` (a Commit, or a Prepare[True]
    for all of them): they take the next slots, in order."""
    if b.ccu_sent is None:
        return
    waited = sum(info.waits for info in b.handles)
    if len(b.ccu_sent) + len(rounds) - waited > CCU_MAX_MSG_NUM:
        b.ccu_sent = None  # a Commit with every slot in flight goes out later: not modelled
        return
    b.ccu_sent.extend((h, r) for r in rounds)


def check_wait(b: Binding, info: Handle, h: int, failures: Failures) -> None:
    """The sending core's Wait of round ``info.waits`` of handle ``h``: an error where the
    slot it polls holds another round, or none."""
    if b.ccu_sent is None:
        return
    polled = sum(other.repeat for other in b.handles[:h]) + info.waits
    holds = b.ccu_sent[polled] if polled < len(b.ccu_sent) else None
    if holds == (h, info.waits):
        return
    where = f"slot {polled % CCU_MAX_MSG_NUM}"
    if holds is None:
        outcome = f"no round was sent to {where}, so this Wait never returns"
    else:
        outcome = (
            f"{where} holds round {holds[1]} of handle {holds[0]}, so this Wait returns when "
            "that round completes, whether or not its own round ran"
        )
    failures.breach(
        "ccu-wait-slot",
        f"Wait of round {info.waits} of handle {h} on the CCU client polls the slot Prepare "
        "gave it (the previous handles' repeats plus its finished rounds), while rounds go to "
        f"the slots in Commit order (hccl_ccu_v0.h, CommonPrepareImpl and Commit): {outcome}. "
        "Commit each handle's rounds before the next handle's, all of them",
        None,
        handle=h,
        op=op_name(info.op),
        round=info.waits,
    )


def check_finalize(b: Binding, failures: Failures) -> None:
    """The CCU client's Finalize needs every round but the last handle's waited.

    hccl_ccu_v0.h, ``Finalize``: the working core Waits only the last handle
    (``curHandleId_ - 1``) until its finished count reaches its commits, then
    writes the FINALIZE message into slot ``globalCurWaitId_``, which counts the
    Waits; the rounds went to slots ``globalCurResId_``, which counts the Commits
    sent (``CommitMsg``). The two agree only when every other round was waited;
    otherwise the message lands on a slot the CCU has already read, the CCU
    waits for the next one and the kernel never finishes.
    """
    if not b.handles:
        return
    last = len(b.handles) - 1
    sent = [info.commits + info.extra_commits for info in b.handles]
    waited = [min(info.waits, n) for info, n in zip(b.handles, sent, strict=True)]
    open_ = [h for h in range(last) if waited[h] < sent[h]]
    if not open_:
        return
    h, info = open_[0], b.handles[open_[0]]
    what = info.task.describe() if info.task else op_name(info.op)
    slot = (sum(waited[:last]) + sent[last]) % CCU_MAX_MSG_NUM
    failures.breach(
        "finalize-unwaited",
        f"Finalize on the CCU client with handle {h} ({what}) "
        f"waited {waited[h]} of {sent[h]} committed rounds: its Finalize waits only for "
        f"the last handle ({last}) and writes the FINALIZE message into the slot after the "
        f"rounds waited ({slot}), not after the rounds sent ({sum(sent) % CCU_MAX_MSG_NUM}); "
        "the CCU reads its slots in order and never sees it (hccl_ccu_v0.h, Finalize: "
        "globalCurWaitId_). Wait every round of every handle before Finalize",
        None,
        rank=b.state.rank_ctx.rank,
        handle=h,
        op=op_name(info.op),
        round=waited[h],
    )
