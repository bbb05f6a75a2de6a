"""The ``Mc2InitTiling``/``Mc2CcTiling`` structs, ``offsetof`` and reading tilings back.

The structs are ctypes structures with the byte layout of the C++ ones, so that
``bytes(tiling)`` is what a C++ kernel would receive. Both have alignment 1, as
the public C++ types (plain ``uint8_t reserved[N]`` arrays) have: a member of
either type lands right after the previous member, with no padding before it.

"""

from __future__ import annotations

import ctypes
import operator
from typing import Protocol, TypeVar

from ..core.current import serialized
from ..core.errors import HcclBoundsError
from ..core.gm import GmAddr

MC2_INIT_TILING_SIZE = 64
MC2_CC_TILING_SIZE = 512
MAX_CC_TILING_NUM = 8
GROUP_NAME_SIZE = 128
ALG_CONFIG_SIZE = 128
INIT_TILING_VERSION = 100
MC2_CC_TILING_VERSION = 1

_CC_FIELDS_SIZE = 280


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
    try:
        return _offsets[cls, member]
    except (KeyError, TypeError):  # not asked yet, or an unhashable member (refused below)
        pass
    if not issubclass(cls, (ctypes.Structure, ctypes.Union)):
        raise TypeError(f"offsetof() needs a ctypes Structure type or instance, got {cls!r}")
    if not isinstance(member, str) or not member:
        raise TypeError(f"offsetof() needs a member name string, got {member!r}")
    _offsets[cls, member] = offset = _offset(cls, member)
    return offset


#: ``offsetof`` answers by (struct class, member): a ctypes class's layout is fixed once its
#: ``_fields_`` are set, and kernels ask the same offsets on every core of every launch.
_offsets: dict[tuple[type, str], int] = {}


def _offset(cls: type, member: str) -> int:
    """``offsetof(cls, member)`` computed from the class's fields."""
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


def _reading_on(obj: ctypes._CData, nbytes: int) -> bytes:
    """Up to ``nbytes`` bytes from ``obj`` on, reading past its end into the ctypes object it
    is a member of: a kernel given the address of a tiling's first member
    (``&tiling->mc2InitTiling``) holds the whole tiling, and the client reads the cc
    tilings at offsets from that address."""
    root = obj
    while getattr(root, "_b_base_", None) is not None:
        root = root._b_base_
    start = ctypes.addressof(obj)
    end = ctypes.addressof(root) + ctypes.sizeof(root)
    return ctypes.string_at(start, min(nbytes, end - start))


def tiling_bytes(obj: TilingSource, nbytes: int | None = None) -> bytes:
    """The raw bytes of ``obj``: a ctypes instance, a bytes-like object, or a ``read_bytes`` source.

    With ``nbytes`` the result is the first ``nbytes`` bytes (a ctypes member of a larger
    ctypes object reads on into it, as its address does on the device), and a source that
    holds fewer raises ``ValueError``. ``nbytes`` is required for an object that
    is only known by its ``read_bytes`` method (its length is unknown).
    """
    if nbytes is not None:
        if type(nbytes) is not int:
            nbytes = operator.index(nbytes)
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        if type(obj) is GmAddr:  # a kernel's tiling argument: exactly nbytes, bounds-checked
            return obj.read_bytes(nbytes)
    reader = getattr(obj, "read_bytes", None)
    if reader is not None and callable(reader):  # (None, a struct's: no call)
        if nbytes is None:
            raise ValueError(
                f"tiling_bytes() needs nbytes for {type(obj).__name__}, whose size is not known"
            )
        data = bytes(reader(nbytes))
    elif isinstance(obj, ctypes.Structure | ctypes.Union | ctypes.Array):
        # an object that owns its memory has nothing after it to read on into
        data = bytes(obj) if nbytes is None or obj._b_base_ is None else _reading_on(obj, nbytes)
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


@serialized
def GET_TILING_DATA_WITH_STRUCT(struct_type: type[_S], tiling: TilingSource) -> _S:
    """A new ``struct_type`` instance holding a copy of the first ``sizeof(struct_type)`` bytes."""
    if not (isinstance(struct_type, type) and issubclass(struct_type, ctypes.Structure)):
        raise TypeError(f"struct_type must be a ctypes Structure subclass, got {struct_type!r}")
    size = ctypes.sizeof(struct_type)
    try:
        data = tiling_bytes(tiling, size)
    except ValueError as exc:
        raise ValueError(f"GET_TILING_DATA_WITH_STRUCT({struct_type.__name__}): {exc}") from None
    except HcclBoundsError as exc:  # a GM tensor smaller than the struct
        raise HcclBoundsError(
            f"GET_TILING_DATA_WITH_STRUCT({struct_type.__name__}) reads {size} bytes: {exc.reason}",
            rank=exc.rank,
        ) from None
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


def _starts_with_init_tiling(cls: type) -> bool:
    """Whether the bytes of a ``cls`` start with an ``Mc2InitTiling``: its first member (base
    classes' members come first) is one, or is a struct that starts with one."""
    while isinstance(cls, type) and issubclass(cls, ctypes.Structure):
        if issubclass(cls, Mc2InitTiling):
            return True
        own = (k.__dict__.get("_fields_") for k in reversed(cls.__mro__))
        cls = next((fields[0][1] for fields in own if fields), None)
    return False


def cc_engines(tiling: object) -> dict[str, int]:
    """``groupName -> commEngine`` of the cc tilings a tiling struct registers (a kernel argument).

    Only a ctypes struct that starts with an ``Mc2InitTiling`` (the layout the framework reads the
    communication set-up from: its first member, a base class's, or its first member's) registers
    any; entries whose offset leaves the struct are skipped.
    """
    if not _starts_with_init_tiling(type(tiling)):
        return {}
    raw = bytes(tiling)
    init = Mc2InitTiling.from_buffer_copy(raw)
    engines = {}
    for offset in list(init.offset)[: min(init.mc2HcommCnt, MAX_CC_TILING_NUM)]:
        if MC2_INIT_TILING_SIZE <= offset <= len(raw) - MC2_CC_TILING_SIZE:
            cc = read_cc_tiling(raw, offset)
            engines.setdefault(cc_group_name(cc), cc.commEngine)
    return engines
