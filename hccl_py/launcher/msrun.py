"""msrun's scheduler process: it hosts the rendezvous store until every worker left or died."""

from __future__ import annotations

import time

from . import exchange
from . import store as kv
from .liveness import Peers, process_state
from .spec import RankSpec

#: Seconds the msrun scheduler waits for workers that never registered, once the job failed.
UNSEEN_GRACE_S = 5.0


def serve_scheduler(spec: RankSpec) -> int:
    """msrun's scheduler process: host the store until every worker left or died.

    Returns the exit code the scheduler process should end with (1 when a
    worker failed or died, so that msrun reports the job as failed).
    """
    address = kv.listen_address(spec.host)
    host, _ = kv.host_store(address, spec.port, timeout=60.0)
    store = kv.scoped(host, kv.PREFIX)
    n = spec.world_size
    kv.mark_run(store, n)
    print(
        f"hccl_py: msrun scheduler hosts the rendezvous store at {spec.host}:{spec.port} "
        f"(listening on {address}) for {n} workers",
        flush=True,
    )
    peers = Peers(store)
    gone: set[int] = set()
    trouble_at: float | None = None
    while True:
        now = time.monotonic()
        left = {r for r in range(n) if store.check([kv.left_key(r)])}
        for r in set(range(n)) - left - gone:
            registered = store.check([kv.pid_key(r)]) or store.check([kv.heartbeat_key(r)])
            if registered and peers.gone(r) is not None:
                gone.add(r)
        failed = store.check([kv.ABORT]) or bool(gone - left)
        if failed and trouble_at is None:
            trouble_at = now
        if trouble_at is not None and now - trouble_at > UNSEEN_GRACE_S:
            gone |= set(range(n)) - left - gone - set(peers.beats)
        if left | gone >= set(range(n)):
            break
        time.sleep(0.2)
    silent = sorted(r for r in gone if r not in left and not store.check([kv.failed_key(r)]))
    if silent:
        # msrun reaps the worker whose failure it noticed, then kills the others with
        # SIGKILL and never reaps them: the reaped ones ended first.
        states = {
            r: process_state(store.get(kv.pid_key(r)).decode(errors="replace")) for r in silent
        }
        first = [r for r in silent if states[r] == "gone"] or silent
        later = [r for r in silent if r not in first]
        print(
            f"ERROR: hccl_py: rank(s) {first} ended without finishing and without reporting "
            "an error (killed or crashed)"
            + (f"; rank(s) {later} were stopped after that" if later else ""),
            flush=True,
        )
    if store.check([kv.ABORT]):
        print(
            f"ERROR: hccl_py: the job failed: {exchange.describe_abort(exchange.read_abort(store))}",
            flush=True,
        )
    return 1 if failed else 0
