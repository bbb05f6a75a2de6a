"""One handle as one core's Hccl object sees it: its op, rounds, Commits and Waits."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.constants import HcclCMDType
from ..core.task import Task
from ..kernel.cores import KernelCoreType
from ..ops import OPS


@dataclass
class Handle:
    """One handle as seen by one core's Hccl object."""

    op: HcclCMDType
    repeat: int
    kind: KernelCoreType
    commits: int = 0
    #: Commits beyond the last round (ignored, as the official client does; reports count them).
    extra_commits: int = 0
    waits: int = 0
    task: Task | None = None
    #: A ``Prepare[True]``'s task, not yet submitted: its first Commit hands the server both.
    unsent: bool = False
    #: Fine-grained AlltoAllV (tiling stepSize > 0): steps per Commit/Wait, steps counted,
    #: and the next slice Iterate hands out.
    step_size: int = 0
    steps_committed: int = 0
    steps_waited: int = 0
    slice: int = 0
    #: Prepared under the tiling's debugMode 1 (HCCL_ONLY_COMPUTE): nothing reaches a server.
    compute_only: bool = False
    #: How Commit, Wait, Query and Finalize treat it (``client.lifecycles.LIFECYCLES``): set
    #: from the fields above, which a handle keeps (every Commit and Wait reads it).
    lifecycle: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.compute_only:
            self.lifecycle = "compute-only"
        else:
            self.lifecycle = "fine-grained" if self.step_size else OPS[self.op].lifecycle

    @property
    def rounds_committed(self) -> int:
        """The server rounds this core committed: a fine-grained handle's rounds are its steps."""
        return self.steps_committed if self.step_size else self.commits

    @property
    def rounds_waited(self) -> int:
        """The server rounds this core waited for (steps, for a fine-grained handle)."""
        return self.steps_waited if self.step_size else self.waits

    def committed_text(self, rank_dim: int) -> str:
        """``"c of r rounds"``; for a fine-grained handle its steps first, as reports count
        them: ``"s of S steps (c of r rounds)"``."""
        rounds = f"{self.commits} of {self.repeat} rounds"
        if not self.step_size:
            return rounds
        return f"{self.steps_committed} of {self.repeat * rank_dim} steps ({rounds})"
