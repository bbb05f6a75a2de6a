"""Host-side HCCL tiling: the ``Mc2InitTiling``/``Mc2CcTiling`` structs and their builder.

The structs are ctypes structures with the byte layout of the C++ ones, so that
``bytes(tiling)`` is what a C++ kernel would receive. Both have alignment 1, as
the public C++ types (plain ``uint8_t reserved[N]`` arrays) have: a member of
either type lands right after the previous member, with no padding before it.

:class:`Mc2CcTilingConfig` reproduces the C++ builder. Its setters and
``GetTiling`` return :data:`TILING_SUCCESS` (0) or :data:`TILING_FAILED` (1,
``EXIT_FAILURE`` as in the C++ implementation), never raise for a bad value,
leave the config unchanged when they fail, and record why in ``last_error``.
"""

from __future__ import annotations

import ctypes
import operator
from typing import Protocol, TypeVar

from hccl_py.constants import HcclCMDType, HcclDataType, HcclReduceOp

__all__ = [
    "ALG_CONFIG_SIZE",
    "DEV_TYPE_UNKNOWN",
    "GET_TILING_DATA_WITH_STRUCT",
    "GROUP_NAME_SIZE",
    "INIT_TILING_VERSION",
    "MAX_CC_TILING_NUM",
    "MC2_CC_TILING_SIZE",
    "MC2_CC_TILING_VERSION",
    "MC2_INIT_TILING_SIZE",
    "TILING_FAILED",
    "TILING_SUCCESS",
    "Mc2CcTiling",
    "Mc2CcTilingConfig",
    "Mc2InitTiling",
    "SupportsReadBytes",
    "TilingData",
    "cc_alg_config",
    "cc_group_name",
    "offsetof",
    "read_cc_tiling",
    "tiling_bytes",
]

TILING_SUCCESS = 0
TILING_FAILED = 1

MC2_INIT_TILING_SIZE = 64
MC2_CC_TILING_SIZE = 512
MAX_CC_TILING_NUM = 8
GROUP_NAME_SIZE = 128
ALG_CONFIG_SIZE = 128
INIT_TILING_VERSION = 100
MC2_CC_TILING_VERSION = 1
DEV_TYPE_UNKNOWN = 255

_CC_FIELDS_SIZE = 280
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


class Mc2InitTiling(ctypes.LittleEndianStructure):
    """The 64-byte header of a kernel tiling struct (filled by ``GetTiling``)."""

    _pack_ = 1
    _layout_ = "ms"
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("mc2HcommCnt", ctypes.c_uint32),
        ("offset", ctypes.c_uint32 * MAX_CC_TILING_NUM),
        ("debugMode", ctypes.c_uint8),
        ("preparePosition", ctypes.c_uint8),
        ("queueNum", ctypes.c_uint16),
        ("commBlockNum", ctypes.c_uint16),
        ("devType", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8 * 17),
    ]


class Mc2CcTiling(ctypes.LittleEndianStructure):
    """The 512-byte description of one communication task (filled by ``GetTiling``)."""

    _pack_ = 1
    _layout_ = "ms"
    _fields_ = [
        ("skipLocalRankCopy", ctypes.c_uint8),
        ("skipBufferWindowCopy", ctypes.c_uint8),
        ("stepSize", ctypes.c_uint8),
        ("version", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8 * 9),
        ("commEngine", ctypes.c_uint8),
        ("srcDataType", ctypes.c_uint8),
        ("dstDataType", ctypes.c_uint8),
        ("groupName", ctypes.c_char * GROUP_NAME_SIZE),
        ("algConfig", ctypes.c_char * ALG_CONFIG_SIZE),
        ("opType", ctypes.c_uint32),
        ("reduceType", ctypes.c_uint32),
        ("reserved2", ctypes.c_uint8 * (MC2_CC_TILING_SIZE - _CC_FIELDS_SIZE)),
    ]


class TilingData(ctypes.LittleEndianStructure):
    """Base class of a kernel's tiling struct; subclasses list their members in ``_fields_``.

    Members follow C layout rules (natural alignment), so ``bytes(instance)`` is
    the struct a C++ kernel would receive.
    """


if ctypes.sizeof(Mc2InitTiling) != MC2_INIT_TILING_SIZE:
    raise ImportError(f"sizeof(Mc2InitTiling) is {ctypes.sizeof(Mc2InitTiling)}, expected 64")
if ctypes.sizeof(Mc2CcTiling) != MC2_CC_TILING_SIZE:
    raise ImportError(f"sizeof(Mc2CcTiling) is {ctypes.sizeof(Mc2CcTiling)}, expected 512")
if (Mc2CcTiling.opType.offset, Mc2CcTiling.reduceType.offset) != (272, 276):
    raise ImportError("Mc2CcTiling.opType/reduceType are not at byte offsets 272/276")


class SupportsReadBytes(Protocol):
    """Anything that yields raw bytes on demand, such as a global-memory address."""

    def read_bytes(self, nbytes: int) -> bytes:
        """Return ``nbytes`` bytes starting at this object's position."""
        ...


TilingSource = ctypes.Structure | bytes | bytearray | memoryview | SupportsReadBytes
_S = TypeVar("_S", bound=ctypes.Structure)


class _UnknownMemberError(AttributeError, ValueError):
    """A struct has no member of the requested name."""


def _member_type(struct_type: type, name: str) -> type | None:
    """The ctypes type of member ``name`` of ``struct_type`` (base classes included)."""
    for klass in struct_type.__mro__:
        for field in klass.__dict__.get("_fields_", ()):
            if field[0] == name:
                return field[1]
    return None


def offsetof(struct_type: type[ctypes.Structure] | ctypes.Structure, member: str) -> int:
    """Byte offset of ``member`` from the start of ``struct_type`` (a class or an instance).

    ``member`` may name a nested member with dots (``"allGatherCcTiling.opType"``).
    Raises an error that is both an ``AttributeError`` and a ``ValueError`` when a
    member is unknown, and ``TypeError`` when ``struct_type`` is not a ctypes struct.
    """
    cls = struct_type if isinstance(struct_type, type) else type(struct_type)
    if not issubclass(cls, (ctypes.Structure, ctypes.Union)):
        raise TypeError(f"offsetof() needs a ctypes Structure type or instance, got {cls!r}")
    if not isinstance(member, str) or not member:
        raise TypeError(f"offsetof() needs a member name string, got {member!r}")
    total = 0
    current: type = cls
    for part in member.split("."):
        field_type = (
            _member_type(current, part)
            if isinstance(current, type) and issubclass(current, (ctypes.Structure, ctypes.Union))
            else None
        )
        if field_type is None:
            known = [
                f[0] for k in reversed(current.__mro__) for f in k.__dict__.get("_fields_", ())
            ]
            raise _UnknownMemberError(
                f"{cls.__name__} has no member {member!r} "
                f"({current.__name__} members: {', '.join(known) or 'none'})"
            )
        total += getattr(current, part).offset
        current = field_type
    return total


def tiling_bytes(obj: TilingSource, nbytes: int | None = None) -> bytes:
    """The raw bytes of ``obj``: a ctypes instance, a bytes-like object, or a ``read_bytes`` source.

    With ``nbytes`` the result is the first ``nbytes`` bytes, and a source that
    holds fewer raises ``ValueError``. ``nbytes`` is required for an object that
    is only known by its ``read_bytes`` method (its length is unknown).
    """
    if nbytes is not None:
        nbytes = operator.index(nbytes)
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    reader = getattr(obj, "read_bytes", None)
    if callable(reader):
        if nbytes is None:
            raise ValueError(
                f"tiling_bytes() needs nbytes for {type(obj).__name__}, whose size is not known"
            )
        data = bytes(reader(nbytes))
    elif isinstance(obj, ctypes.Structure | ctypes.Union | ctypes.Array):
        data = bytes(obj)
    else:
        try:
            view = memoryview(obj)
        except TypeError:
            raise TypeError(
                "a tiling source must be a ctypes struct, a bytes-like object or have "
                f"read_bytes(nbytes); got {type(obj).__name__}"
            ) from None
        with view:
            data = view.tobytes()
    if nbytes is None:
        return data
    if len(data) < nbytes:
        raise ValueError(
            f"the tiling source {type(obj).__name__} holds {len(data)} bytes, {nbytes} are needed"
        )
    return data[:nbytes]


def GET_TILING_DATA_WITH_STRUCT(struct_type: type[_S], tiling: TilingSource) -> _S:
    """A new ``struct_type`` instance holding a copy of the first ``sizeof(struct_type)`` bytes."""
    if not (isinstance(struct_type, type) and issubclass(struct_type, ctypes.Structure)):
        raise TypeError(f"struct_type must be a ctypes Structure subclass, got {struct_type!r}")
    size = ctypes.sizeof(struct_type)
    try:
        data = tiling_bytes(tiling, size)
    except ValueError as exc:
        raise ValueError(f"GET_TILING_DATA_WITH_STRUCT({struct_type.__name__}): {exc}") from None
    return struct_type.from_buffer_copy(data)


def read_cc_tiling(tiling_bytes: bytes, offset: int) -> Mc2CcTiling:
    """Parse the ``Mc2CcTiling`` at byte ``offset`` of a whole tiling struct's bytes."""
    offset = operator.index(offset)
    if offset < MC2_INIT_TILING_SIZE:
        raise ValueError(
            f"cc tiling offset {offset} lies inside the Mc2InitTiling header "
            f"(must be >= {MC2_INIT_TILING_SIZE})"
        )
    if offset + MC2_CC_TILING_SIZE > len(tiling_bytes):
        raise ValueError(
            f"cc tiling offset {offset} + {MC2_CC_TILING_SIZE} bytes runs past the end of the "
            f"{len(tiling_bytes)}-byte tiling"
        )
    return Mc2CcTiling.from_buffer_copy(tiling_bytes, offset)


def _decode(raw: bytes) -> str:
    """Decode a NUL-terminated (or full-length) C char array."""
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def cc_group_name(cc: Mc2CcTiling) -> str:
    """The group name stored in a cc tiling."""
    return _decode(bytes(cc.groupName))


def cc_alg_config(cc: Mc2CcTiling) -> str:
    """The algorithm configuration string stored in a cc tiling."""
    return _decode(bytes(cc.algConfig))


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


def _write_char_array(cc: Mc2CcTiling, field: str, data: bytes) -> None:
    """Store ``data`` in a char array member, NUL-padding the rest of the array.

    (Assigning bytes to a ctypes char array member stops at the first NUL and
    leaves the old tail in place, hence the raw copy.)
    """
    member = getattr(Mc2CcTiling, field)
    ctypes.memmove(
        ctypes.addressof(cc) + member.offset, data.ljust(member.size, b"\0"), member.size
    )


class Mc2CcTilingConfig:
    """Host-side builder of HCCL tilings (``AscendC::Mc2CcTilingConfig``).

    The constructor only stores its arguments; ``GetTiling`` validates them.
    ``devType`` (keyword only) is what ``GetTiling(Mc2InitTiling)`` writes as the
    SoC type; it defaults to 255, the C++ value for an unrecognised SoC.
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
        devType: int = DEV_TYPE_UNKNOWN,
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
        raw = _as_name(value)
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

    def SetOpType(self, opType: int) -> int:
        """Set the op type (an ``HcclCMDType``, 0 < opType < HCCL_CMD_ALL)."""
        number = self._op_type("SetOpType: opType", opType)
        if number is None:
            return TILING_FAILED
        self._opType = number
        return self._ok()

    def SetGroupName(self, groupName: str) -> int:
        """Set the communication domain name (at most 128 UTF-8 bytes)."""
        raw = self._name_bytes("SetGroupName: groupName", groupName, GROUP_NAME_SIZE)
        if raw is None:
            return TILING_FAILED
        self._groupName = groupName
        return self._ok()

    def SetAlgConfig(self, algConfig: str) -> int:
        """Set the algorithm string, e.g. ``"AllGather=level0:doublering"`` (at most 128 bytes)."""
        raw = self._name_bytes("SetAlgConfig: algConfig", algConfig, ALG_CONFIG_SIZE)
        if raw is None:
            return TILING_FAILED
        self._algConfig = algConfig
        return self._ok()

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

    def SetStepSize(self, stepSize: int) -> int:
        """Set the fine-grained step size of pairwise algorithms (uint8; used on A3)."""
        number = self._int_in_range("SetStepSize: stepSize", stepSize, 0, _UINT8_MAX)
        if number is None:
            return TILING_FAILED
        self._stepSize = number
        return self._ok()

    def SetSkipLocalRankCopy(self, skipLocalRankCopy: int) -> int:
        """Set whether the local rank's own block is left out of recvBuf (0 or 1)."""
        number = self._int_in_range("SetSkipLocalRankCopy: value", skipLocalRankCopy, 0, 1)
        if number is None:
            return TILING_FAILED
        self._skipLocalRankCopy = number
        return self._ok()

    def SetSkipBufferWindowCopy(self, skipBufferWindowCopy: int) -> int:
        """Set where the algorithm reads its input (0 or 1: not in the window; 2: in it)."""
        number = self._int_in_range("SetSkipBufferWindowCopy: value", skipBufferWindowCopy, 0, 2)
        if number is None:
            return TILING_FAILED
        self._skipBufferWindowCopy = number
        return self._ok()

    def SetDebugMode(self, debugMode: int) -> int:
        """Set the debug mode (1..4 or 250..255)."""
        number = self._int_in_range("SetDebugMode: debugMode", debugMode, 0, _UINT8_MAX)
        if number is None:
            return TILING_FAILED
        if not (1 <= number <= 4 or number >= 250):
            return self._fail(f"SetDebugMode: debugMode {number} must be in [1, 4] or [250, 255]")
        self._debugMode = number
        return self._ok()

    def SetQueueNum(self, num: int) -> int:
        """Set the number of BatchWrite queues (uint16)."""
        number = self._int_in_range("SetQueueNum: num", num, 0, _UINT16_MAX)
        if number is None:
            return TILING_FAILED
        self._queueNum = number
        return self._ok()

    def SetCommBlockNum(self, num: int) -> int:
        """Set the number of communication blocks (uint16)."""
        number = self._int_in_range("SetCommBlockNum: num", num, 0, _UINT16_MAX)
        if number is None:
            return TILING_FAILED
        self._commBlockNum = number
        return self._ok()

    def SetCommEngine(self, commEngine: int) -> int:
        """Set the communication engine (uint8)."""
        number = self._int_in_range("SetCommEngine: commEngine", commEngine, 0, _UINT8_MAX)
        if number is None:
            return TILING_FAILED
        self._commEngine = number
        return self._ok()

    def GetTiling(self, tiling: Mc2InitTiling | Mc2CcTiling) -> int:
        """Fill an ``Mc2InitTiling`` or an ``Mc2CcTiling`` in place; return 0 or 1."""
        if isinstance(tiling, Mc2InitTiling):
            return self._get_init_tiling(tiling)
        if isinstance(tiling, Mc2CcTiling):
            return self._get_cc_tiling(tiling)
        return self._fail(
            f"GetTiling needs an Mc2InitTiling or an Mc2CcTiling, got {type(tiling).__name__}"
        )

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
        dev_type = self._int_in_range(f"{what}: devType", self._devType, 0, _UINT8_MAX)
        if dev_type is None:
            return TILING_FAILED
        self._initTiling = init
        init.version = INIT_TILING_VERSION
        init.mc2HcommCnt = 0
        for i in range(MAX_CC_TILING_NUM):
            init.offset[i] = 0
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
        count = init.mc2HcommCnt
        if count >= MAX_CC_TILING_NUM:
            return self._fail(
                f"{what}: the Mc2InitTiling already registers {count} cc tilings, "
                f"at most {MAX_CC_TILING_NUM} are allowed"
            )
        distance = ctypes.addressof(cc) - ctypes.addressof(init)
        if not 0 <= distance <= _UINT32_MAX:
            return self._fail(
                f"{what}: this Mc2CcTiling is {distance} bytes from the Mc2InitTiling; it must "
                "follow it in the same tiling struct"
            )
        cc.skipLocalRankCopy = self._skipLocalRankCopy
        cc.skipBufferWindowCopy = self._skipBufferWindowCopy
        cc.stepSize = self._stepSize
        cc.version = MC2_CC_TILING_VERSION
        for i in range(len(cc.reserved)):
            cc.reserved[i] = 0
        cc.commEngine = engine
        cc.srcDataType = src
        cc.dstDataType = dst
        _write_char_array(cc, "groupName", group)
        _write_char_array(cc, "algConfig", alg)
        cc.opType = op_type
        cc.reduceType = reduce_type
        init.offset[count] = distance
        init.mc2HcommCnt = count + 1
        return self._ok()
