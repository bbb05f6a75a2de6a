"""Kernel machinery: where user code runs.

- :mod:`.context`: which rank and which core the running code belongs to.
- :mod:`.cores`: ``hp.launch``, the cores of a kernel, ``SyncAll``, ``GetHcclContext``.
- :mod:`.crosscore`: ``CrossCoreSetFlag`` / ``CrossCoreWaitFlag``.
"""
