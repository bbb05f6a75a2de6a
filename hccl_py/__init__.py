"""hccl_py: the AscendC kernel-side HCCL API in Python.

Write the communication part of an MC2 kernel once and run it on N emulated
ranks in one process, on gloo processes, or on Ascend NPUs through HCCL.
Names follow AscendC (``Hccl``, ``InitV2``, ``HCCL_DATA_TYPE_FP16`` ...);
see docs/api.md for the full reference.
"""

from __future__ import annotations

from .launcher.script_checks import check_script_name

check_script_name()
try:
    import torch as _torch  # noqa: F401 - first, so a script that shadows a module is named
except Exception:
    check_script_name()
    raise

from .core.torch_version import check_torch

check_torch()

from . import ops
from .client import Hccl
from .client.channels import (
    HcclChannelAcquire,
    HcclChannelDesc,
    HcclChannelGetHcclBuffer,
    HcclGetHcclBuffer,
)
from .client.hcomm import Hcomm
from .core import constants as _constants
from .core.constants import (
    HCCL_FAILED,
    HCCL_MAX_HANDLE_ID,
    HCCL_SUCCESS,
    HCOMM_FAILED,
    HCOMM_SUCCESS,
    INVALID_HANDLE_ID,
    CommEngine,
    CommProtocol,
    CoreType,
    HcclCMDType,
    HcclDataType,
    HcclReduceOp,
    HcclServerConfig,
    HcclServerType,
    ScopeType,
    dtype_size,
)
from .core.errors import (
    HcclBoundsError,
    HcclCoreError,
    HcclDeadlockError,
    HcclError,
    HcclMismatchError,
    HcclOverlapError,
    HcclPeerError,
    HcclRaceError,
    HcclRunnerStartError,
    HcclSharedMemoryError,
    HcclTimeoutError,
    HcclUnfinishedError,
    HcclUsageError,
    HcclWarning,
    WorldError,
)
from .core.gm import NULL, GmAddr, gm_tensor
from .core.group import Group
from .core.platform import PLATFORMS
from .framework import (
    Work,
    all_gather_into_tensor,
    all_reduce,
    alltoall_single,
    barrier,
    global_gather,
    global_scatter,
    reduce_scatter_tensor,
)
from .kernel.context import device, get_rank, get_world_size, new_group, world_group
from .kernel.cores import (
    AIC,
    AIV,
    GetBlockIdx,
    GetBlockNum,
    GetHcclContext,
    GetSubBlockIdx,
    GetTaskRatio,
    HcclContext,
    SyncAll,
    g_coreType,
    launch,
)
from .kernel.crosscore import CrossCoreSetFlag, CrossCoreWaitFlag, Pipe
from .kernel.outcome import RunResult
from .runtime import explain_layout, print_rank0, run
from .server.windows import HcclNoWindowsError
from .tiling import (
    GET_TILING_DATA_WITH_STRUCT,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

_enum_names = _constants.export_members(
    globals(),
    HcclDataType,
    HcclReduceOp,
    HcclCMDType,
    HcclServerType,
    CoreType,
    Pipe,
    CommProtocol,
    CommEngine,
)

__version__ = "0.1.0"

__all__ = [
    *_enum_names,
    "AIC",
    "AIV",
    "GET_TILING_DATA_WITH_STRUCT",
    "HCCL_FAILED",
    "HCCL_MAX_HANDLE_ID",
    "HCCL_SUCCESS",
    "HCOMM_FAILED",
    "HCOMM_SUCCESS",
    "CommEngine",
    "CommProtocol",
    "Hcomm",
    "HcclChannelAcquire",
    "HcclChannelDesc",
    "HcclChannelGetHcclBuffer",
    "HcclGetHcclBuffer",
    "INVALID_HANDLE_ID",
    "NULL",
    "PLATFORMS",
    "Pipe",
    "RunResult",
    "ScopeType",
    "HcclNoWindowsError",
    "CrossCoreSetFlag",
    "CrossCoreWaitFlag",
    "CoreType",
    "GetBlockIdx",
    "GetBlockNum",
    "GetHcclContext",
    "GetSubBlockIdx",
    "GetTaskRatio",
    "GmAddr",
    "Group",
    "Hccl",
    "HcclBoundsError",
    "HcclCMDType",
    "HcclContext",
    "HcclCoreError",
    "HcclDataType",
    "HcclDeadlockError",
    "HcclRaceError",
    "HcclRunnerStartError",
    "HcclError",
    "HcclMismatchError",
    "HcclOverlapError",
    "HcclSharedMemoryError",
    "HcclPeerError",
    "HcclReduceOp",
    "HcclServerConfig",
    "HcclServerType",
    "HcclTimeoutError",
    "HcclUnfinishedError",
    "HcclUsageError",
    "HcclWarning",
    "Mc2CcTiling",
    "Mc2CcTilingConfig",
    "Mc2InitTiling",
    "SyncAll",
    "TilingData",
    "WorldError",
    "Work",
    "all_gather_into_tensor",
    "all_reduce",
    "alltoall_single",
    "barrier",
    "device",
    "dtype_size",
    "g_coreType",
    "get_rank",
    "get_world_size",
    "global_gather",
    "global_scatter",
    "gm_tensor",
    "launch",
    "new_group",
    "offsetof",
    "ops",
    "print_rank0",
    "reduce_scatter_tensor",
    "run",
    "explain_layout",
    "world_group",
]
