"""The bytes an indexing operation touches (emu/extents.py), against every element's offset.

The race checks count only the elements an index or a mask picks. The picks
are found by running the operation on per-dimension coordinate views; here
they are compared, on random strided views, with the same operation run on a
tensor that holds every element's byte offset (the definition).
"""

from __future__ import annotations

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
    aten.masked_fill_: lambda off, a: aten.masked_select.default(off, a[1]),
    aten.embedding: lambda off, a: aten.index_select.default(off, 0, a[1].reshape(-1)),
}


def _definition(func: Any, args: tuple, view: torch.Tensor) -> np.ndarray:
    offsets = torch.from_numpy(element_offsets(view)).view(view.shape)
    written = _WRITTEN_AS.get(func.overloadpacket)
    picked = written(offsets, args) if written else func(offsets, *args[1:])
    return np.sort(picked.reshape(-1).numpy())


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
        (aten.index.Tensor, (v, [None, torch.tensor([[0], [2]]), torch.tensor([1, 3])])),
        (aten.index.Tensor, (v, [torch.tensor([1, 0]), None, torch.tensor([1, 2])])),
        (aten.index.Tensor, (v, [mask(rows, cols)])),
        (aten.index_select.default, (v, 1, torch.tensor([2, 0]))),
        (aten.gather.default, (v, 2, torch.randint(0, depth, (2, cols, 3), generator=gen))),
        (aten.take.default, (v, torch.randint(0, v.numel(), (7,), generator=gen))),
        (aten.masked_select.default, (v, mask(rows, cols, depth))),
        (aten.masked_select.default, (v, mask(depth))),
        (aten.index_put_.default, (v, [torch.tensor([0, 1])], torch.tensor(1.0))),
        (aten.scatter_.value, (v, 0, torch.randint(0, rows, (2, 2, 2), generator=gen), 1.0)),
        (aten.index_fill_.int_Scalar, (v, 2, torch.tensor([1]), 1.0)),
        (aten.masked_fill_.Scalar, (v, mask(rows, cols, depth), 1.0)),
    ]


def test_the_picked_bytes_are_those_of_the_picked_elements() -> None:
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    storage = torch.zeros(4000)
    for view in _views(rng, storage):
        for func, args in _cases(view, gen):
            got = selected_offsets(func, args, 0, view)
            assert got is not None, func
            assert np.array_equal(np.sort(got), _definition(func, args, view)), func
    table = storage[:60].view(20, 3)
    ids = torch.tensor([[1, 5], [2, 2]])
    got = selected_offsets(aten.embedding.default, (table, ids), 0, table)
    assert np.array_equal(np.sort(got), _definition(aten.embedding.default, (table, ids), table))


def test_other_operations_and_arguments_use_every_element() -> None:
    v = torch.zeros(4, 4)
    index = torch.tensor([1])
    assert selected_offsets(aten.add.Tensor, (v, v), 0, v) is None
    assert selected_offsets(aten.index_select.default, (v, 0, index), 2, index) is None
    assert selected_offsets(aten.index_put.default, (v, [index], v[0]), 0, v) is None  # a copy
    out_of_range = (v, 0, torch.tensor([9]))
    assert selected_offsets(aten.index_select.default, out_of_range, 0, v) is None


def test_a_pick_never_computes_every_elements_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    """It costs what the picked elements cost: a row of a large view is its row's offsets."""
    monkeypatch.setattr(extents, "element_offsets", lambda t: pytest.fail("every offset"))
    view = torch.zeros(1024, 1024)
    got = selected_offsets(aten.index.Tensor, (view, [torch.tensor([3])]), 0, view)
    assert got is not None and np.array_equal(got, (3 * 1024 + np.arange(1024)) * 4)
