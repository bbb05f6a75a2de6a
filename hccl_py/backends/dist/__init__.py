"""The torch.distributed backends ("gloo" and "hccl"): one process per rank.

- :mod:`.server`: ``DistServer`` and ``DistBackend``, what gloo and hccl share.
- :mod:`.hccl`: ``HcclBackend``, torch_npu's HCCL process group.
- :mod:`.gloo`: ``GlooBackend`` and its server (``DistServer`` with shared windows).
- :mod:`.domain_queue`: one domain's tasks on one rank, run in Prepare order.
- :mod:`.rounds`: the process-group calls of one round of each op.
- :mod:`.session`: this process's place in the world (store, groups, liveness, outcomes).
- :mod:`.shm_windows`: communication windows in shared memory (gloo on one host).
- :mod:`.npu`: the few torch_npu calls the "hccl" backend needs.
"""
