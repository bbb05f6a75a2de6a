"""TEST STAND-IN (see the package docstring): the "hccl" process-group backend, over gloo.

:class:`ProcessGroupHCCL` is a Python ``torch.distributed.ProcessGroup`` that
takes NPU tensors only (a CPU tensor raises, as on real HCCL), unwraps them to
their CPU host tensors and runs the collective on a gloo group created over the
same store. Reductions gloo lacks (int16) run widened to int32. Every
collective completes before it returns.

``group._get_backend(torch.device("npu"))`` returns the group itself, whose
``get_hccl_comm_name(rank)`` returns ``"standin_hccl_<group name>"``; the
fused MC2 operators find the group again by that name (:func:`group_of`).
"""

from __future__ import annotations

import datetime
import threading
import weakref
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from ._tensor import host_of

#: Element types gloo cannot reduce, and the type the stand-in reduces them in.
_WIDEN = {torch.int16: torch.int32}

_NAMES: dict[str, weakref.ref[ProcessGroupHCCL]] = {}
_NAMES_LOCK = threading.Lock()


def _hosts(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [host_of(t) for t in tensors]


class ProcessGroupHCCL(dist.ProcessGroup):
    """The stand-in HCCL process group of one group of ranks (see the module docstring)."""

    def __init__(
        self,
        store: dist.Store,
        rank: int,
        size: int,
        timeout: datetime.timedelta,
        name: str,
    ) -> None:
        super().__init__(rank, size)
        self._name = name
        self._gloo = dist.ProcessGroupGloo(
            dist.PrefixStore("torch_npu_standin/", store), rank, size, timeout
        )

    # ------------------------------------------------------------- identity
    def getBackendName(self) -> str:
        return "hccl"

    @property
    def group_name(self) -> str:
        return self._name

    def _set_group_name(self, name: str) -> None:
        self._name = name

    def _get_backend(self, device: torch.device | str) -> ProcessGroupHCCL:
        device = torch.device(device)
        if device.type != "npu":
            raise RuntimeError(f"No backend type associated with device type {device.type}")
        return self

    def get_hccl_comm_name(self, rankid: int, init_comm: bool = True) -> str:
        """The name the fused MC2 operators take as ``hcom`` (the same on every rank)."""
        if not 0 <= int(rankid) < dist.get_world_size():
            raise RuntimeError(f"get_hccl_comm_name: rank {rankid} is not in the world")
        name = f"standin_hccl_{self._name}"
        with _NAMES_LOCK:
            _NAMES[name] = weakref.ref(self)
        return name

    def shutdown(self) -> None:
        self._gloo.shutdown()

    # ----------------------------------------------------------- collectives
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts or c10d.AllreduceOptions()
        hosts = _hosts(tensors)
        wide = [h.to(_WIDEN[h.dtype]) if h.dtype in _WIDEN else h for h in hosts]
        work = self._gloo.allreduce(wide, opts)
        work.wait()
        for host, value in zip(hosts, wide, strict=True):
            if value is not host:
                host.copy_(value)
        return work

    def _reduce_scatter_base(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> Any:
        opts = opts or c10d.ReduceScatterOptions()
        out, inp = host_of(output), host_of(input)
        wide = _WIDEN.get(out.dtype)
        target = out if wide is None else torch.empty_like(out, dtype=wide)
        work = self._gloo._reduce_scatter_base(target, inp if wide is None else inp.to(wide), opts)
        work.wait()
        if target is not out:
            out.copy_(target)
        return work

    reduce_scatter_single = _reduce_scatter_base

    def allgather(
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:
        opts = opts or c10d.AllgatherOptions()
        return self._done(self._gloo.allgather([_hosts(o) for o in outputs], _hosts(inputs), opts))

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        opts = opts or c10d.AllgatherOptions()
        return self._done(self._gloo._allgather_base(host_of(output), host_of(input), opts))

    all_gather_single = _allgather_base

    def alltoall_base(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any = None,
    ) -> Any:
        opts = opts or c10d.AllToAllOptions()
        work = self._gloo.alltoall_base(
            host_of(output), host_of(input), output_split_sizes, input_split_sizes, opts
        )
        return self._done(work)

    all_to_all_single = alltoall_base

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts or c10d.BroadcastOptions()
        return self._done(self._gloo.broadcast(_hosts(tensors), opts))

    def barrier(self, opts: Any = None) -> Any:
        return self._done(self._gloo.barrier(opts or c10d.BarrierOptions()))

    @staticmethod
    def _done(work: Any) -> Any:
        work.wait()
        return work


def group_of(hcom: str) -> ProcessGroupHCCL:
    """The group whose ``get_hccl_comm_name`` returned ``hcom`` in this process."""
    with _NAMES_LOCK:
        ref = _NAMES.get(hcom)
    group = ref() if ref is not None else None
    if group is None:
        raise RuntimeError(
            f"torch_npu stand-in: unknown hcom {hcom!r}; get it from "
            "group._get_backend(torch.device('npu')).get_hccl_comm_name(rank)"
        )
    return group


def _create(options: Any, pg_options: Any = None) -> ProcessGroupHCCL:
    """The backend's creator (torch.distributed's extended form: one options object)."""
    return ProcessGroupHCCL(
        options.store,
        options.group_rank,
        options.group_size,
        options.timeout,
        str(options.group_id),
    )


def register() -> None:
    """Register the "hccl" backend for "npu" tensors with torch.distributed."""
    if "hccl" not in dist.Backend.backend_list:
        dist.Backend.register_backend("hccl", _create, extended_api=True, devices=["npu"])
