"""What the window race check reports: its writes and findings, their text, the advice.

:mod:`.races` finds the reads that nothing orders with a write (a :class:`Write`);
this module says which ones, who should order them and how (a flag, a Drain, a Wait).
"""

from __future__ import annotations

from dataclasses import dataclass

from hccl_py.core.errors import HcclRaceError
from hccl_py.server.windows import WindowAllocation

#: Findings listed in one report.
SHOWN = 4


@dataclass(frozen=True, eq=False)
class Write:
    """One write of window bytes: who, with which clock, where in the program."""

    rank: int
    clock: tuple[int, ...]
    seq: int
    where: str
    flag: bool
    #: The clock component that counts this write: the rank's own, or its BatchWrite queue's.
    agent: int
    #: Landed by an Hcomm channel (WriteNbi, ReadNbi's destination): ordered by its Drain.
    hcomm: bool = False
    #: The call whose posted copy this is (BatchWrite, AlltoAllvWrite); "" for a kernel's write.
    call: str = ""

    @property
    def epoch(self) -> int:
        return self.clock[self.agent]


@dataclass
class Finding:
    """A read that nothing orders with a write of the same bytes by a peer (or by the reader's
    own BatchWrite queue or Hcomm channel, which land after the call)."""

    early: bool
    reader: int
    write: Write
    window: WindowAllocation
    lo: int
    hi: int
    read_where: str
    #: The reader's kernel had returned when the write came: the writer's kernel reports it.
    orphan: bool = False
    #: Where the rank that should have been ordered took a numpy view it still held (or None).
    blind: str | None = None

    def text(self) -> str:
        w, where = self.write, f"bytes [{self.lo}, {self.hi}) of {self.window.name}"
        where += f" (domain {self.window.domain})"
        how = "wrote through an Hcomm channel" if w.hcomm else "wrote"
        if w.call and self.reader == w.rank:
            how = f"sent to its own window with {_article(w.call)} {w.call}"
        gap = "flag, Drain" if w.hcomm else "flag"
        if self.early:
            return (
                f"rank {self.reader} read {where} at {self.read_where}, which rank {w.rank} "
                f"{how} at {w.where}, with no {gap} or completed Wait in between: the data "
                "may not have arrived yet (the read saw 0xFF there)"
            )
        return (
            f"rank {self.reader} read {where} at {self.read_where} before rank {w.rank} wrote "
            f"them at {w.where}, with no flag or completed Wait in between: the read may have "
            "seen the old bytes or the new ones"
        )


def _article(call: str) -> str:
    return "an" if call[0] in "AEIOU" else "a"


def blind_text(f: Finding) -> str:
    """Why finding ``f`` cannot be checked (a warning, never an error)."""
    who = f.reader if f.early else f.write.rank
    return (
        f"window race check: cannot tell whether rank {f.reader}'s read of bytes "
        f"[{f.lo}, {f.hi}) of {f.window.name} at {f.read_where} is ordered with rank "
        f"{f.write.rank}'s write at {f.write.where}: rank {who} holds a numpy view of window "
        f"bytes taken at {f.blind}, and what it reads through that view (a flag it polls) is "
        "not seen; read flags through torch (t[0], t.item(), t.tolist()) to have them checked"
    )


HCOMM_ADVICE = (
    "Have rank {writer} Drain the channel before the flag that announces the data or before "
    "reading a ReadNbi's destination (or send the flag on the same channel: its writes land in "
    "order); see docs/hcomm.md"
)
QUEUE_ADVICE = (
    " through the data's BatchWrite queue (its copies land in order; a flag on another queue "
    "needs a QueueBarrier[ALL] before it)"
)
OWN_ADVICE = (
    "A BatchWrite's copies land when the server runs it, after the call, its items towards the "
    "rank's own window too: have rank {reader} Wait for the BatchWrite before reading what it "
    "sends there (or poll a flag item sent after the data on the same queue); see "
    "docs/windows.md#races"
)
A2AV_WRITE_ADVICE = (
    "An AlltoAllvWrite's copies land after the call, the rank's own slice too: have rank {reader} "
    "read its window after a Wait on its AlltoAllvWrite that returned 0, on a core that committed "
    "it (another core's Wait returns -1 at once and waits for nothing); see docs/windows.md#races"
)
ADVICE = (
    "Have rank {writer} write a flag after the data{queue} and rank {reader} poll it until it "
    "holds this round's value before reading (or Wait on a task both ranks committed); see "
    "docs/windows.md#races"
)


def race_error(
    rank: int, found: list[Finding], failed: BaseException | None = None
) -> HcclRaceError:
    """One report for the findings of a kernel of ``rank`` (that then ``failed``, if it did)."""
    found.sort(key=lambda f: (f.reader, f.window.name, f.lo))
    more = [f"  - and {len(found) - SHOWN} more"] * (len(found) > SHOWN)
    lines = [f"  - {f.text()}" for f in found[:SHOWN]] + more
    first, w = found[0], found[0].write
    queue = QUEUE_ADVICE * (w.call == "BatchWrite")
    what, advice = ("an Hcomm channel", HCOMM_ADVICE) if w.hcomm else ("a peer", ADVICE)
    if w.call and first.reader == w.rank:
        what, advice = f"the rank's own {w.call}", OWN_ADVICE
    if w.call == "AlltoAllvWrite":
        advice = A2AV_WRITE_ADVICE
    advice = advice.format(writer=w.rank, queue=queue, reader=first.reader)
    text = f"window race: a read of window bytes that {what} writes is not ordered with the write:"
    if failed is not None:
        lines.append(
            f"  and then the kernel failed ({type(failed).__name__}: {failed}), most likely on "
            "the 0xFF it read where the data had not arrived"
        )
    return HcclRaceError("\n".join([text, *lines, advice]), rank=rank, domain=first.window.domain)
