"""Global-memory (GM) byte addresses over torch tensors.

A kernel receives its tensor arguments as :class:`GmAddr` values. Like a C++
``GM_ADDR`` they support ``addr + nbytes`` and ``addr - nbytes``; unlike a raw
pointer they know which rank's memory and which allocation they point into, so
every access can be bounds-checked.
"""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .buffer_numbers import OUTSIDE, numbers_of
from .config import as_index, c_int
from .constants import DTYPE_INFO, HcclDataType, torch_dtype_of
from .current import current_rank, rank_or_none, serialized
from .errors import HcclBoundsError, HcclUsageError
from .report import plain_repr

#: Integer addresses (``int(addr)``): every allocation owns a span of ``2**ADDR_SHIFT`` bytes
#: starting at its base; ordinary allocations at ``(uid + 1) << ADDR_SHIFT`` in their rank's
#: own address space, windows in the range marked by :data:`WINDOW_TAG` (see
#: :mod:`hccl_py.server.windows`).
ADDR_SHIFT = 34
ADDR_SPAN = 1 << ADDR_SHIFT
WINDOW_TAG = 1 << 62
#: ``resolver(base)`` -> the window allocation with that base (installed by hccl_py.server.windows).
_window_resolvers: list[Callable[[int], Allocation | None]] = []


def strided_offsets(shape: Sequence[int], strides: Sequence[int]) -> np.ndarray:
    """The element offset of every element of a strided view, in row-major order."""
    offsets = np.zeros(1, dtype=np.int64)
    for size, stride in zip(shape, strides, strict=True):
        offsets = (offsets[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
    return offsets


def flat_elements(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's elements as a 1-D view with stride 1, in memory order.

    ``reshape(-1)`` may keep a stride other than 1 where torch calls a tensor contiguous
    whatever the strides of its size-1 or empty dimensions (``x[0:1, 1]`` of a 3x4 ``x``
    has stride ``(4,)``; an empty tensor from numpy, ``(0,)``), and ``.view(torch.uint8)``
    refuses such a view; for a contiguous tensor stride 1 describes the same memory.
    """
    if not tensor.is_contiguous():
        raise ValueError(f"flat_elements needs a contiguous tensor; got strides {tensor.stride()}")
    return tensor.as_strided((tensor.numel(),), (1,))


class Allocation:
    """One GM buffer: the bytes of a contiguous tensor, owned by one rank."""

    __slots__ = (
        "data",
        "rank",
        "name",
        "dtype",
        "uid",
        "numbers",
        "memory",
        "nbytes",
        "_host",
        "__weakref__",
    )

    def __init__(self, tensor: torch.Tensor, rank: int | None, name: str | None = None) -> None:
        if tensor.is_meta:
            raise ValueError(
                f"GM buffers need memory; got a tensor of shape {tuple(tensor.shape)} on the meta "
                "device, which has none (create it on hp.device())"
            )
        if tensor.layout != torch.strided:
            raise ValueError(
                f"GM buffers are dense memory; got a {tensor.layout} tensor of shape "
                f"{tuple(tensor.shape)} (pass .to_dense())"
            )
        try:  # flat_elements refuses a tensor that is not contiguous: said here in GM's words
            flat = flat_elements(tensor)
        except ValueError:
            if tensor.is_contiguous():
                raise
            raise ValueError(
                f"GM buffers must be contiguous tensors; got shape {tuple(tensor.shape)} "
                f"with strides {tensor.stride()} (call .contiguous() first)"
            ) from None
        #: The tensor's dtype (client/convert.py); the allocation keeps no reference to the tensor.
        self.dtype: torch.dtype | None = tensor.dtype
        self.data = flat.view(torch.uint8)
        #: Size of the allocation in bytes (asked by every bounds check and race mark).
        self.nbytes: int = self.data.numel()
        #: (address of the tensor's storage, byte offset of the tensor in it): two
        #: allocations with the same storage address may share bytes.
        self.memory = _memory(self.data)
        self.rank = rank
        ctx = rank_or_none()
        #: Its rank's numbers in this run (the calling rank's; outside a rank, the host's).
        self.numbers = ctx.buffers if ctx is not None and ctx.rank == rank else OUTSIDE
        self.uid = self.numbers.take()
        self.name = name or f"buf{self.uid}"
        self._host: Any = None

    def host_bytes(self, start: int, stop: int) -> bytes:
        """A copy of bytes ``[start, stop)``; through a numpy view for CPU memory (no torch call)."""
        if self._host is None:
            self._host = self.data.numpy() if self.data.device.type == "cpu" else False
        if self._host is False:
            return self.data[start:stop].cpu().numpy().tobytes()
        return self._host[start:stop].tobytes()

    @property
    def note(self) -> str:
        """Extra words for bounds reports (windows name HCCL_BUFFSIZE); empty here."""
        return ""

    def on_view(self, offset: int, view: torch.Tensor, dtype: torch.dtype) -> None:
        """``hp.gm_tensor`` made ``view`` (bytes) at ``offset``, to read as ``dtype`` (polls)."""

    def int_base(self) -> int:
        """The allocation's integer base address (``int(GmAddr(alloc, 0))``)."""
        self.numbers.by_number[self.uid] = self
        return (self.uid + 1) << ADDR_SHIFT

    def __repr__(self) -> str:
        return f"<{self.name}: {self.nbytes} B on rank {self.rank}>"


def _memory(data: torch.Tensor) -> tuple[int, int] | None:
    """Where the bytes of ``data`` (a uint8 view: its offset counts bytes) lie in its storage,
    or None when it has no storage to ask."""
    try:
        return data.untyped_storage().data_ptr(), data.storage_offset()
    except (RuntimeError, NotImplementedError):
        return None


def shift_between(a: Allocation | None, b: Allocation | None) -> int | None:
    """Byte offset that maps positions in ``a`` onto positions in ``b``, if they may share bytes.

    0 for the same allocation; None when the two cannot share bytes (a null address, other
    devices, or other storages whose bytes do not meet: two storages may still be one
    memory, as ``torch.from_numpy`` of overlapping views of one array are).
    """
    if a is None or b is None:
        return None
    if a is b:
        return 0
    if a.memory is None or b.memory is None or not a.memory[0] or not b.memory[0]:
        return None
    a_at, b_at = a.memory[0] + a.memory[1], b.memory[0] + b.memory[1]
    if a.memory[0] != b.memory[0] and (
        a.data.device != b.data.device or not (a_at < b_at + b.nbytes and b_at < a_at + a.nbytes)
    ):
        return None
    return a_at - b_at


class GmAddr:
    """A byte address into one rank's global memory (or the null address)."""

    __slots__ = ("alloc", "offset")

    def __init__(self, alloc: Allocation | None, offset: int = 0) -> None:
        if type(offset) is not int or not (alloc is None or isinstance(alloc, Allocation)):
            offset = _gm_offset(alloc, offset)  # off the hot path: every address sum lands here
        self.alloc = alloc
        self.offset = offset

    @property
    def is_null(self) -> bool:
        """True for the null address (a ``None`` kernel argument)."""
        return self.alloc is None

    @property
    def rank(self) -> int | None:
        """The rank whose memory this address points into."""
        return None if self.alloc is None else self.alloc.rank

    def __add__(self, nbytes: int) -> GmAddr:
        if isinstance(nbytes, GmAddr):
            return NotImplemented
        return GmAddr(self.alloc, self.offset + _byte_count(nbytes))

    __radd__ = __add__

    def __sub__(self, other: int | GmAddr) -> GmAddr | int:
        if isinstance(other, GmAddr):
            if other.alloc is not self.alloc:
                raise ValueError("cannot subtract addresses of different allocations")
            return self.offset - other.offset
        return GmAddr(self.alloc, self.offset - _byte_count(other))

    def __eq__(self, other: object) -> bool:
        if other is None:
            return self.is_null
        if not isinstance(other, GmAddr):
            return NotImplemented
        return self.alloc is other.alloc and self.offset == other.offset

    def __hash__(self) -> int:
        return hash((id(self.alloc), self.offset))

    def __bool__(self) -> bool:
        return self.alloc is not None

    def __repr__(self) -> str:
        if self.alloc is None:
            return "GmAddr(null)"
        return f"GmAddr({self.alloc.name}+{self.offset}, rank {self.alloc.rank})"

    def __int__(self) -> int:
        """The address as a uint64, as a kernel stores it in GM (0 for null)."""
        if self.alloc is None:
            return 0
        if not 0 <= self.offset < ADDR_SPAN:
            raise HcclBoundsError(
                f"int(address): offset {self.offset} of {self.alloc.name} has no uint64 form "
                f"(it lies before or far past the allocation's {self.alloc.nbytes} bytes)"
                + self.alloc.note,
                rank=self._accessor(),
            )
        return self.alloc.int_base() + self.offset

    @classmethod
    def from_int(cls, value: int) -> GmAddr:
        """The address whose ``int()`` is ``value`` (0 gives the null address).

        Raises :class:`HcclBoundsError` when ``value`` points into no allocation
        this rank can see, or past the end of the one it points into.
        """
        try:
            value = operator.index(value)
        except TypeError:
            raise HcclBoundsError(
                f"GmAddr.from_int expects an integer address, got {what_is(value)}"
            ) from None
        if value == 0:
            return NULL
        base, offset = value & ~(ADDR_SPAN - 1), value & (ADDR_SPAN - 1)
        alloc, ctx = None, current_rank(required=False)
        if value & WINDOW_TAG:
            for resolve in _window_resolvers:
                alloc = alloc or resolve(base)
        elif 0 < value < WINDOW_TAG:
            alloc = numbers_of(ctx).by_number.get((base >> ADDR_SHIFT) - 1)
        if alloc is None:
            raise HcclBoundsError(
                f"address {value:#x} points into no GM allocation or window this rank knows "
                "(integer addresses come from int(addr) of a live allocation of this rank and run"
                + ("; this call runs outside any rank)" if ctx is None else ")")
            )
        if offset > alloc.nbytes:
            raise HcclBoundsError(
                f"address {value:#x} is byte {offset} of {alloc.name}, past its end at "
                f"{alloc.nbytes} bytes" + alloc.note,
                rank=alloc.rank,
            )
        return cls(alloc, offset)

    def _accessor(self) -> int | None:
        """The rank that uses this address (the calling runner's; else the memory's owner): a
        report names it, and the allocation's name names the owner."""
        ctx = current_rank(required=False)
        if ctx is not None:
            return ctx.rank
        return None if self.alloc is None else self.alloc.rank

    def check_range(self, nbytes: int, what: str = "access") -> None:
        """Raise :class:`HcclBoundsError` unless ``[self, self + nbytes)`` is inside the allocation."""
        if self.alloc is None:
            raise HcclBoundsError(f"{what}: null address", rank=self._accessor())
        size = as_index(nbytes)
        if size is None:
            raise HcclUsageError(
                f"{what}: the size must be an int number of bytes, not {what_is(nbytes)}",
                rank=self._accessor(),
            )
        nbytes = size
        if nbytes < 0:
            raise HcclBoundsError(f"{what}: negative size of {nbytes} bytes", rank=self._accessor())
        if self.offset < 0 or self.offset + nbytes > self.alloc.nbytes:
            raise HcclBoundsError(
                f"{what}: bytes [{self.offset}, {self.offset + nbytes}) of {self.alloc.name} "
                f"fall outside its {self.alloc.nbytes} bytes" + self.alloc.note,
                rank=self._accessor(),
            )

    def bytes_view(self, nbytes: int) -> torch.Tensor:
        """A bounds-checked uint8 view of ``nbytes`` bytes at this address."""
        self.check_range(nbytes, "GM view")
        return self.alloc.data[self.offset : self.offset + nbytes]

    def read_bytes(self, nbytes: int) -> bytes:
        """Copy ``nbytes`` bytes from this address (used to read tilings from GM)."""
        self.check_range(nbytes, "GM view")
        return self.alloc.host_bytes(self.offset, self.offset + nbytes)


NULL = GmAddr(None)


def _byte_count(nbytes: Any) -> int:
    """An integral byte offset (as C++ pointer arithmetic needs; 2.5 bytes is an error)."""
    try:
        return operator.index(nbytes)
    except TypeError:
        raise TypeError(
            f"GM addresses move by whole bytes: expected an int, got {type(nbytes).__name__} "
            f"{nbytes!r}"
        ) from None


def _element_type(dtype: object, rank: int | None) -> tuple[torch.dtype, int]:
    """``gm_tensor``'s element dtype and the bytes of one element of ``dtype``.

    Byte-only HcclDataTypes (HIF8, FP8E8M0, MXFP8, INT128) give uint8 elements,
    ``size`` of them per element of the type.
    """
    if isinstance(dtype, torch.dtype):
        return dtype, dtype.itemsize
    info = None
    value = c_int(dtype)
    if value in HcclDataType._value2member_map_:  # None is no member
        info = DTYPE_INFO.get(HcclDataType(value))
    if info is None:
        raise HcclUsageError(
            "gm_tensor: dtype must be a torch dtype or an HcclDataType with an element size "
            "(RESERVED has none), not "
            + (dtype.name if isinstance(dtype, HcclDataType) else what_is(dtype)),
            rank=rank,
        )
    return info.torch_dtype or torch.uint8, info.size


@serialized
def gm_tensor(addr: GmAddr, dtype: torch.dtype | int, count: int) -> torch.Tensor:
    """A typed, writable torch view of ``count`` elements at ``addr``.

    ``dtype`` is a torch dtype or an :class:`HcclDataType`; byte-only types give
    uint8 bytes, shape ``(count,)`` for 1-byte types and ``(count, size)`` for
    INT128. The address must be aligned to the element size, as on hardware.
    """
    if not isinstance(addr, GmAddr):
        raise HcclUsageError(
            f"gm_tensor: addr must be a GM address (a kernel's tensor argument or an address "
            f"computed from one), not {what_is(addr)}"
        )
    tdtype, size = _element_type(dtype, addr.rank)
    try:
        n = operator.index(count)
    except TypeError:
        raise HcclUsageError(
            f"gm_tensor: count must be an int, not {what_is(count)}", rank=addr.rank
        ) from None
    view = addr.bytes_view(n * size)
    if addr.offset % size:
        raise HcclBoundsError(
            f"gm_tensor: offset {addr.offset} of {addr.alloc.name} is not aligned "
            f"to the {size}-byte element size of {_type_name(dtype)}",
            rank=addr.rank,
        )
    addr.alloc.on_view(addr.offset, view, tdtype)
    if tdtype == torch.uint8 and size > 1:
        return view.view(n, size)
    return view.view(tdtype)


def _type_name(dtype: object) -> str:
    """``torch.float32`` or ``HCCL_DATA_TYPE_INT128``: the type as the caller named it."""
    return str(dtype) if isinstance(dtype, torch.dtype) else HcclDataType(int(dtype)).name


def tiling_allocation(struct: ctypes.Structure, rank: int | None) -> GmAddr:
    """Copy a ctypes tiling structure into a fresh GM allocation and return its address."""
    raw = bytes(struct)
    buf = (
        torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        if raw
        else torch.empty(0, dtype=torch.uint8)
    )
    return GmAddr(Allocation(buf, rank, name=type(struct).__name__))


def to_gm(arg: Any, rank: int | None, name: str | None = None) -> Any:
    """Convert one kernel argument the way a kernel launch passes it.

    Tensors become GM addresses (a rank's tensor passed again unchanged, the address it got
    before: :mod:`~hccl_py.core.buffer_numbers`), ``None`` the null address, a ctypes structure
    (a tiling) the address of a copy of its bytes; anything else is passed as is.
    """
    if isinstance(arg, torch.Tensor):
        ctx = rank_or_none()
        if ctx is not None and ctx.rank == rank:
            return ctx.buffers.address(arg, name, ctx, _new_address)
        return _new_address(arg, rank, name)
    if arg is None:
        return NULL
    if isinstance(arg, ctypes.Structure):
        return tiling_allocation(arg, rank)
    return arg


def _new_address(tensor: torch.Tensor, rank: int | None, name: str | None) -> GmAddr:
    return GmAddr(Allocation(tensor, rank, name))


def _gm_offset(alloc: object, offset: object) -> int:
    """A ``GmAddr``'s offset as an int, after checking both of its arguments (a TypeError
    that says what was wrong)."""
    if alloc is not None and not isinstance(alloc, Allocation):
        raise TypeError(
            f"GmAddr(alloc, offset) takes an allocation, not {what_is(alloc)}; for an "
            "integer address use hp.GmAddr.from_int(value)"
        )
    number = as_index(offset)
    if number is None:
        raise TypeError(f"GmAddr offset must be an int, not {what_is(offset)}")
    return number


def what_is(value: Any) -> str:
    """A short description of a value that is not GM memory, for error messages."""
    shape = None if isinstance(value, type) else getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    kind = f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")
    article = "an" if kind[:1] in "aeiou" else "a"
    try:
        dims = tuple(shape) if shape is not None else None
    except TypeError:  # a shape attribute that is no sequence of sizes
        dims = None
    if dims is not None:
        return f"{article} {kind} of shape {dims} and dtype {dtype}"
    return f"{article} {kind} ({plain_repr(value):.40})"


def as_elements(raw: torch.Tensor, data_type: int) -> torch.Tensor:
    """Reinterpret uint8 bytes (last dim) as elements of ``data_type``, copying only if misaligned."""
    dtype = torch_dtype_of(HcclDataType(data_type))
    try:
        return raw.view(dtype)
    except RuntimeError:
        return raw.clone().view(dtype)
