"""The bytes an indexing operation touches (emu/extents.py), against every element's offset.

The race checks count only the elements an index or a mask picks. The picks
are found by running the operation on per-dimension coordinate views; here
they are compared, on random strided views, with the same operation run on a
tensor that holds every element's byte offset (the definition).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch
from hccl_py.backends.emu import extents
from hccl_py.backends.emu.extents import element_offsets, selected_offsets

aten = torch.ops.aten
#: How each in-place write's elements are picked, as the read of the same indices.
_WRITTEN_AS = {
    aten.index_put_: lambda off, a: aten.index.Tensor(off, a[1]),
    aten.scatter_: lambda off, a: aten.gather.default(off, a[1], a[2]),
    aten.index_fill_: lambda off, a: aten.index_select.default(off, a[1], a[2]),
    aten.index_copy_: lambda off, a: aten.index_select.default(off, a[1], a[2]),
    aten.masked_fill_: lambda off, a: aten.masked_select.default(off, a[1]),
    aten.embedding: lambda off, a: aten.index_select.default(off, 0, a[1].reshape(-1)),
}


def _definition(func: Any, args: tuple, view: torch.Tensor) -> np.ndarray:
    offsets = torch.from_numpy(element_offsets(view)).view(view.shape)
    written = _WRITTEN_AS.get(func.overloadpacket)
    picked = written(offsets, args) if written else func(offsets, *args[1:])
    return np.unique(picked.reshape(-1).numpy())


def _views(rng: np.random.Generator, storage: torch.Tensor) -> list[torch.Tensor]:
    views = []
    for _ in range(40):
        strides = tuple(int(s) for s in rng.permutation([1, 6, 30]))
        view = storage[int(rng.integers(0, 10)) :].as_strided((4, 5, 6), strides)
        if rng.random() < 0.3:
            view = view.transpose(0, 2)
        if rng.random() < 0.3:
            view = view[:, 1:4]
        views.append(view)
    return views


def _cases(v: torch.Tensor, gen: torch.Generator) -> list[tuple[Any, tuple]]:
    rows, cols, depth = v.shape

    def mask(*shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=gen) > 0.5

    return [
        (aten.index.Tensor, (v, [torch.tensor([0, 2, 1])])),
        (aten.index.Tensor, (v, [torch.tensor([[-1, 0], [3, -1]], dtype=torch.int32)])),
        (aten.index.Tensor, (v, [torch.tensor([], dtype=torch.int64)])),
        (aten.index_select.default, (v, 0, torch.tensor([3, 1, 3]))),
        (aten.index_select.default, (v, -3, torch.tensor([2]))),
        (aten.index_copy_.default, (v, 0, torch.tensor([2, 0]), torch.zeros(2, cols, depth))),
        (aten.index.Tensor, (v, [None, torch.tensor([[0], [2]]), torch.tensor([1, 3])])),
        (aten.index.Tensor, (v, [torch.tensor([1, 0]), None, torch.tensor([1, 2])])),
        (aten.index.Tensor, (v, [mask(rows, cols)])),
        (aten.index_select.default, (v, 1, torch.tensor([2, 0]))),
        (aten.index_select.default, (v, -1, torch.tensor([3]))),
        (aten.gather.default, (v, 2, torch.randint(0, depth, (2, cols, 3), generator=gen))),
        (aten.take.default, (v, torch.randint(0, v.numel(), (7,), generator=gen))),
        (aten.masked_select.default, (v, mask(rows, cols, depth))),
        (aten.masked_select.default, (v, mask(depth))),
        (aten.index_put_.default, (v, [torch.tensor([0, 1])], torch.tensor(1.0))),
        (aten.scatter_.value, (v, 0, torch.randint(0, rows, (2, 2, 2), generator=gen), 1.0)),
        (aten.index_fill_.int_Scalar, (v, 2, torch.tensor([1]), 1.0)),
        (aten.masked_fill_.Scalar, (v, mask(rows, cols, depth), 1.0)),
    ]


@pytest.mark.parametrize("way", ["rows", "dense", "sparse"])
def test_the_picked_bytes_are_those_of_the_picked_elements(
    way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every way of finding a pick (whole rows from their numbers, one index over the view's
    elements for a large pick, one per dimension on coordinate views for a small one) gives
    the definition's bytes."""
    monkeypatch.setattr(extents, "ROWS", way == "rows")
    monkeypatch.setattr(extents, "DENSE", 1 << 30 if way == "dense" else 0)
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    storage = torch.zeros(4000)
    for view in _views(rng, storage):
        for func, args in _cases(view, gen):
            got = selected_offsets(func, args, 0, view)
            assert got is not None, func
            assert np.array_equal(got, _definition(func, args, view)), func
    table = storage[:60].view(20, 3)
    ids = torch.tensor([[1, 5], [2, 2]])
    got = selected_offsets(aten.embedding.default, (table, ids), 0, table)
    assert np.array_equal(got, _definition(aten.embedding.default, (table, ids), table))


def test_other_operations_and_arguments_use_every_element() -> None:
    v = torch.zeros(4, 4)
    index = torch.tensor([1])
    assert selected_offsets(aten.add.Tensor, (v, v), 0, v) is None
    assert selected_offsets(aten.index_select.default, (v, 0, index), 2, index) is None
    assert selected_offsets(aten.index_put.default, (v, [index], v[0]), 0, v) is None  # a copy
    out_of_range = (v, 0, torch.tensor([9]))
    assert selected_offsets(aten.index_select.default, out_of_range, 0, v) is None


def test_a_uint8_mask_picks_as_its_bool_mask_without_warning_again(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """torch warns that ``uint8`` masks are deprecated (a Python warning or a line on stderr)
    when the kernel indexes with one; the replay on coordinates must not warn once more per
    dimension."""
    view = torch.zeros(4, 6)[:, 1:5]
    mask = torch.tensor([1, 0, 1, 1], dtype=torch.uint8)
    for func in (aten.index.Tensor, aten.index_put_.default):
        args = (view, [mask], torch.tensor(1.0))
        capfd.readouterr()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = selected_offsets(func, args, 0, view)
        assert [str(w.message) for w in caught] == []
        assert "uint8" not in capfd.readouterr().err
        want = selected_offsets(func, (view, [mask.bool()], torch.tensor(1.0)), 0, view)
        assert got is not None and np.array_equal(got, want)
        assert got.size == 3 * 4


def test_a_pick_never_computes_every_elements_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    """It costs what the picked elements cost: a row of a large view is its row's offsets."""
    monkeypatch.setattr(extents, "element_offsets", lambda t: pytest.fail("every offset"))
    view = torch.zeros(1024, 1024)
    got = selected_offsets(aten.index.Tensor, (view, [torch.tensor([3])]), 0, view)
    assert got is not None and np.array_equal(got, (3 * 1024 + np.arange(1024)) * 4)


#: In-place writes with values that change every element they write (the view holds 1..n).
WRITES = {
    "index_put_": lambda v, i: v.index_put_((i,), torch.tensor(-1.0)),
    "index_put_ accumulate": lambda v, i: v.index_put_((i,), torch.tensor(5.0), accumulate=True),
    "scatter_": lambda v, i: v.scatter_(1, i.expand(v.shape[0], -1), -1.0),
    "scatter_add_": lambda v, i: v.scatter_add_(1, i.expand(2, -1), torch.ones(2, len(i))),
    "scatter_reduce_": lambda v, i: v.scatter_reduce_(
        1, i.expand(2, -1), torch.ones(2, len(i)), "sum"
    ),
    "index_copy_": lambda v, i: v.index_copy_(1, i, -torch.ones(v.shape[0], len(i))),
    "index_fill_": lambda v, i: v.index_fill_(1, i, -1.0),
    "index_add_": lambda v, i: v.index_add_(1, i, torch.ones(v.shape[0], len(i))),
    "masked_fill_": lambda v, i: v.masked_fill_(torch.isin(torch.arange(v.shape[1]), i), -1.0),
    "masked_scatter_": lambda v, i: v.masked_scatter_(
        torch.isin(torch.arange(v.shape[1]), i), -torch.ones(v.numel())
    ),
}


@pytest.mark.parametrize("name", sorted(WRITES))
@pytest.mark.parametrize("transposed", [False, True])
def test_a_write_picks_exactly_the_elements_it_changes(name: str, transposed: bool) -> None:
    """Against what the operation really does, not the formula the pick uses: run it on a
    view whose elements all differ from what it writes, and compare the changed bytes."""
    storage = torch.arange(1.0, 201.0)
    view = storage[3:].as_strided((6, 8), (1, 6) if transposed else (8, 1))
    before = storage.clone()
    index = torch.tensor([5, 1, 5]) if name != "index_copy_" else torch.tensor([5, 1])
    recorded: list[np.ndarray] = []

    class Record(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            if extents.picks(func) and args and args[0] is view:
                recorded.append(selected_offsets(func, args, 0, view))
            return func(*args, **(kwargs or {}))

    with Record():
        WRITES[name](view, index)
    changed = np.flatnonzero((storage != before).numpy()) * storage.element_size()
    assert len(recorded) == 1 and recorded[0] is not None, recorded
    assert np.array_equal(recorded[0], changed)
