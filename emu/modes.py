"""The base of the emulated kernels' torch dispatch modes."""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class KernelMode(TorchDispatchMode):
    """A dispatch mode of the emulated kernels, whose handler runs as a plain call.

    torch wraps a dispatch mode's ``__torch_dispatch__`` in dynamo's ``disable``
    unless the class says not to: the wrapper imports ``torch._dynamo`` at the first
    operation (about 2 CPU-seconds in every emulating process) and sets and resets
    dynamo's frame hook around every operation. The kernels' modes never compile,
    so they opt out.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False
