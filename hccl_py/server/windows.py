"""Communication windows: the peer-visible GM buffers of ``GetWindowsInAddr``/``GetWindowsOutAddr``.

Every rank of a domain owns two windows (``In`` and ``Out``) of ``HCCL_BUFFSIZE``
MB each, which any rank's kernel may read and write and the server reads and
writes for BatchWrite. A window is a :class:`WindowAllocation`: an allocation
like any other (bounds-checked views through ``hp.gm_tensor``, usable as a
Prepare buffer) whose memory is mapped only when first touched, from
zero-filled pages that the system commits only when written, so that a world
of 64 ranks costs nothing until its kernels use the windows.

Where the memory comes from is the server's business (a :class:`LocalWindows`
of anonymous memory for ranks that share one process; shared-memory files for
gloo processes on one host); backends without windows raise :class:`HcclNoWindowsError` at the
first window call.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import torch

from ..core.current import RunnerLocal
from ..core.current import current_rank as current_rank_context
from ..core.errors import HcclUsageError
from ..core.gm import ADDR_SHIFT, ADDR_SPAN, WINDOW_TAG, Allocation, _window_resolvers
from ..core.group import WORLD_GROUP_NAME

BUFFSIZE_ENV = "HCCL_BUFFSIZE"
DEFAULT_BUFFSIZE_MB = 200
#: The largest window an integer address can hold (its span, in MB).
MAX_BUFFSIZE_MB = ADDR_SPAN >> 20
#: The windows of a rank, in the order of their integer addresses (Exp: A3's third window).
KINDS = ("In", "Out", "Exp")
_RANK_BITS = 16
_DOMAIN_SHIFT = ADDR_SHIFT + _RANK_BITS
_DOMAIN_BITS = 62 - _DOMAIN_SHIFT

_lock = threading.Lock()
#: Accesses of at most this many bytes are flags for the emulator's race checks and polls
#: through held tensors (emu/flags.py, emu/races.py); viewing any range again is a poll.
POLL_BYTES = 64
#: Reads of at most this many bytes through a window tensor a kernel holds are polls
#: (emu/flags.py): a status area it set up once and reads on every turn of its loop
#: (``DataCopy`` of ``n`` status blocks into UB, a ``ReduceSum`` of them).
HELD_POLL_BYTES = 4096
#: Ranges larger than a flag that a runner keeps in mind: viewing one of them again is a poll
#: (a round-robin poll over the status blocks of the tokens a core waits for).
RECENT_VIEWS = 32
_tls = RunnerLocal()


def window_bytes(buffsize_mb: int, factor: int = 1) -> int:
    """The bytes of one window: ``HCCL_BUFFSIZE`` MB times the platform's ``window_factor``."""
    return (buffsize_mb << 20) * factor


#: The most characters HCCL reads in a numeric environment variable (``MAX_LEN_OF_DIGIT_ENV``).
MAX_DIGITS = 10


def checked_buffsize(value: object, what: str = "buffsize_mb") -> int:
    """A window size in MB: an int in 1..MAX_BUFFSIZE_MB, else ValueError naming ``what``.

    A string is read as HCCL reads ``HCCL_BUFFSIZE`` (hcomm's ``ParseCclBufferSize``: at most
    :data:`MAX_DIGITS` characters, every one a decimal digit, ``IsAllDigit``): no sign, no
    space, no underscore, which Python's ``int`` would take."""
    mb = value
    if isinstance(value, str):
        digits = value.isascii() and value.isdigit() and len(value) <= MAX_DIGITS
        mb = int(value) if digits else None
    if isinstance(mb, bool) or not isinstance(mb, int) or not 1 <= mb <= MAX_BUFFSIZE_MB:
        written = f" written in 1 to {MAX_DIGITS} decimal digits" if isinstance(value, str) else ""
        raise ValueError(
            f"{what} must be a whole number of MB in 1..{MAX_BUFFSIZE_MB}{written}, not {value!r}"
        )
    return mb


def default_buffsize() -> int:
    """``HCCL_BUFFSIZE`` (MB) from the environment, or 200 as in HCCL when it is unset.

    A set but empty value is refused as HCCL refuses it: its ``ParseCclBufferSize`` takes the
    default only for an unset variable (``GET_ENV`` gives "EmptyString" for a null pointer),
    and ``SalStrToULong("")`` fails, so the communicator's init fails (EI0001)."""
    raw = os.environ.get(BUFFSIZE_ENV)
    return DEFAULT_BUFFSIZE_MB if raw is None else checked_buffsize(raw, BUFFSIZE_ENV)


def window_base(tag: int, rank: int, kind: str) -> int:
    """The integer base address of ``rank``'s window ``kind`` in the domain numbered ``tag``
    (:class:`DomainTags`: the same number on every rank)."""
    slot = len(KINDS) * rank + KINDS.index(kind)
    return WINDOW_TAG | (tag << _DOMAIN_SHIFT) | (slot << ADDR_SHIFT)


#: How many domains of one run can have windows: the bits of an address that number them.
MAX_WINDOW_DOMAINS = 1 << _DOMAIN_BITS


class DomainTags:
    """The numbers of a run's domains in their windows' integer addresses, one each.

    The world is 0; every server numbers a domain as it is created (``on_new_group``): as
    ``hp.new_group`` is called on every rank in the same order (the emulator's ranks share
    one numbering), each domain gets the same number on every rank and schedule, and no two
    domains of the run share one (a hash of the name gave two domains in 4096 one address,
    and a copy meant for one window landed in the other).
    """

    def __init__(self) -> None:
        self._tags: dict[str, int] = {WORLD_GROUP_NAME: 0}  # then in the order they are created
        self._lock = threading.Lock()

    def tag(self, domain: str) -> int:
        """``domain``'s number, given now if it has none."""
        with self._lock:
            found = self._tags.get(domain)
            if found is None:
                found = self._tags[domain] = len(self._tags)
        return found

    def for_windows(self, domain: str) -> int:
        """``domain``'s number for a window's address; HcclNoWindowsError beyond the last one."""
        tag = self.tag(domain)
        if tag >= MAX_WINDOW_DOMAINS:
            raise HcclNoWindowsError(
                f"domain {domain} is domain number {tag} of this run: windows have addresses "
                f"for the first {MAX_WINDOW_DOMAINS} domains only"
            )
        return tag


def anonymous_memory(nbytes: int) -> tuple[torch.Tensor, object]:
    """``nbytes`` zero bytes that the system commits page by page as they are written."""
    mapping = mmap.mmap(-1, nbytes)
    return torch.frombuffer(mapping, dtype=torch.uint8), mapping


class WindowAllocation(Allocation):
    """One rank's window: an allocation whose memory is mapped on first touch."""

    __slots__ = (
        "_data",
        "_keep",
        "_size",
        "_factory",
        "_base",
        "domain",
        "kind",
        "buffsize_mb",
        "on_map",
        "_factor",
    )

    def __init__(
        self,
        domain: str,
        rank: int,
        kind: str,
        buffsize_mb: int,
        factory: Callable[[int], tuple[torch.Tensor, object]],
        tag: int,
        factor: int = 1,
    ) -> None:
        self.domain, self.rank, self.kind, self.buffsize_mb = domain, rank, kind, buffsize_mb
        self._size = window_bytes(buffsize_mb, factor)
        self._factor = factor
        self._factory = factory
        self._data: torch.Tensor | None = None
        self._keep: object = None
        self._base = window_base(tag, rank, kind)
        self.dtype = None
        self.memory = None
        self.uid = self._base >> ADDR_SHIFT  # the window's own, whichever rank maps it first
        self._host = None
        self.name = f"Windows{kind} of rank {rank}"
        #: Called with the window once its memory is mapped (the emulator's race check).
        self.on_map: Callable[[WindowAllocation], None] | None = None

    @property
    def data(self) -> torch.Tensor:  # type: ignore[override]
        """The window's bytes, mapped now if this is the first touch."""
        if self._data is None:
            with _lock:
                if self._data is None:
                    self._data, self._keep = self._factory(self._size)
                    if self.on_map is not None:
                        self.on_map(self)
        return self._data

    @property
    def touched(self) -> bool:
        """Whether the window's memory was mapped (some rank used it)."""
        return self._data is not None

    @property
    def nbytes(self) -> int:
        """The window's bytes: ``HCCL_BUFFSIZE`` MB, twice that on Ascend 950 (known without
        mapping the memory)."""
        return self._size

    @property
    def note(self) -> str:
        """Names the domain and HCCL_BUFFSIZE in bounds reports."""
        times = "" if self._factor == 1 else f", {self._factor} times that on this platform"
        return (
            f" (HCCL_BUFFSIZE={self.buffsize_mb} MB{times} = {self._size} bytes, domain "
            f"{self.domain}; raise HCCL_BUFFSIZE or hp.run(..., buffsize_mb=) if the kernel needs "
            "more)"
        )

    def int_base(self) -> int:
        """The window's integer base address (the same on every rank and process)."""
        return self._base

    def on_view(self, offset: int, view: torch.Tensor, dtype: torch.dtype) -> None:
        """A second view in a row of the same range is a flag poll: yield and report it.

        Polling loops (``while gm_tensor(flag, ...)[0] != 1``) thus let the other
        ranks' threads run, and a flag that nobody will ever write ends in a
        deadlock report (or a timeout) naming the window, its rank and the offset; where
        the writers may be other processes (gloo), in the timeout only. The range may be
        larger than a flag (:data:`POLL_BYTES`): the A3 MoE combine reads a token's K
        status blocks of 32 bytes in one copy and polls their sum. (Before 2026-11-28 such
        a poll only let the others run: a status nobody wrote hung the run, with no
        deadlock report and no timeout, and under a PCT schedule two such pollers handed
        the baton to each other for ever.) A range larger than a flag is a poll too when the
        runner viewed it among its last :data:`RECENT_VIEWS` ranges: the combine polls the
        tokens of its share round robin, each again after the others (small ranges are
        seen where they are read, emu/flags.py). (Before 2026-11-28 such a loop held the
        baton until the run's timeout, an ``HcclTimeoutError`` on valid code.)
        """
        n = view.numel()
        ctx = current_rank_context(required=False)
        if ctx is None:
            return
        key = (self._base, offset, n)
        last, _tls.last_view = _tls.get("last_view"), key
        if last != key and not (n > POLL_BYTES and _viewed_lately(key)):
            return
        server = ctx.server
        deadlock = getattr(server, "polls_detect_deadlock", False)
        if not deadlock:  # real threads (gloo): let the others run; the emulator schedules itself
            time.sleep(0)
        end = offset + view.numel() * view.element_size()
        value = self.host_bytes(offset, end)
        # where other processes may write the flag, only the timeout ends a vain poll
        why = "no rank writes them" if deadlock else "no rank wrote them"
        ctx.blocker.poll(
            key,
            value,
            lambda: (
                f"rank {ctx.rank} polls bytes [{offset}, {end}) of {self.name} (domain "
                f"{self.domain}), which keep the value {shown_start(value, dtype)}: {why}"
            ),
            deadlock=deadlock,
            read=lambda: self.host_bytes(offset, end),
        )


def seen_lately(recent: OrderedDict, key: object, limit: int) -> bool:
    """Whether ``key`` is among the last ``limit`` keys noted in ``recent`` (oldest first);
    notes ``key`` as the newest."""
    seen = key in recent
    recent[key] = None
    recent.move_to_end(key)
    if len(recent) > limit:
        recent.popitem(last=False)
    return seen


def _viewed_lately(key: tuple[int, int, int]) -> bool:
    """Whether the calling runner viewed the range ``key`` among its last
    :data:`RECENT_VIEWS` ranges larger than a flag; notes this view."""
    recent = _tls.get("recent_views")
    if recent is None:
        recent = _tls.recent_views = OrderedDict()
    return seen_lately(recent, key, RECENT_VIEWS)


def shown_start(raw: bytes, dtype: torch.dtype) -> str:
    """:func:`shown_value` of a polled range, of its first :data:`POLL_BYTES` if larger."""
    if len(raw) <= POLL_BYTES:
        return shown_value(raw, dtype)
    return f"{shown_value(raw[:POLL_BYTES], dtype)} and {len(raw) - POLL_BYTES} more bytes"


def shown_value(raw: bytes, dtype: torch.dtype) -> str:
    """Polled bytes as the kernel reads them, with the bytes in memory order beside.

    ``1 (int32; bytes 01 00 00 00)``: a little-endian int32 1 is not 0x01000000.
    """
    name = str(dtype).removeprefix("torch.")
    size = torch.empty((), dtype=dtype).element_size()
    if not raw or len(raw) % size:
        return f"bytes {raw.hex(' ') or '(none)'}"
    values = torch.frombuffer(bytearray(raw), dtype=dtype).tolist()
    shown = values[0] if len(values) == 1 else values
    return f"{shown} ({name}; bytes {raw.hex(' ')})"


class HcclNoWindowsError(HcclUsageError):
    """The backend cannot give kernels peer-visible windows (reported at the first window call)."""

    always_raise = True


#: Where a window's bytes come from: ``factory(nbytes)`` -> (tensor, what keeps it mapped).
Memory = Callable[[int], tuple[torch.Tensor, object]]


def _anonymous(domain: str, rank: int, kind: str) -> Memory:
    return anonymous_memory


class LocalWindows:
    """The windows a server hands out, by (domain, rank, kind) and by integer base address.

    A server builds one and forwards its window hooks to it. A window is created
    on first request and mapped on first touch, from ``memory(domain, rank,
    kind)`` (anonymous memory of this process by default: ranks that share one
    address space, the emulator's threads); ``on_map(window)`` is called once
    its memory is mapped.
    """

    def __init__(
        self,
        buffsize_mb: int,
        memory: Callable[[str, int, str], Memory] = _anonymous,
        on_map: Callable[[WindowAllocation], None] | None = None,
        factor: int = 1,
    ) -> None:
        self.buffsize_mb, self.factor = buffsize_mb, factor
        self.memory = memory
        self.on_map = on_map
        self._by_key: dict[tuple[str, int, str], WindowAllocation] = {}
        self._by_base: dict[int, WindowAllocation] = {}
        #: The domains' numbers in the windows' addresses.
        self.tags = DomainTags()

    @property
    def nbytes(self) -> int:
        """The bytes of each of these windows (what :class:`WindowAllocation` maps)."""
        return window_bytes(self.buffsize_mb, self.factor)

    def __len__(self) -> int:
        """How many windows were created so far."""
        return len(self._by_key)

    def __bool__(self) -> bool:
        """Whether a window was created (every core's start asks): no count to make."""
        return bool(self._by_key)

    def window(self, domain: str, rank: int, kind: str) -> WindowAllocation:
        """Global rank ``rank``'s window ``kind`` ("In"/"Out"/"Exp") of ``domain``."""
        key = (domain, rank, kind)
        found = self._by_key.get(key)
        if found is None:
            with _lock:
                found = self._by_key.get(key)
                if found is None:
                    found = WindowAllocation(
                        domain,
                        rank,
                        kind,
                        self.buffsize_mb,
                        self.memory(domain, rank, kind),
                        self.tags.for_windows(domain),
                        self.factor,
                    )
                    found.on_map = self.on_map
                    self._by_base[found.int_base()] = found
                    self._by_key[key] = found
        return found

    def window_at(self, base: int) -> WindowAllocation | None:
        """The window whose integer base address is ``base``, if one was created."""
        return self._by_base.get(base)


def _resolve(base: int) -> Allocation | None:
    ctx = current_rank_context(required=False)
    finder = getattr(ctx.server, "window_at", None) if ctx is not None else None
    return finder(base) if finder is not None else None


_window_resolvers.append(_resolve)
