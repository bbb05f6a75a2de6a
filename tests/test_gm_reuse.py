"""A tensor passed unchanged to another launch keeps its GM address (hccl_py/core/buffer_numbers.py).

On hardware a tensor has one device address for its life; hccl_py gives a rank's tensor the
allocation (buffer number, ``int(addr)``) it got at the rank's last launch of the run that
passed it as the same parameter, unless anything it was made of changed: a tensor resized,
re-strided, given another storage or dtype, or moved gets a new one, and a tensor that goes
takes its allocation with it.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from test_hcomm import DATA, channels, new_hcomm
from test_window_races import at

import hccl_py as hp
from hccl_py.kernel.context import current_rank_context

HERE = Path(__file__)
ROW = 64


def addresses(*launches: Callable[[], tuple]) -> list[hp.GmAddr]:
    """The first GM argument the kernel got at each launch (``launches``: its arguments, asked
    just before the launch, after what the previous one changed)."""
    seen: list[hp.GmAddr] = []

    def kernel(xGM, *rest) -> None:  # noqa: ANN001, N803
        seen.append(xGM)
        hp.gm_tensor(xGM, torch.uint8, xGM.alloc.nbytes)[:] = 7  # every byte of it is memory

    for args in launches:
        hp.launch(kernel, *args())
    return seen


def run(fn: Callable[[], Any]) -> Any:
    return hp.run(fn, world_size=1)[0]


def test_the_same_tensor_again_has_the_same_address() -> None:
    def main() -> tuple:
        x, y = torch.zeros(4), torch.zeros(8)
        a, b, c = addresses(lambda: (x,), lambda: (x,), lambda: (y,))
        return a.alloc is b.alloc, int(a) == int(b), a.alloc.name, c.alloc.uid, a.alloc.uid

    same, same_int, name, later, first = run(main)
    assert same and same_int and name == "xGM"
    assert later == first + 1  # the next new buffer takes the next number, not one per launch


def test_an_unnamed_parameter_keeps_its_buffer_number() -> None:
    def main() -> list[str]:
        x = torch.zeros(4)
        seen: list[str] = []
        kernel = lambda *args: seen.append(args[0].alloc.name)  # noqa: E731
        hp.launch(kernel, x)
        hp.launch(kernel, x)
        return seen

    assert run(main) == ["buf0", "buf0"]


def changed(change: Callable[[torch.Tensor], None], nbytes: int) -> None:
    """After ``change`` of the tensor between two launches, the kernel gets a new allocation of
    ``nbytes`` bytes that holds the tensor's bytes as they are now."""

    def main() -> tuple:
        x = torch.zeros(8)
        first, second = addresses(lambda: (x,), lambda: (change(x), x)[1:])
        return (
            first.alloc is second.alloc,
            second.alloc.nbytes,
            x.flatten().view(torch.uint8).tolist(),
        )

    same, size, data = run(main)
    assert not same and size == nbytes and data == [7] * nbytes


@pytest.mark.parametrize(
    ("change", "nbytes"),
    [
        (lambda x: x.resize_(16), 64),  # resized: a new storage
        (lambda x: x.resize_(2, 4), 32),  # another shape over the same bytes
        (lambda x: x.as_strided_((4,), (1,), 2), 16),  # another offset into the storage
        (lambda x: x.set_(torch.ones(8)), 32),  # another storage (set_)
        (lambda x: x.set_(torch.ones(4).untyped_storage()), 16),  # and of another size
        (lambda x: setattr(x, "data", x.data.clone()), 32),  # moved to other memory (.data)
        (lambda x: setattr(x, "data", torch.zeros(8, dtype=torch.int32)), 32),  # and dtype
    ],
    ids=["resize", "reshape", "offset", "set", "set-storage", "moved", "data"],
)
def test_a_changed_tensor_gets_a_new_allocation(
    change: Callable[[torch.Tensor], None], nbytes: int
) -> None:
    changed(change, nbytes)


def test_a_restrided_tensor_gets_a_new_allocation() -> None:
    """Strides over the same bytes that are no longer contiguous: refused, as at a first launch."""

    def main() -> None:
        x = torch.zeros(2, 4)
        addresses(lambda: (x,), lambda: (x.as_strided_((4, 2), (1, 4)),))

    with pytest.raises(hp.WorldError, match=r"must be contiguous tensors; got shape \(4, 2\)"):
        run(main)


def test_another_dtype_is_what_the_client_compares() -> None:
    """The allocation keeps the dtype (for the client's dtype check), not the tensor."""

    def main() -> tuple:
        x = torch.zeros(8)
        first, second = addresses(lambda: (x,), lambda: (x.data.view(torch.int32),))
        x.data = x.data.view(torch.int32)
        (third,) = addresses(lambda: (x,))
        return first.alloc.dtype, second.alloc.dtype, third.alloc.dtype, first.alloc is third.alloc

    assert run(main) == (torch.float32, torch.int32, torch.int32, False)


def test_another_parameter_or_another_view_gets_its_own_allocation() -> None:
    def main() -> list[bool]:
        x = torch.zeros(8)
        got: list[tuple] = []
        kernel = lambda xGM, yGM: got.append((xGM.alloc, yGM.alloc))  # noqa: E731
        hp.launch(kernel, x, x)
        hp.launch(kernel, x[:], x[:])
        return [got[0][0] is not got[0][1], got[1][0] is not got[0][0]]

    assert run(main) == [True, True]


def launched(x: torch.Tensor) -> hp.GmAddr:
    """The address ``x`` got at a launch."""
    return addresses(lambda: (x,))[0]


def test_the_cache_keeps_no_tensor_or_allocation_alive() -> None:
    """A tensor the caller drops goes at once (no collection), and its allocation with it."""

    def main() -> list[bool]:
        gc.disable()
        try:
            x = torch.zeros(8)
            addr = launched(x)
            refs = [weakref.ref(x), weakref.ref(addr.alloc)]
            cached = len(current_rank_context().buffers.cached)
            del x, addr
            return [
                cached == 1,
                *(r() is None for r in refs),
                not current_rank_context().buffers.cached,
            ]
        finally:
            gc.enable()

    assert run(main) == [True] * 4


def fetch_twice() -> None:
    """Rank 0 reads one row into ``out`` at each of two launches at one line, with no Drain;
    then the host reads both rows."""
    handle, buffers = channels()
    out = torch.zeros(4 * ROW, dtype=torch.uint8)

    def fetch(out, row) -> None:  # noqa: ANN001
        if hp.get_rank() == 0:
            assert new_hcomm().ReadNbi(handle[1], out + row, buffers[1] + DATA, ROW) == 0  # twice

    hp.launch(fetch, out, 0)
    hp.launch(fetch, out, ROW)
    out[: 2 * ROW].sum()  # host-reads


def test_requests_of_two_launches_into_one_tensor_stay_apart() -> None:
    """The one allocation of ``out`` does not merge the two launches' ReadNbi: the report names
    the bytes of the first, as when each launch had an allocation of its own."""
    with pytest.raises(hp.WorldError) as info:
        hp.run(fetch_twice, world_size=2, platform="A3")
    err = info.value.failures[0]
    assert isinstance(err, hp.HcclRaceError), err
    assert (
        f"rank 0 reads bytes [0, {ROW}) of out at {at('host-reads', 'fetch_twice', HERE)}"
        in str(err)
    )
    assert f"the ReadNbi at {at('twice', 'fetch', HERE)}" in str(err)
