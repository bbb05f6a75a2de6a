"""The backends: one server per way of running ranks, all behind :mod:`hccl_py.server.protocol`.

- :mod:`.emu` (from the repository's ``emu/`` folder): every rank runs in this
  process, one shared emulated server, every misuse reported.
- :mod:`.dist`: each rank its own process over torch.distributed; the "gloo" and
  "hccl" backends.

Modules are imported on use, so ``import hccl_py`` never touches torch_npu.
"""
