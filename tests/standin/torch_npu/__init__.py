"""TEST STAND-IN -- THIS IS NOT torch_npu. It runs no NPU code and proves nothing about hardware.

A pure-Python package named ``torch_npu`` that hccl_py's test suite puts on
``PYTHONPATH`` (of the subprocesses it starts, never of the test process) when
the real torch_npu is not installed, so that hccl_py's HCCL code path -- device
binding, backend selection under launchers, the "hccl" process groups, the
torch_npu checks of the MC2 samples -- runs on a CPU-only CI machine. Where the
real torch_npu is installed, the tests leave this directory off the path and
use the real one (see docs/testing-without-npu.md); and should this directory
come first on the path anyway, importing it loads the real torch_npu found
further down instead.

What it implements, and nothing more:

- ``torch_npu.npu``: ``set_device``, ``current_device`` (per thread),
  ``device_count`` (``HCCL_PY_STANDIN_NPUS`` pretend NPUs, default 8),
  ``is_available``, ``synchronize``.
- the "npu" device: torch's PrivateUse1 device renamed "npu"; an NPU tensor
  reports ``npu:<i>`` and keeps its values in a CPU tensor (:mod:`._tensor`).
- the "hccl" process-group backend for NPU tensors, forwarding every
  collective to gloo, and ``group._get_backend(npu).get_hccl_comm_name(rank)``
  (:mod:`._hccl`).
- ``npu_all_gather_base_mm`` and ``npu_mm_reduce_scatter_base`` computed with
  plain torch over that group (:mod:`._mc2`).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _real_torch_npu() -> importlib.machinery.ModuleSpec | None:
    """A torch_npu on ``sys.path`` outside this stand-in's directory, if any."""
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    path = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    return importlib.machinery.PathFinder.find_spec(__name__, path)


_REAL = _real_torch_npu()
if _REAL is not None:
    # The real torch_npu wins even when this directory comes first on the path:
    # ``import torch_npu`` returns what sys.modules holds once this module ran.
    sys.modules[__name__] = importlib.util.module_from_spec(_REAL)
    _REAL.loader.exec_module(sys.modules[__name__])
else:
    from . import _hccl, _tensor, npu
    from ._mc2 import npu_all_gather_base_mm, npu_mm_reduce_scatter_base

    _tensor.register()
    _hccl.register()

    #: Marks this package as the test stand-in (the real torch_npu has no such attribute).
    STANDIN = True
    __version__ = "0.0.0+standin"

__all__ = ["STANDIN", "npu", "npu_all_gather_base_mm", "npu_mm_reduce_scatter_base"]
