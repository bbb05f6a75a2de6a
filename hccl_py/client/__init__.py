"""The kernel-side client: the API users call, a front and objects with one job each.

- :mod:`.hccl`: :class:`Hccl`, the AscendC calls, forwarding to the objects below;
- :mod:`.binding`: one object's state (domain, tilings, handles), declared in one place;
- :mod:`.failures`: how a call fails, by the rules of :data:`hccl_py.core.rules.RULES`;
- :mod:`.setup`: Init / InitV2 / SetCcTiling(V2);
- :mod:`.prepare`: the one Prepare path; :mod:`.convert`: :class:`PrepareParam` and the
  argument converters;
- :mod:`.control`: Commit / Wait / Query / Finalize / InterHcclGroupSync, by the
  handle lifecycles of :mod:`.lifecycles`;
- :mod:`.onesided`: windows, queues, BatchWrite; :mod:`.finegrained`: fine-grained
  AlltoAllV and Iterate; :mod:`.half_alltoallv`: AlltoAllvWrite;
- :mod:`.state`: what the objects of all cores of one launch share;
- :mod:`.sender`: which core sends.
"""

from .convert import PrepareParam
from .hccl import Hccl
from .sender import DEFAULT_CFG

__all__ = ["DEFAULT_CFG", "Hccl", "PrepareParam"]
