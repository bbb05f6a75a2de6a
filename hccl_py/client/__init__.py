"""The kernel-side client: the API users call, split by job.

- :mod:`.hccl`: :class:`Hccl`, Commit / Wait / Query / Finalize / InterHcclGroupSync;
- :mod:`.prepare`: the five Prepare calls and their one path;
- :mod:`.convert`: :class:`PrepareParam` and the argument converters;
- :mod:`.base`: the object's state, failure reporting, Init / SetCcTiling;
- :mod:`.state`: what the objects of all cores of one launch share;
- :mod:`.sender`: which core sends.
"""

from .convert import PrepareParam
from .hccl import Hccl
from .sender import DEFAULT_CFG

__all__ = ["DEFAULT_CFG", "Hccl", "PrepareParam"]
