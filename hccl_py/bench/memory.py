"""This process's memory, as the memory benchmark and tests measure it (Linux, glibc).

- :func:`heap_bytes`: what malloc holds for the program (every arena and mmapped
  block; freed memory that glibc keeps is not counted), exact to a few KiB: a
  leak shows here long before it shows in the resident size;
- :func:`peak_rise`: how far one call raises the resident high-water mark
  (``VmHWM``, reset through ``/proc/self/clear_refs``): its temporaries;
- :func:`fresh_temporaries`: fix glibc's mmap threshold, so that every large
  temporary is fresh pages (none is served from memory an earlier call freed).
"""

from __future__ import annotations

import ctypes
import gc
import os
from collections.abc import Callable

#: glibc's mallopt parameter of the mmap threshold (setting it stops its dynamic growth).
_M_MMAP_THRESHOLD = -3
_MALLINFO2 = (
    *("arena", "ordblks", "smblks", "hblks", "hblkhd"),
    *("usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"),
)


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2``."""

    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None)


def has_heap_bytes() -> bool:
    """Whether :func:`heap_bytes` works here (glibc >= 2.33)."""
    return hasattr(_libc(), "mallinfo2")


def heap_bytes() -> int:
    """Bytes that malloc holds for the program now, after a garbage collection."""
    gc.collect()
    info = _libc().mallinfo2
    info.restype = _MallInfo2
    got = info()
    return got.uordblks + got.hblkhd


def can_reset_peak() -> bool:
    """Whether :func:`peak_rise` works here (Linux ``/proc/self/clear_refs``)."""
    return os.access("/proc/self/clear_refs", os.W_OK)


def status_bytes(field: str) -> int:
    """A size field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), in bytes."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def peak_rise(call: Callable[[], object]) -> int:
    """Bytes by which ``call()`` raised this process's resident high-water mark.

    Garbage is collected first: memory that a collection during ``call`` would
    free (an earlier op's buffers in a reference cycle) would hide its temporaries.
    """
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status_bytes("VmRSS")
    call()
    return status_bytes("VmHWM") - before


def fresh_temporaries(threshold: int = 128 << 10) -> None:
    """Serve every allocation of at least ``threshold`` bytes from fresh mmapped pages."""
    _libc().mallopt(_M_MMAP_THRESHOLD, threshold)
