"""What the store's readers accept: signed values of this run, plain data, nothing else.

In-process checks of :mod:`hccl_py.launcher.sealed` and the outcome / abort
encodings of :mod:`hccl_py.launcher.store` (on a HashStore, no processes).
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import types

import pytest
import torch
import torch.distributed as dist

from hccl_py.core.errors import HcclPeerError, HcclWarning
from hccl_py.kernel.outcome import RankOutcome
from hccl_py.launcher import exchange, sealed
from hccl_py.launcher import store as kv
from hccl_py.launcher.liveness import RankDiedError, rank_died
from hccl_py.launcher.ports import port_holder
from hccl_py.launcher.supervise import outcome_of

KEY = "run0/result/1"


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(sealed.SECRET_ENV, "this run")
    return "this run"


@pytest.fixture
def no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sealed.SECRET_ENV, raising=False)


def test_signed_pickles_round_trip_every_dtype(secret: str) -> None:
    value = {"t": torch.arange(4.0).to(torch.float8_e4m3fn), "n": (1, "x")}
    status, back = exchange.decode(KEY, exchange.encode_result(value, 1, KEY))
    assert status == "ok" and back["n"] == (1, "x")
    assert back["t"].dtype == torch.float8_e4m3fn
    assert torch.equal(back["t"].view(torch.uint8), value["t"].view(torch.uint8))


def _tampered(raw: bytes) -> bytes:
    return raw[:-1] + bytes([raw[-1] ^ 1])


@pytest.mark.parametrize(
    "forge, why",
    [
        (lambda raw, mp: pickle.dumps(("ok", 1)), "hccl_py did not write it"),
        (lambda raw, mp: _tampered(raw), "its signature does not match this run's HCCL_PY_SECRET"),
        (
            lambda raw, mp: mp.setenv(sealed.SECRET_ENV, "another run") or raw,
            "its signature does not match",
        ),
        (lambda raw, mp: mp.delenv(sealed.SECRET_ENV) or raw, "this process has no HCCL_PY_SECRET"),
    ],
    ids=["raw-pickle", "tampered", "other-secret", "no-secret"],
)
def test_what_this_run_did_not_sign_is_never_unpickled(
    secret: str, monkeypatch: pytest.MonkeyPatch, forge, why: str
) -> None:
    raw = forge(exchange.encode_result([1, 2], 0, KEY), monkeypatch)
    loads = []
    monkeypatch.setattr(sealed.wire, "loads", loads.append)
    with pytest.raises(sealed.ForgedValueError, match=why) as info:
        exchange.decode(KEY, raw)
    assert loads == [], "the payload reached the unpickler"
    assert f"refused the value of store key {KEY!r}" in str(info.value)
    assert repr(bytes(raw[: sealed.SHOWN_BYTES])) in str(info.value)


def test_a_signature_is_bound_to_its_key(secret: str) -> None:
    raw = exchange.encode_result("rank 0's value", 0, "run0/result/0")
    with pytest.raises(sealed.ForgedValueError, match="signature does not match"):
        exchange.decode("run0/result/1", raw)


def test_unsigned_pickles_are_refused_and_never_written(no_secret: None) -> None:
    framed = sealed.seal(KEY, sealed.PICKLE, pickle.dumps(("ok", 1)))
    with pytest.raises(sealed.ForgedValueError, match="an unsigned pickle is never loaded"):
        exchange.decode(KEY, framed)
    with pytest.raises(RuntimeError, match="only with HCCL_PY_SECRET set"):
        sealed.dump_pickle(KEY, 1)


def test_without_a_secret_plain_values_travel_as_json(no_secret: None) -> None:
    value = {"a": [1, (2.5, None)], "b": (True, "s", {"c": []})}
    raw = exchange.encode_result(value, 0, KEY)
    assert raw.split(b" ", 2)[1] == sealed.JSON
    assert exchange.decode(KEY, raw) == ("ok", value)
    status, error = exchange.decode(KEY, exchange.encode_result(torch.ones(2), 3, KEY))
    assert status == "err" and type(error).__name__ == "TypeError"
    assert "the return value of rank 3 (Tensor) cannot be sent" in str(error)
    assert "a torch.Tensor" in str(error) and "set HCCL_PY_SECRET" in str(error)
    # hp.run's ranks return their value wrapped with its warnings: the message names the
    # user's value, not the wrapper (it named "(RankOutcome)" until 2026-11-29)
    wrapped = RankOutcome(torch.ones(2), [HcclWarning("group-name", "why")])
    status, error = exchange.decode(KEY, exchange.encode_result(wrapped, 3, KEY))
    assert status == "err" and type(error).__name__ == "TypeError"
    assert "the return value of rank 3 (Tensor) cannot be sent" in str(error), str(error)
    assert "a torch.Tensor" in str(error)


def test_without_a_secret_failures_keep_type_name_message_and_traceback(no_secret: None) -> None:
    try:
        raise ValueError("rank 2 gives up")
    except ValueError as exc:
        raw = exchange.encode_failure(exc, 2, KEY)
    status, error = exchange.decode(KEY, raw)
    assert status == "err" and isinstance(error, kv.RemoteError)
    assert (type(error).__name__, str(error), error.hccl_rank) == (
        "ValueError",
        "rank 2 gives up",
        2,
    )
    assert "raise ValueError" in error.hccl_traceback


class _PairError(Exception):
    """Pickles (its args are its message) but does not unpickle: its __init__ takes two."""

    def __init__(self, what: str, expert: int) -> None:
        super().__init__(f"{what} {expert}")


def _unpicklable_error() -> ValueError:
    exc = ValueError("bad routing table for expert 3")
    exc.context = lambda: None  # a lambda does not pickle
    return exc


@pytest.mark.parametrize("make", [_unpicklable_error, lambda: _PairError("expert", 3)])
def test_with_a_secret_a_failure_that_does_not_pickle_travels_as_plain_data(
    secret: str, make
) -> None:
    """Before, the fallback's stand-in did not pickle either (the rank died with a
    PicklingError and the run said only that it exited), or the parent's unpickling raised a
    raw TypeError."""
    try:
        raise make()
    except Exception as exc:  # noqa: BLE001 - the rank's failure
        raw = exchange.encode_failure(exc, 1, KEY)
        want = (type(exc).__name__, str(exc))
    status, error = exchange.decode(KEY, raw)
    assert status == "err" and isinstance(error, kv.RemoteError)
    assert (type(error).__name__, str(error), error.hccl_rank) == (*want, 1)
    assert "raise make()" in error.hccl_traceback


class _Pair:
    """Pickles into a call with one argument, which its __init__ refuses when unpickled."""

    def __init__(self, a: int, b: int) -> None:
        self.ab = (a, b)

    def __reduce__(self) -> tuple:
        return (_Pair, (self.ab,))


def test_a_signed_value_that_does_not_rebuild_here_is_the_rank_s_failure(secret: str) -> None:
    store = dist.HashStore()
    store.set(KEY, exchange.encode_result(_Pair(1, 2), 1, KEY))
    status, error = outcome_of(store, 0, 1, 0)
    assert status == "err" and isinstance(error, TypeError) and error.hccl_rank == 1
    assert str(error).startswith(
        "what the rank sent could not be rebuilt in this process (TypeError: _Pair.__init__() "
        "missing 1 required positional argument: 'b')"
    )


@pytest.mark.parametrize("has_secret", [True, False])
def test_abort_reasons_are_plain_data(monkeypatch: pytest.MonkeyPatch, has_secret: bool) -> None:
    if has_secret:
        monkeypatch.setenv(sealed.SECRET_ENV, "this run")
    else:
        monkeypatch.delenv(sealed.SECRET_ENV, raising=False)
    store = dist.HashStore()
    assert exchange.report_abort(store, rank_died(1, "was killed by SIGKILL"), 1)
    assert not exchange.report_abort(store, ValueError("later"), 0), "the first failure wins"
    assert store.get(kv.ABORT).split(b" ", 2)[1] == sealed.JSON
    reason = exchange.read_abort(store)
    assert isinstance(reason, RankDiedError) and reason.how == "was killed by SIGKILL"
    assert exchange.describe_abort(reason) == (
        "rank 1: RankDiedError: rank 1 was killed by SIGKILL before reporting an outcome"
    )


def test_a_failure_record_s_control_characters_are_shown_escaped(no_secret: None) -> None:
    """Without a secret anyone the store lets in can write a record: its text must not move a
    terminal (escape sequences, carriage returns) when the runner prints it."""
    store = dist.HashStore()
    record = {
        "rank": 1,
        "type": "ValueError",
        "message": "a\x1b[2J\rb\nc",
        "traceback": "t\x07",
        "how": None,
    }
    store.set(kv.ABORT, sealed.dump_json(kv.ABORT, record))
    reason = exchange.read_abort(store)
    assert exchange.describe_abort(reason) == "rank 1: ValueError: a\\x1b[2J\\x0db\nc"
    assert reason.hccl_traceback == "t\\x07"


@pytest.mark.parametrize(
    "value",
    [
        b"\x80\x04K\x01.",
        sealed.dump_json(kv.ABORT, {"rank": "0"}),
        sealed.seal(kv.ABORT, sealed.JSON, b"{not json"),
        sealed.seal(kv.ABORT, sealed.JSON, b"[" * 100_000 + b"]" * 100_000),
    ],
    ids=["pickle", "wrong-fields", "not-json", "too-deep"],
)
def test_a_forged_abort_reason_is_reported_not_loaded(no_secret: None, value: bytes) -> None:
    store = dist.HashStore()
    store.set(kv.ABORT, value)
    reason = exchange.read_abort(store)
    assert isinstance(reason, sealed.ForgedValueError)
    assert exchange.describe_abort(reason).startswith(
        "ForgedValueError: refused the value of store key 'abort'"
    )


def test_a_store_of_another_run_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    store = dist.HashStore()
    monkeypatch.setenv(sealed.SECRET_ENV, "another run")
    kv.mark_run(store, 2)
    kv.check_run(store, 2, "h:1")  # its own run accepts it
    monkeypatch.setenv(sealed.SECRET_ENV, "this run")
    with pytest.raises(kv.StoreJoinError, match="the store at h:1 belongs to another run"):
        kv.check_run(store, 2, "h:1")
    monkeypatch.delenv(sealed.SECRET_ENV)
    kv.mark_run(store, 4)
    with pytest.raises(kv.StoreJoinError, match="this run has 2 ranks"):
        kv.check_run(store, 2, "h:1")
    # JSON nested deeper than Python recurses (RecursionError, not ValueError) is refused too
    store.set(kv.RUN_MARK, sealed.seal(kv.RUN_MARK, sealed.JSON, b"[" * 100_000))
    with pytest.raises(kv.StoreJoinError, match="its plain data is not JSON"):
        kv.check_run(store, 2, "h:1")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_port_holder_names_the_listening_process() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert port_holder(port).startswith(f"pid {os.getpid()} (")
    assert "no process of this host listens" in port_holder(port)


def test_without_a_secret_outcomes_keep_their_warnings(no_secret: None) -> None:
    """hp.run's functions return a RankOutcome: value, HcclWarnings and trace travel as plain data."""
    warning = HcclWarning("extra-commit", "a Commit beyond repeat", rank=1, handle=0, actual=(2, 1))
    outcome = RankOutcome([1, "a"], [warning], {"events": [{"name": "Commit", "ts": 1.5}]})
    status, back = exchange.decode(KEY, exchange.encode_result(outcome, 1, KEY))
    assert status == "ok" and isinstance(back, RankOutcome)
    assert (back.value, back.trace) == (outcome.value, outcome.trace)
    assert [str(w) for w in back.warnings] == [str(warning)]
    assert back.warnings[0].kind == "extra-commit" and back.warnings[0].actual == (2, 1)


def test_a_forged_outcome_becomes_that_rank_s_failure(secret: str) -> None:
    store = dist.HashStore()
    store.set(kv.result_key(0, 1), pickle.dumps(("ok", 1)))
    status, error = outcome_of(store, 0, 1, 0)
    assert status == "err" and isinstance(error, sealed.ForgedValueError)
    assert error.hccl_rank == 1 and "store key 'run0/result/1'" in str(error)


def test_a_failure_whose_class_this_process_lacks_keeps_its_type_name_and_message(
    secret: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rank's exception class is not importable where the outcome is read (a class of the
    rank's own script, say): the record sent beside the pickle rebuilds its stand-in."""
    module = types.ModuleType("rank_only_module")
    exec("class RoutingError(Exception):\n    pass\n", module.__dict__)
    module.RoutingError.__module__ = "rank_only_module"
    monkeypatch.setitem(sys.modules, "rank_only_module", module)
    try:
        raise module.RoutingError("bad routing table for expert 3")
    except Exception as exc:  # noqa: BLE001 - the rank's failure
        raw = exchange.encode_failure(exc, 1, KEY)
    monkeypatch.delitem(sys.modules, "rank_only_module")  # the reading process has no such module
    status, error = exchange.decode(KEY, raw)
    assert status == "err" and isinstance(error, kv.RemoteError)
    assert (type(error).__name__, str(error), error.hccl_rank) == (
        "RoutingError",
        "bad routing table for expert 3",
        1,
    )


def test_a_return_value_too_large_for_a_tcp_store_is_the_rank_s_failure(tmp_path) -> None:
    """Under a launcher the outcomes travel through the run's TCPStore, which refuses values
    over 8 MiB by resetting the connection: before 2026-11-30 the ranks died with a bare
    "Connection reset by peer". hp.run's own FileStore carries any size."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    tcp = kv.scoped(server, kv.PREFIX)
    big = "z" * exchange.TCP_STORE_MAX_BYTES
    status, error = exchange.decode(KEY, exchange.encode_result(big, 1, KEY, tcp))
    assert status == "err" and type(error).__name__ == "ValueError"
    assert str(error).startswith(
        "the return value of rank 1 is 8.0 MiB encoded, more than the 8 MiB that the run's "
        "TCPStore carries"
    )
    small = exchange.encode_result("z" * 1000, 1, KEY, tcp)
    tcp.set(KEY, small)  # what fits goes through
    assert exchange.decode(KEY, tcp.get(KEY)) == ("ok", "z" * 1000)
    files = kv.scoped(dist.FileStore(str(tmp_path / "store"), 1), kv.PREFIX)
    assert exchange.decode(KEY, exchange.encode_result(big, 1, KEY, files)) == ("ok", big)


def test_a_store_whose_host_ended_is_named_not_torch_s_broken_pipe() -> None:
    """A rank whose store's host ended (rank 0 killed under a plain launcher, torchrun's agent
    killed) reported torch's bare DistNetworkError ("Broken pipe") as it returned."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = kv.connect("127.0.0.1", server.port, is_master=False, timeout=5.0)
    client.set("a", b"1")
    del server  # its host ends
    with pytest.raises(HcclPeerError) as info, kv.gone_store(1, "h:29500"):
        for i in range(10):  # a write or two may still leave before the reset arrives
            client.set(f"b{i}", b"2")
    assert str(info.value).startswith("[rank 1] the run's store at h:29500 is gone (")
    assert "the process that hosted it (rank 0, or the launcher) ended" in str(info.value)


def test_a_connection_the_store_closed_is_not_named_a_store_that_ended() -> None:
    """torch's store closes the connection of a request that fails, such as an add to a key that
    another process (anyone who reaches the store) set to something other than a number: the
    rank then said "the store is gone: the process that hosted it ended", which was false."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = kv.connect("127.0.0.1", server.port, is_master=False, timeout=5.0)
    other = kv.connect("127.0.0.1", server.port, is_master=False, timeout=5.0)
    other.set(kv.heartbeat_key(1), b"not a number")
    with pytest.raises(HcclPeerError) as info, kv.gone_store(1, f"127.0.0.1:{server.port}"):
        client.add(kv.heartbeat_key(1), 1)
    said = str(info.value)
    assert said.startswith(f"[rank 1] the run's store at 127.0.0.1:{server.port} closed this ")
    assert "but it still runs" in said and "ended" not in said
    assert other.get(kv.heartbeat_key(1)) == b"not a number", "the store itself runs on"
