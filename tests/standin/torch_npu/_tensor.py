"""TEST STAND-IN (see the package docstring): tensors that say they live on ``npu:<i>``.

torch's PrivateUse1 device is renamed "npu", as torch_npu does. An NPU tensor
is a :class:`NpuTensor`: a wrapper subclass whose device is ``npu:<i>`` and
whose data is a CPU tensor (``host``). Every aten operation on it reaches
``__torch_dispatch__``, which runs the operation on the host tensors and wraps
the results again, so views alias their base as on a device. Operations that
create a tensor on "npu" without an NPU tensor argument (``torch.zeros(...,
device="npu:0")``, ``cpu_tensor.to("npu")``) reach the PrivateUse1 dispatch
key, where one fallback runs them on the CPU and wraps the result.

As on real devices, an operation that mixes NPU tensors with CPU tensors
(other than 0-dim ones and the copies between devices) raises, and so does one
that mixes two NPUs. ``data_ptr()`` and ``untyped_storage()`` report the host
memory, so two views of one buffer share a storage address, as on a device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import npu

#: Operations that move data between devices, or take CPU index tensors (as CUDA's do).
_CROSS_DEVICE = {
    "aten::copy_",
    "aten::_to_copy",
    "aten::_copy_from",
    "aten::_copy_from_and_resize",
    "aten::index",
    "aten::index_put",
    "aten::index_put_",
    "aten::_index_put_impl_",
}


class NpuTensor(torch.Tensor):
    """A tensor on a pretend NPU; its values live in the CPU tensor ``host``."""

    host: torch.Tensor

    __torch_function__ = torch._C._disabled_torch_function_impl

    def data_ptr(self) -> int:
        return self.host.data_ptr()

    def untyped_storage(self) -> torch.UntypedStorage:
        return self.host.untyped_storage()

    def tolist(self) -> Any:
        return self.host.tolist()

    def numpy(self, *, force: bool = False) -> Any:
        if not force:
            raise TypeError(
                f"can't convert {self.device} device type tensor to numpy. "
                "Use Tensor.cpu() to copy the tensor to host memory first."
            )
        return self.host.numpy(force=True)

    def __reduce_ex__(self, protocol: int) -> tuple:
        # as an NPU tensor pickles: unpickling needs torch_npu (here: this stand-in)
        return wrap, (self.host, self.device)

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        body = repr(self.host)
        return f"{body[:-1]}, device='{self.device}')" if body.endswith(")") else body

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        _check_devices(func, args, kwargs)
        target = _result_device(args, kwargs)
        if isinstance(kwargs.get("device"), torch.device) and kwargs["device"].type == "npu":
            kwargs["device"] = torch.device("cpu")
        host_args, host_kwargs = tree_map(_host, (args, kwargs))
        out = func(*host_args, **host_kwargs)
        return _rewrap(out, (args, kwargs), (host_args, host_kwargs), target)


def wrap(host: torch.Tensor, device: torch.device) -> NpuTensor:
    """An NPU tensor on ``device`` whose values are ``host`` (no copy)."""
    out = torch.Tensor._make_wrapper_subclass(
        NpuTensor,
        host.shape,
        strides=host.stride(),
        storage_offset=host.storage_offset(),
        dtype=host.dtype,
        layout=host.layout,
        device=device,
        requires_grad=host.requires_grad,
    )
    out.host = host
    return out


def host_of(tensor: torch.Tensor) -> torch.Tensor:
    """The CPU tensor behind an NPU tensor; raises for any other tensor (as HCCL would)."""
    if not isinstance(tensor, NpuTensor):
        raise RuntimeError(
            f"torch_npu stand-in: expected a tensor on an NPU, got one on {tensor.device} "
            "(the hccl process group takes NPU tensors only)"
        )
    return tensor.host


def resolve(device: torch.device) -> torch.device:
    """``npu`` -> ``npu:<current device>``."""
    return device if device.index is not None else torch.device("npu", npu.current_device())


def _host(value: Any) -> Any:
    return value.host if isinstance(value, NpuTensor) else value


def _result_device(args: Any, kwargs: dict[str, Any]) -> torch.device | None:
    """Where results go: the ``device`` argument if given, else the NPU of the first NPU tensor."""
    device = kwargs.get("device")
    if device is not None:
        device = torch.device(device)
        return resolve(device) if device.type == "npu" else None
    for value in tree_flatten(args)[0]:
        if isinstance(value, NpuTensor):
            return value.device
    return None


def _check_devices(func, args: Any, kwargs: dict[str, Any]) -> None:
    """Raise, as a device backend does, when one operation mixes devices."""
    devices = set()
    for value in tree_flatten((args, kwargs))[0]:
        # CPU scalars (0-dim) combine with device tensors, as on every device
        if isinstance(value, NpuTensor) or (isinstance(value, torch.Tensor) and value.dim() > 0):
            devices.add(str(value.device))
    if func._schema.name in _CROSS_DEVICE:
        devices.discard("cpu")
    if len(devices) > 1:
        first, second = sorted(devices)[:2]
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, "
            f"{first} and {second}! (torch_npu stand-in, in {func._schema.name})"
        )


def _rewrap(out: Any, originals: Any, hosts: Any, target: torch.device | None) -> Any:
    """Wrap the host results for ``target``; a result that is an argument returns that argument."""
    by_id = {
        id(h): o
        for h, o in zip(tree_flatten(hosts)[0], tree_flatten(originals)[0], strict=True)
        if isinstance(h, torch.Tensor)
    }

    def one(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if id(value) in by_id:
            return by_id[id(value)]
        return wrap(value, target) if target is not None else value

    return tree_map(one, out)


def _factory_fallback(op, *args: Any, **kwargs: Any) -> Any:
    """PrivateUse1 kernel of every operation: run it on the CPU, wrap the tensors it returns."""
    device = torch.device(kwargs.get("device") or "npu")
    if device.type != "npu":
        raise RuntimeError(f"torch_npu stand-in: {op} reached the npu backend with {device}")
    kwargs["device"] = torch.device("cpu")
    kwargs.pop("pin_memory", None)
    out = op(*args, **kwargs)
    target = resolve(device)
    return tree_map(lambda v: wrap(v, target) if isinstance(v, torch.Tensor) else v, out)


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    """What torch asks the PrivateUse1 backend about itself."""

    def is_available(self) -> bool:
        return npu.is_available()

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    """torch's device guard for "npu" (torch keeps no current NPU of its own here)."""

    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


_LIBRARIES: list[torch.library.Library] = []


def register() -> None:
    """Name torch's PrivateUse1 device "npu" and give it the CPU fallback (once per process)."""
    if _LIBRARIES:
        return
    torch.utils.rename_privateuse1_backend("npu")
    torch._register_device_module("npu", npu)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=False)
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    library = torch.library.Library("_", "IMPL")
    library.fallback(_factory_fallback, dispatch_key="PrivateUse1")
    _LIBRARIES.append(library)
