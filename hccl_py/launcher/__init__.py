"""Processes of a gloo or HCCL world: launcher detection, spawning, supervision.

- :mod:`.spec`: which launcher started this process, and its rank and rendezvous address;
- :mod:`.liveness`: whether a rank's process still lives (pid, heartbeat), how it ended;
- :mod:`.supervise`: waiting for child processes, stopping them, reading their outcomes;
- :mod:`.spawn`: the processes ``hp.run`` starts itself when no launcher did;
- :mod:`.script`: the runner of ``python -m hccl_py run``;
- :mod:`.cli_checks`: the command line's checks of its options and environment, before anything runs;
- :mod:`.msrun`: msrun's scheduler process, which hosts the store;
- :mod:`.torch_env`: torch's flight recorder off in a rank that creates the default process group.

One process runs one rank. Such processes come from:

- **msrun** (MindSpore): workers get ``MS_ROLE=MS_WORKER``, ``MS_NODE_ID``
  (``RANK_ID``), ``MS_WORKER_NUM``, ``DEVICE_ID``, ``MS_SCHED_HOST`` and
  ``MS_SCHED_PORT``. msrun also runs the script once with ``MS_ROLE=MS_SCHED``:
  that process hosts the rendezvous store at the scheduler address
  (:func:`.msrun.serve_scheduler`) and exits when every worker is done.
- **torchrun** (or any launcher exporting ``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``): the store is torchrun's
  agent store (``TORCHELASTIC_USE_AGENT_STORE``) or, otherwise, hosted by rank 0.
- **hccl_py's runner**, ``python -m hccl_py run -n N --backend gloo script.py``
  (:func:`.script.run_script`): it hosts the store, starts the processes with
  torchrun-style variables, prefixes their output with the rank and stops
  every rank when one fails.
- **hp.run itself** when no launcher started the process (:func:`.spawn.spawn_world`):
  it starts ``world_size`` child processes running ``fn``.
"""
