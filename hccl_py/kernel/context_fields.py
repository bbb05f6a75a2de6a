"""The C++ context fields of ``GetHcclContext(i)``, under their C++ names.

Shipping kernels read the context structure directly: ``HcclCombineOpParam``
(A2, Ascend 950: ``rankId``, ``rankNum``, ``winSize``, ``windowsIn[i]``,
``windowsOut[i]``) and the A3 ``HcclOpResParam`` (``localUsrRankId``,
``rankSize``, ``localWindowsIn/Out/Exp``, ``winExpSize``,
``remoteRes[r].nextDevicePtr->windowsIn/Out/Exp``, ``userMemType``: 0, the windows are
HCCL's CCL buffers, so ``userMemRes`` is not filled). On Ascend 950 the context
is the CCU's: index 0 of ``windowsIn``/``windowsOut`` is this rank's own
window, unless the launch's tiling asks for the MTE engine (``commEngine`` 3,
``AIV_ENGINE``) for the domain: then, as on A2, ``windowsIn[r]`` is rank r's
(docs/windows.md, "The context"). ``rankDim`` is ``rankNum`` under the name the
kernels' own copies of the structure give that field.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.config import c_int
from ..core.constants import HcclServerType
from ..core.errors import HcclUsageError
from ..core.gm import GmAddr
from ..server.windows import window_bytes

#: ``HcclOpResParam::userMemType`` of every context: 0, "CCL Buffer" (1 would be user memory
#: registered with HCCL, whose addresses ``userMemRes[r]`` gives; hccl_py has none).
USER_MEM_TYPE_CCL_BUFFER = 0

#: ``mc2tiling::AIV_ENGINE``: a cc tiling for the MTE engine (no AI CPU server, no CCU). On
#: Ascend 950 the host builds the context of such a domain with every rank's windows.
AIV_ENGINE = 3

if TYPE_CHECKING:
    from .context import Group


class ContextFields:
    """The fields of :class:`~hccl_py.kernel.cores.HcclContext` that C++ kernels read."""

    group: Group
    #: The kernel launch (``cores.LaunchState``, which imports this module).
    launch: Any

    @property
    def _ccu(self) -> bool:
        """Whether this is the CCU's context (Ascend 950), which lists only this rank's windows.

        A domain whose cc tiling in the launch's tiling asks for the MTE engine
        (``SetCommEngine(3)``, as the 950 MTE kernels' hosts do) gets the MTE context instead.
        """
        if self.launch.rank_ctx.config.platform.server != HcclServerType.HCCL_SERVER_TYPE_CCU:
            return False
        return self.launch.cc_engines.get(self.group.name) != AIV_ENGINE

    @property
    def rankId(self) -> int:  # noqa: N802 - the C++ field name
        """This rank's id in the domain."""
        return self.group.rank_of(self.launch.rank_ctx.rank)

    @property
    def rankNum(self) -> int:  # noqa: N802
        """The number of ranks of the domain."""
        return self.group.size

    localUsrRankId = rankId
    rankSize = rankNum
    rankDim = rankNum  # the name in the 950 kernels' HcclCombinOpParam / HcclA5OpResParam

    @property
    def winSize(self) -> int:  # noqa: N802
        """The bytes of each window (``HCCL_BUFFSIZE``; twice that on Ascend 950)."""
        config = self.launch.rank_ctx.config
        return window_bytes(config.buffsize_mb, config.platform.window_factor)

    winExpSize = winSize

    #: ``capability`` (A2 ``HcclA2CombineOpParam``): a null pointer, no capability structure, so
    #: ``GetDataplaneMode`` of the MoE kernels reads the AI CPU data plane (hccl_py has no AIV one).
    capability = 0

    @property
    def windowsIn(self) -> WindowTable:  # noqa: N802
        """``windowsIn[i]``, as :meth:`windows_in`."""
        return WindowTable(self, "In")

    @property
    def windowsOut(self) -> WindowTable:  # noqa: N802
        """``windowsOut[i]``, as :meth:`windows_out`."""
        return WindowTable(self, "Out")

    @property
    def localWindowsIn(self) -> GmAddr:  # noqa: N802
        """This rank's In window (A3 ``HcclOpResParam``)."""
        return self._own("In")

    @property
    def localWindowsOut(self) -> GmAddr:  # noqa: N802
        """This rank's Out window (A3 ``HcclOpResParam``)."""
        return self._own("Out")

    @property
    def localWindowsExp(self) -> GmAddr:  # noqa: N802
        """This rank's third window, Exp (A3 ``HcclOpResParam``; MoE status words)."""
        return self._own("Exp")

    @property
    def remoteRes(self) -> RemoteResTable:  # noqa: N802
        """``remoteRes[r].nextDevicePtr``: peer ``r``'s windows (A3 ``HcclOpResParam``)."""
        return RemoteResTable(self)

    #: ``userMemType``: 0, the windows are HCCL's CCL buffers (A3 ``HcclOpResParam``). The
    #: AttentionToFFN / FFNToAttention kernels read it to choose between ``remoteRes`` and
    #: ``userMemRes``.
    userMemType = USER_MEM_TYPE_CCL_BUFFER  # noqa: N815

    @property
    def userMemRes(self) -> UserMemResTable:  # noqa: N802
        """``userMemRes[r]``: not filled, since ``userMemType`` is 0 (A3 ``HcclOpResParam``)."""
        return UserMemResTable(self)

    @property
    def sqs(self) -> JettyTable:
        """``sqs[r]`` (``HcclAiRMAWQ``): the AIV URMA data plane's send queues; not modelled."""
        return JettyTable(self, "sqs", "HcclAiRMAWQ")

    @property
    def cqs(self) -> JettyTable:
        """``cqs[r]`` (``HcclAiRMACQ``): the AIV URMA data plane's completion queues; not modelled."""
        return JettyTable(self, "cqs", "HcclAiRMACQ")

    def _own(self, kind: str) -> GmAddr:
        server = self.launch.rank_ctx.server
        return GmAddr(server.window(self.group.name, self.launch.rank_ctx.rank, kind))

    def _window(self, rankId: Any, kind: str) -> GmAddr:
        what = f"windows{kind}[{rankId!r}]"
        if c_int(rankId) is None:
            raise HcclUsageError(f"{what}: the index must be an int, not {type(rankId).__name__}")
        if self._ccu:
            if rankId != 0:
                raise HcclUsageError(
                    f"{what}: on {self.launch.rank_ctx.config.platform.name} the context is the "
                    "CCU's, whose window entry 0 is this rank's own window (the CCU client's "
                    "scratch, windowsOut[0]); peers' windows are reached through AlltoAllvWrite, "
                    "or through windowsIn[r] of the MTE context, which a launch gets when its "
                    "tiling's cc tiling for the domain asks for the MTE engine "
                    f"(SetCommEngine({AIV_ENGINE}))"
                )
            return self._own(kind)
        if not 0 <= rankId < self.group.size:
            raise HcclUsageError(
                f"{what}: the domain {self.group.name} has ranks 0..{self.group.size - 1}"
            )
        server = self.launch.rank_ctx.server
        return GmAddr(server.window(self.group.name, self.group.ranks[int(rankId)], kind))


class _Table:
    """A context's array: ``len()`` entries, iterated as a Python sequence (the entry past the
    end is the domain's HcclUsageError, not the IndexError that ends a ``for`` loop)."""

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))  # type: ignore[index, arg-type]


class WindowTable(_Table):
    """``context.windowsIn`` / ``windowsOut``: indexable like the C++ array."""

    def __init__(self, context: ContextFields, kind: str) -> None:
        self._context, self._kind = context, kind

    def __getitem__(self, i: int) -> GmAddr:
        return self._context._window(i, self._kind)

    def __len__(self) -> int:
        return 1 if self._context._ccu else self._context.group.size


class UserMemResTable:
    """``context.userMemRes[r]``: HCCL fills it only for user memory (``userMemType`` 1)."""

    def __init__(self, context: ContextFields) -> None:
        self._context = context

    def __getitem__(self, r: int) -> Any:
        raise HcclUsageError(
            f"userMemRes[{r!r}]: the context's userMemType is {self._context.userMemType} "
            "(CCL buffer): HCCL fills userMemRes only for user memory (userMemType 1), which "
            "hccl_py does not model; peers' windows are remoteRes[r].nextDevicePtr->windowsIn"
        )

    def __len__(self) -> int:
        return self._context.rankNum


class JettyTable:
    """``context.sqs[r]`` / ``cqs[r]``: the URMA jetty of peer ``r``, which a kernel fills with its
    own WQEs and rings by a doorbell store (the Ascend 950 MoeDistributeDispatchSetup and
    MoeDistributeCombineSetup, ``protocol`` 1 in their cc tiling). hccl_py has no NIC to serve
    them, so a read says so rather than giving a made-up queue."""

    def __init__(self, context: ContextFields, name: str, struct: str) -> None:
        self._context, self._name, self._struct = context, name, struct

    def __getitem__(self, r: int) -> Any:
        raise HcclUsageError(
            f"{self._name}[{r!r}] ({self._struct}): the AIV URMA data plane, in which the kernel "
            "writes WQEs into a peer's send queue and rings its doorbell, is not modelled by "
            "hccl_py (no send or completion queues, no doorbell); the modelled URMA path is the "
            "Hcomm client (docs/hcomm.md)"
        )

    def __len__(self) -> int:
        return self._context.rankNum


@dataclass(frozen=True)
class RankRelationRes:
    """``HcclRankRelationResV2``: one peer's windows, as A3 kernels read them."""

    remoteUsrRankId: int  # noqa: N815 - the C++ field names
    windowsIn: GmAddr  # noqa: N815
    windowsOut: GmAddr  # noqa: N815
    windowsExp: GmAddr  # noqa: N815


@dataclass(frozen=True)
class RemoteRes:
    """``RemoteResPtr``: ``nextDevicePtr`` points at the peer's :class:`RankRelationRes`."""

    nextDevicePtr: RankRelationRes  # noqa: N815


class RemoteResTable(_Table):
    """``context.remoteRes[r]`` for every domain rank ``r`` (A3 ``HcclOpResParam``)."""

    def __init__(self, context: ContextFields) -> None:
        self._context = context

    def __getitem__(self, r: int) -> RemoteRes:
        ctx = self._context
        if c_int(r) is None or not 0 <= r < ctx.rankNum:
            raise HcclUsageError(
                f"remoteRes[{r!r}]: the domain {ctx.group.name} has ranks 0..{ctx.rankNum - 1}"
            )
        server, peer = ctx.launch.rank_ctx.server, ctx.group.ranks[int(r)]
        windows = [GmAddr(server.window(ctx.group.name, peer, k)) for k in ("In", "Out", "Exp")]
        return RemoteRes(RankRelationRes(int(r), *windows))

    def __len__(self) -> int:
        return self._context.rankNum
