"""The backends: one server per way of running ranks, all behind :mod:`hccl_py.server`.

- :mod:`.emu` (from the repository's ``emu/`` folder): every rank a thread of
  this process, one shared emulated server, every misuse reported.
- :mod:`.dist`: each rank its own process over torch.distributed; the server
  turns each round of a task into process-group calls; the "gloo" and "hccl"
  backends built on it. :mod:`.domain_queue` runs one domain's tasks in Prepare order.
- :mod:`.pg_rounds`: the process-group calls of one round of each op.
- :mod:`.session`: this process's place in the world (store, process groups,
  liveness, exchanging ``hp.run`` outcomes).
- :mod:`.store`: the keys that the processes share through the TCPStore.
- :mod:`.npu`: the few torch_npu calls the "hccl" backend needs.

Modules are imported on use, so ``import hccl_py`` never touches torch_npu.
"""
