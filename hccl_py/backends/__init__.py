"""Backends that run each rank in its own process, over torch.distributed.

- :mod:`.dist`: the server that turns each round of a task into process-group
  calls, and the "gloo" and "hccl" backends built on it.
- :mod:`.ops`: the process-group calls of one round of each op.
- :mod:`.session`: this process's place in the world (store, process groups,
  liveness, exchanging ``hp.run`` outcomes).
- :mod:`.store`: the keys that the processes share through the TCPStore.
- :mod:`.npu`: the few torch_npu calls the "hccl" backend needs.

Modules are imported on use, so ``import hccl_py`` never touches torch_npu.
"""
