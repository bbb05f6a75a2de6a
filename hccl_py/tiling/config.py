"""``Mc2CcTilingConfig``: the host-side builder of HCCL tilings (``AscendC::Mc2CcTilingConfig``).

Its setters and ``GetTiling`` return :data:`TILING_SUCCESS` (0) or
:data:`TILING_FAILED` (1, ``EXIT_FAILURE`` as in the C++ implementation), never
raise for a bad value, leave the config unchanged when they fail, and record
why in ``last_error``. Every integer setter goes through one range-checked
helper (:meth:`Mc2CcTilingConfig._set`).
"""

from __future__ import annotations

import ctypes
import functools
import operator
from collections.abc import Callable

from ..core import report
from ..core.constants import HcclCMDType, HcclDataType, HcclReduceOp
from ..core.current import current_rank as current_rank_context
from ..core.errors import HcclUsageError
from ..core.platform import Platform
from ..ops import OPS
from .structs import (
    ALG_CONFIG_SIZE,
    GROUP_NAME_SIZE,
    INIT_TILING_VERSION,
    MAX_CC_TILING_NUM,
    MC2_CC_TILING_VERSION,
    Mc2CcTiling,
    Mc2InitTiling,
)

TILING_SUCCESS = 0
TILING_FAILED = 1
DEV_TYPE_UNKNOWN = 255

_REDUCE_OP_TYPES = frozenset(
    {
        HcclCMDType.HCCL_CMD_ALLREDUCE,
        HcclCMDType.HCCL_CMD_REDUCE,
        HcclCMDType.HCCL_CMD_REDUCE_SCATTER,
    }
)
_UINT8_MAX = 0xFF
_UINT16_MAX = 0xFFFF
_UINT32_MAX = 0xFFFFFFFF


def _as_int(value: object) -> int | None:
    """``value`` as an int (enum members included), or None when it is not integral."""
    try:
        return operator.index(value)
    except TypeError:
        return None


def _as_name(value: object) -> bytes | None:
    """A str (UTF-8 encoded) or bytes name as bytes, or None for other types."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    return None


def _write_char_array(cc: Mc2CcTiling, field: str, data: bytes, size: int | None = None) -> None:
    """Store ``data`` in a char array member, NUL-padding the rest (or its first ``size`` bytes).

    (Assigning bytes to a ctypes char array member stops at the first NUL and
    leaves the old tail in place, hence the raw copy.)
    """
    member = getattr(Mc2CcTiling, field)
    size = member.size if size is None else size
    ctypes.memmove(ctypes.addressof(cc) + member.offset, data.ljust(size, b"\0"), size)


def _host_call(method: Callable[..., int]) -> Callable[..., int]:
    """A public builder call: in a strict hp.run, a failure raises here, at the host call.

    Outside hp.run, or with ``strict=False``, it returns 1 as the C++ builder
    does, so that a bad tiling does not surface later as an "unknown opType 0"
    inside the kernel.
    """

    @functools.wraps(method)
    def call(self: Mc2CcTilingConfig, *args: object, **kwargs: object) -> int:
        result = method(self, *args, **kwargs)
        ctx = current_rank_context(required=False)
        if result == TILING_FAILED and ctx is not None and ctx.config.strict:
            raise HcclUsageError(
                f"Mc2CcTilingConfig.{method.__name__} failed: {self.last_error}", rank=ctx.rank
            )
        return result

    return call


def check_alg_config(alg: str, op_type: int) -> str | None:
    """Why ``alg`` is not an algConfig string this op's tiling uses, or None.

    The form is ``Op=level0:algorithm[;level1:algorithm]`` with ``Op`` the op's
    own name (AlltoAll for AlltoAllV); the empty string is accepted (A2 ignores
    the field).
    """
    spec = OPS.get(op_type)
    if not alg or spec is None:
        return None
    want = spec.alg_config.split("=", 1)[0]
    name, sep, levels = alg.partition("=")
    parts = [level.partition(":") for level in levels.split(";")] if sep else []
    well_formed = parts and all(
        key in ("level0", "level1") and colon and value.isalpha() for key, colon, value in parts
    )
    if not well_formed:
        return (
            f"algConfig {alg!r} is not of the form {want}=level0:<algorithm>[;level1:<algorithm>]"
        )
    if name != want:
        return f"algConfig {alg!r} names {name}, but the tiling's op is {spec.name} (expected {want}=...)"
    return None


def _platform() -> Platform | None:
    """The platform of the calling rank's run (None outside a run)."""
    ctx = current_rank_context(required=False)
    return None if ctx is None else ctx.config.platform


def _alg_config_reserved() -> bool:
    """Whether algConfig is a reserved field with no effect (SetAlgConfig: on A2 and 950)."""
    return (platform := _platform()) is not None and not platform.uses_alg_config


class Mc2CcTilingConfig:
    """Host-side builder of HCCL tilings (``AscendC::Mc2CcTilingConfig``).

    The constructor only stores its arguments; ``GetTiling`` validates them.
    ``devType`` (keyword only) is the SoC type ``GetTiling(Mc2InitTiling)`` writes;
    by default SetDevType's for the run's platform (1 on Atlas A2, else 255).
    Every setter and ``GetTiling`` returns 0 on success and 1 on failure, leaves
    the config unchanged on failure, and sets ``last_error`` to the reason
    (``None`` after a call that succeeded).
    """

    def __init__(
        self,
        groupName: str,
        opType: int,
        algConfig: str,
        reduceType: int = 0,
        dstDataType: int = 0,
        srcDataType: int = 0,
        commEngine: int = 0,
        *,
        devType: int | None = None,
    ) -> None:
        self._groupName: object = groupName
        self._opType: object = opType
        self._algConfig: object = algConfig
        self._reduceType: object = reduceType
        self._dstDataType: object = dstDataType
        self._srcDataType: object = srcDataType
        self._commEngine: object = commEngine
        self._devType: object = devType
        self._stepSize = 0
        self._skipLocalRankCopy = 0
        self._skipBufferWindowCopy = 0
        self._debugMode = 0
        self._queueNum = 0
        self._commBlockNum = 0
        self._initTiling: Mc2InitTiling | None = None
        self.last_error: str | None = None

    def _fail(self, reason: str) -> int:
        self.last_error = reason
        return TILING_FAILED

    def _ok(self) -> int:
        self.last_error = None
        return TILING_SUCCESS

    def _int_in_range(self, what: str, value: object, low: int, high: int) -> int | None:
        """``value`` as an int if ``low <= value <= high``; else record why and return None."""
        number = _as_int(value)
        if number is None:
            self.last_error = f"{what} must be an integer, got {value!r}"
            return None
        if not low <= number <= high:
            self.last_error = f"{what} {number} is out of range [{low}, {high}]"
            return None
        return number

    def _name_bytes(self, what: str, value: object, limit: int) -> bytes | None:
        """``value`` encoded if it fits in ``limit`` bytes; else record why and return None."""
        try:
            raw = _as_name(value)
        except UnicodeEncodeError as exc:  # a lone surrogate, from a byte name decoded badly
            self.last_error = (
                f"{what} {value!r} is not UTF-8 encodable ({exc.reason} at {exc.start})"
            )
            return None
        if raw is None:
            self.last_error = f"{what} must be a str, got {type(value).__name__}"
            return None
        if len(raw) > limit:
            self.last_error = f"{what} is {len(raw)} bytes long, at most {limit} are allowed"
            return None
        return raw

    def _op_type(self, what: str, value: object) -> int | None:
        limit = int(HcclCMDType.HCCL_CMD_ALL)
        number = _as_int(value)
        if number is None or not 0 < number < limit:
            self.last_error = f"{what} {value!r} must satisfy 0 < opType < {limit} (HCCL_CMD_ALL)"
            return None
        return number

    def _reduce_type(self, what: str, value: object) -> int | None:
        limit = int(HcclReduceOp.HCCL_REDUCE_RESERVED)
        return self._int_in_range(what, value, 0, limit - 1)

    def _data_type(self, what: str, value: object) -> int | None:
        limit = int(HcclDataType.HCCL_DATA_TYPE_RESERVED)
        return self._int_in_range(what, value, 0, limit - 1)

    @_host_call
    def SetOpType(self, opType: int) -> int:
        """Set the op type (an ``HcclCMDType``, 0 < opType < HCCL_CMD_ALL)."""
        number = self._op_type("SetOpType: opType", opType)
        if number is None:
            return TILING_FAILED
        self._opType = number
        return self._ok()

    def _set_name(self, attr: str, what: str, value: object, limit: int) -> int:
        """The one name setter: store ``value`` in ``attr`` if it encodes to at most ``limit`` bytes."""
        if self._name_bytes(what, value, limit) is None:
            return TILING_FAILED
        setattr(self, attr, value)
        return self._ok()

    @_host_call
    def SetGroupName(self, groupName: str) -> int:
        """Set the communication domain name (at most 128 UTF-8 bytes; GetTiling copies 127).

        As in C++, 128 bytes pass here, but GetTiling(Mc2CcTiling) then fails: its
        strcpy_s into the 128-byte array needs room for the terminating NUL.
        """
        what = "SetGroupName: groupName"
        return self._set_name("_groupName", what, groupName, GROUP_NAME_SIZE)

    @_host_call
    def SetAlgConfig(self, algConfig: str) -> int:
        """Set the algorithm string, e.g. ``"AllGather=level0:doublering"`` (at most 128 bytes).

        As for SetGroupName, GetTiling(Mc2CcTiling) fails for exactly 128 bytes (strcpy_s).
        """
        what = "SetAlgConfig: algConfig"
        return self._set_name("_algConfig", what, algConfig, ALG_CONFIG_SIZE)

    @_host_call
    def SetReduceType(self, reduceType: int, dstDataType: int = 0, srcDataType: int = 0) -> int:
        """Set the reduce op (< HCCL_REDUCE_RESERVED) and the output/input data types.

        As in C++, omitted data types are set to 0; all three change or none does.
        """
        reduce_type = self._reduce_type("SetReduceType: reduceType", reduceType)
        if reduce_type is None:
            return TILING_FAILED
        dst = self._data_type("SetReduceType: dstDataType", dstDataType)
        if dst is None:
            return TILING_FAILED
        src = self._data_type("SetReduceType: srcDataType", srcDataType)
        if src is None:
            return TILING_FAILED
        self._reduceType, self._dstDataType, self._srcDataType = reduce_type, dst, src
        return self._ok()

    def _set(self, attr: str, what: str, value: object, low: int, high: int) -> int:
        """The one integer setter: store ``value`` in ``attr`` if ``low <= value <= high``."""
        number = self._int_in_range(what, value, low, high)
        if number is None:
            return TILING_FAILED
        setattr(self, attr, number)
        return self._ok()

    @_host_call
    def SetStepSize(self, stepSize: int) -> int:
        """Set the fine-grained step size of pairwise algorithms (uint8; used on A3).

        hccl_tiling.cpp stores it only on the A2/A3 arch (DAV_2201) and returns 1 elsewhere:
        on Ascend 950 the call fails and the tiling keeps its step size.
        """
        if (platform := _platform()) is not None and platform.short == "950":
            return self._fail(
                "SetStepSize: only on Atlas A2/A3 (DAV_2201); on Ascend 950 it returns 1 and "
                "leaves the tiling's stepSize as it was"
            )
        return self._set("_stepSize", "SetStepSize: stepSize", stepSize, 0, _UINT8_MAX)

    @_host_call
    def SetSkipLocalRankCopy(self, skipLocalRankCopy: int) -> int:
        """Set whether the own block is left out of recvBuf (0 or 1; A2 AllGather/AlltoAll)."""
        what = "SetSkipLocalRankCopy: value"
        return self._set("_skipLocalRankCopy", what, skipLocalRankCopy, 0, 1)

    @_host_call
    def SetSkipBufferWindowCopy(self, skipBufferWindowCopy: int) -> int:
        """Set where the algorithm reads its input (0 or 1: not in the window; 2: in it)."""
        what = "SetSkipBufferWindowCopy: value"
        return self._set("_skipBufferWindowCopy", what, skipBufferWindowCopy, 0, 2)

    @_host_call
    def SetDebugMode(self, debugMode: int) -> int:
        """Set the debug mode (1..4 or 250..255)."""
        number = _as_int(debugMode)
        if number is not None and 0 <= number < 250 and not 1 <= number <= 4:
            return self._fail(f"SetDebugMode: debugMode {number} must be in [1, 4] or [250, 255]")
        return self._set("_debugMode", "SetDebugMode: debugMode", debugMode, 0, _UINT8_MAX)

    @_host_call
    def SetQueueNum(self, num: int) -> int:
        """Set the number of BatchWrite queues (uint16)."""
        return self._set("_queueNum", "SetQueueNum: num", num, 0, _UINT16_MAX)

    @_host_call
    def SetCommBlockNum(self, num: int) -> int:
        """Set the number of communication blocks (uint16)."""
        return self._set("_commBlockNum", "SetCommBlockNum: num", num, 0, _UINT16_MAX)

    @_host_call
    def SetCommEngine(self, commEngine: int) -> int:
        """Set the communication engine (uint8)."""
        return self._set("_commEngine", "SetCommEngine: commEngine", commEngine, 0, _UINT8_MAX)

    @_host_call
    def GetTiling(self, tiling: Mc2InitTiling | Mc2CcTiling) -> int:
        """Fill an ``Mc2InitTiling`` or an ``Mc2CcTiling`` in place; return 0 or 1."""
        if isinstance(tiling, Mc2InitTiling):
            return self._get_init_tiling(tiling)
        if isinstance(tiling, Mc2CcTiling):
            return self._get_cc_tiling(tiling)
        got = f"the class {tiling.__name__}" if isinstance(tiling, type) else type(tiling).__name__
        return self._fail(f"GetTiling needs an Mc2InitTiling or Mc2CcTiling instance, got {got}")

    def _get_init_tiling(self, init: Mc2InitTiling) -> int:
        what = "GetTiling(Mc2InitTiling)"
        op_type = _as_int(self._opType)
        if op_type in _REDUCE_OP_TYPES:
            limit = int(HcclReduceOp.HCCL_REDUCE_RESERVED)
            reduce_type = _as_int(self._reduceType)
            if reduce_type is None or not 0 <= reduce_type < limit:
                return self._fail(
                    f"{what}: opType {op_type} is a reduce op, so reduceType "
                    f"{self._reduceType!r} must be less than {limit} (HCCL_REDUCE_RESERVED)"
                )
        soc = DEV_TYPE_UNKNOWN if (platform := _platform()) is None else platform.dev_type
        given = soc if self._devType is None else self._devType  # SetDevType reads the SoC's
        dev_type = self._int_in_range(f"{what}: devType", given, 0, _UINT8_MAX)
        if dev_type is None:
            return TILING_FAILED
        self._initTiling = init
        init.version = INIT_TILING_VERSION
        init.mc2HcommCnt = 0
        init.offset[:] = [0] * MAX_CC_TILING_NUM
        init.debugMode = self._debugMode
        init.preparePosition = 0
        init.queueNum = self._queueNum
        init.commBlockNum = self._commBlockNum
        init.devType = dev_type
        return self._ok()

    def _get_cc_tiling(self, cc: Mc2CcTiling) -> int:
        what = "GetTiling(Mc2CcTiling)"
        init = self._initTiling
        if init is None:
            return self._fail(f"{what}: GetTiling(Mc2InitTiling) must be called first")
        group = self._name_bytes(f"{what}: groupName", self._groupName, GROUP_NAME_SIZE)
        if group is None:
            return TILING_FAILED
        alg = self._name_bytes(f"{what}: algConfig", self._algConfig, ALG_CONFIG_SIZE)
        if alg is None:
            return TILING_FAILED
        op_type = self._op_type(f"{what}: opType", self._opType)
        if op_type is None:
            return TILING_FAILED
        reduce_type = self._reduce_type(f"{what}: reduceType", self._reduceType)
        if reduce_type is None:
            return TILING_FAILED
        dst = self._data_type(f"{what}: dstDataType", self._dstDataType)
        if dst is None:
            return TILING_FAILED
        src = self._data_type(f"{what}: srcDataType", self._srcDataType)
        if src is None:
            return TILING_FAILED
        engine = self._int_in_range(f"{what}: commEngine", self._commEngine, 0, _UINT8_MAX)
        if engine is None:
            return TILING_FAILED
        cc.skipLocalRankCopy = self._skipLocalRankCopy
        cc.skipBufferWindowCopy = self._skipBufferWindowCopy
        cc.stepSize = self._stepSize
        cc.version = MC2_CC_TILING_VERSION
        cc.reserved[:] = bytes(len(cc.reserved))
        # hccl_tiling.cpp, Mc2CcTilingConfig::GetTiling, after the fields above: strcpy_s of
        # each name's c_str() (up to its first NUL); without room for the NUL securec's strcpy_s
        # writes a NUL at the array's start and GetTiling returns 1, what it wrote staying
        for field, raw, size in (
            ("groupName", group, GROUP_NAME_SIZE),
            ("algConfig", alg, ALG_CONFIG_SIZE),
        ):
            c_str = raw.split(b"\0", 1)[0]
            if len(c_str) >= size:
                _write_char_array(cc, field, b"", 1)
                return self._fail(
                    f"{what}: {field} is {len(c_str)} bytes long; it passes the length check "
                    f"(<= {size}), but the C++ GetTiling copies it with strcpy_s into a "
                    f"{size}-byte array, which fails without room for the terminating NUL: "
                    f"at most {size - 1} bytes fit"
                )
            _write_char_array(cc, field, c_str)
        cc.opType = op_type
        cc.reduceType = reduce_type
        cc.srcDataType = src
        cc.dstDataType = dst
        cc.commEngine = engine
        # UpdateMc2InitTiling, after the fields above are written: a ninth cc tiling fails
        # there, and the distance is stored as a uint32, whatever it is
        count = init.mc2HcommCnt
        if count >= MAX_CC_TILING_NUM:
            return self._fail(
                f"{what}: the Mc2InitTiling already registers {count} cc tilings, "
                f"at most {MAX_CC_TILING_NUM} are allowed (this tiling's fields are written, "
                "as the C++ GetTiling writes them before it counts)"
            )
        distance = ctypes.addressof(cc) - ctypes.addressof(init)
        if not 0 <= distance <= _UINT32_MAX:
            report.warn(
                "cc-tiling-offset",
                f"{what}: this Mc2CcTiling is {distance} bytes from the Mc2InitTiling; the C++ "
                f"GetTiling stores that as the uint32 offset {distance & _UINT32_MAX} and "
                "returns 0, an offset that leads nowhere: keep the cc tilings after the init "
                "tiling, in one tiling struct",
            )
        init.offset[count] = distance & _UINT32_MAX
        init.mc2HcommCnt = count + 1
        why = check_alg_config(alg.split(b"\0", 1)[0].decode("utf-8", errors="replace"), op_type)
        if why is not None and not _alg_config_reserved():
            report.warn("alg-config", f"{what}: {why}")
        return self._ok()
