"""A record and the data that rides after it travel as two parts (``Spliced``), written
straight into the exchange's row or block: the same bytes as the joined payload, truncated
alike, and a round 0 from the rows written straight into the receive memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hccl_py.backends.dist import gathered, predicted, rounds
from hccl_py.core.layout import Blocks
from hccl_py.server.protocol import Spliced, put, record_of

RECORD = b'{"op":"all_gather_into_tensor","carry":5}'


def _spliced(n: int) -> tuple[Spliced, bytes]:
    data = np.arange(n, dtype=np.uint8)
    return Spliced(RECORD, memoryview(data)), RECORD + b"\0" + data.tobytes()


@pytest.mark.parametrize("n", [0, 1, 7, 300])
def test_spliced_is_the_joined_payload(n: int) -> None:
    spliced, whole = _spliced(n)
    assert len(spliced) == len(whole)
    assert bytes(spliced) == whole
    assert record_of(spliced) == RECORD
    assert record_of(whole) == RECORD


@pytest.mark.parametrize("room", [0, 3, len(RECORD), len(RECORD) + 1, len(RECORD) + 4, 400])
def test_put_writes_what_fits_as_the_joined_payload_would(room: int) -> None:
    spliced, whole = _spliced(20)
    a, b = np.full(room + 5, 0xEE, np.uint8), np.full(room + 5, 0xEE, np.uint8)
    assert put(spliced, a[:room]) == put(whole, b[:room]) == min(room, len(whole))
    assert a.tobytes() == b.tobytes()  # nothing past the room written
    assert a[: min(room, len(whole))].tobytes() == whole[:room]


@pytest.mark.parametrize("width", [8, len(RECORD) + 3, 4096])
def test_gathered_row_of_spliced_equals_row_of_bytes(width: int) -> None:
    spliced, whole = _spliced(64)
    assert gathered._row(spliced, width) == gathered._row(whole, width)


def test_predicted_record_of_spliced_drops_its_data() -> None:
    spliced, _ = _spliced(64)
    assert predicted.record_of(spliced) == RECORD


def test_scatter_joined_writes_the_packed_blocks_only_and_moves_the_version() -> None:
    data = torch.full((32,), 0xAB, dtype=torch.uint8)
    before = data._version
    rows = [memoryview(np.full(4, i + 1, np.uint8)) for i in range(3)]
    blocks = Blocks(np.array([8, 12, 16]), np.array([4, 4, 4]))
    rounds.scatter_joined(data, blocks, rows)
    want = np.full(32, 0xAB, np.uint8)
    want[8:20] = np.repeat([1, 2, 3], 4)
    assert data.numpy().tobytes() == want.tobytes()
    assert data._version > before


def test_scatter_joined_into_blocks_with_gaps() -> None:
    data = torch.zeros(16, dtype=torch.uint8)
    rows = [memoryview(np.full(2, 7, np.uint8)), memoryview(np.full(2, 9, np.uint8))]
    rounds.scatter_joined(data, Blocks(np.array([0, 10]), np.array([2, 2])), rows)
    assert data.tolist() == [7, 7, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 0, 0, 0, 0]
