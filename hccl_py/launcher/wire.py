"""Pickling that round-trips every torch dtype, for what travels between processes.

torch pickles a tensor through its typed storage, which does not exist for
float8, uint16/32/64 or complex32 tensors: ``pickle.loads`` of such a tensor
fails. The gloo backend sends ``hp.run``'s arguments to the rank processes and
the ranks' results back, so those tensors travel here as raw bytes with their
dtype and shape instead. Every other object pickles as usual.
"""

from __future__ import annotations

import functools
import io
import pickle
from typing import Any

import torch

from ..core.gm import flat_elements


@functools.cache
def _needs_bytes(dtype: torch.dtype) -> bool:
    """Whether plain pickle fails to round-trip tensors of ``dtype`` in this torch."""
    try:
        return pickle.loads(pickle.dumps(torch.empty(1, dtype=dtype))).dtype != dtype
    except Exception:  # noqa: BLE001 - whatever torch raises, the answer is "use bytes"
        return True


def _rebuild(raw: bytes, dtype_name: str, shape: tuple[int, ...], grad: bool) -> torch.Tensor:
    dtype = getattr(torch, dtype_name)
    data = (
        torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        if raw
        else torch.empty(0, dtype=torch.uint8)
    )
    return data.view(dtype).reshape(shape).requires_grad_(grad)


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and _needs_bytes(obj.dtype):
            flat = flat_elements(obj.detach().cpu().contiguous()).view(torch.uint8)
            name = str(obj.dtype).removeprefix("torch.")
            return _rebuild, (flat.numpy().tobytes(), name, tuple(obj.shape), obj.requires_grad)
        return NotImplemented


def dumps(obj: Any) -> bytes:
    """``pickle.dumps`` that also carries tensors of every torch dtype."""
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return out.getvalue()


loads = pickle.loads
