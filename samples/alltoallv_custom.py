"""The documentation's AlltoAllV kernel (Atlas A3), ported line for line.

Run: ``python samples/alltoallv_custom.py`` (4 emulated ranks),
``python -m hccl_py run -n 8 samples/alltoallv_custom.py``, or under msrun /
torchrun on Ascend A3. Rank i sends ``sendCounts_i[j]`` elements from offset
``sdispls_i[j]`` to rank j, which stores them at offset ``rdispls_j[i]``.

- ``equal-count``: every rank exchanges 16 elements with every peer;
- ``uneven``: the documentation's 4-rank tables below. They are defined for
  exactly 4 ranks; with another world size this case is skipped and the output
  says so.

AlltoAllV needs platform A3 (or 950): ``hp.run(main, platform="A3")``.
"""

import numpy as np
from _common import WORLD_GROUP, compare, on_device, run_sample, skip, zeros

import hccl_py as hp
from hccl_py import (
    AIV,
    HCCL_CMD_ALLTOALLV,
    HCCL_SUCCESS,
    Hccl,
    HcclDataType,
    Mc2CcTiling,
    Mc2CcTilingConfig,
    Mc2InitTiling,
    TilingData,
    offsetof,
)

PLATFORM = "A3"  # AlltoAllV is an Atlas A3 (and 950) call
FP16 = HcclDataType.HCCL_DATA_TYPE_FP16
EQUAL_COUNT = 16

# The documentation's uneven 4-rank example: one row per rank.
UNEVEN = {
    "sendCounts": [[3, 3, 3, 3], [2, 2, 3, 2], [1, 4, 4, 4], [3, 3, 3, 3]],
    "sdispls": [[0, 3, 6, 9], [0, 2, 4, 7], [0, 1, 5, 9], [0, 3, 6, 9]],
    "recvCounts": [[3, 2, 1, 3], [3, 2, 4, 3], [3, 3, 4, 3], [3, 2, 4, 3]],
    "rdispls": [[0, 3, 5, 6], [0, 3, 5, 9], [0, 3, 6, 10], [0, 3, 5, 9]],
}


def equal_tables(n: int, count: int) -> dict[str, list[list[int]]]:
    """The tables of an AlltoAllV in which every rank exchanges ``count`` elements with each peer."""
    counts = [[count] * n for _ in range(n)]
    displs = [[count * j for j in range(n)] for _ in range(n)]
    return {"sendCounts": counts, "sdispls": displs, "recvCounts": counts, "rdispls": displs}


class AlltoAllVCustomTilingData(TilingData):
    _fields_ = [("mc2InitTiling", Mc2InitTiling), ("alltoAllVCcTiling", Mc2CcTiling)]


def alltoallv_custom(xGM, yGM, workspaceGM, tilingGM, tables):
    """One AlltoAllV<true>; each rank picks its row of the count and displacement tables."""
    tiling = hp.GET_TILING_DATA_WITH_STRUCT(AlltoAllVCustomTilingData, tilingGM)
    if hp.g_coreType == AIV:
        hccl = Hccl()
        contextGM = hp.GetHcclContext(0)
        hccl.InitV2(contextGM, tiling)
        if (
            hccl.SetCcTilingV2(offsetof(AlltoAllVCustomTilingData, "alltoAllVCcTiling"))
            != HCCL_SUCCESS
        ):
            return
        rankId = hccl.GetRankId()
        sendCounts = tables["sendCounts"][rankId]
        sdispls = tables["sdispls"][rankId]
        recvCounts = tables["recvCounts"][rankId]
        rdispls = tables["rdispls"][rankId]
        handleId = hccl.AlltoAllV[True](
            xGM, sendCounts, sdispls, FP16, yGM, recvCounts, rdispls, FP16
        )
        hccl.Wait(handleId)
        hp.SyncAll()
        hccl.Finalize()


def make_tiling() -> AlltoAllVCustomTilingData:
    """Host side: fill the init tiling and the AlltoAllV cc tiling."""
    tiling = AlltoAllVCustomTilingData()
    mc2CcTilingConfig = Mc2CcTilingConfig(
        WORLD_GROUP, HCCL_CMD_ALLTOALLV, "AlltoAll=level0:fullmesh;level1:pairwise"
    )
    mc2CcTilingConfig.GetTiling(tiling.mc2InitTiling)
    mc2CcTilingConfig.GetTiling(tiling.alltoAllVCcTiling)
    return tiling


def extent(displs: list[int], counts: list[int]) -> int:
    """Elements a buffer needs to hold every block ``[displs[j], displs[j] + counts[j])``."""
    return max(d + c for d, c in zip(displs, counts, strict=True))


def send_data(rank: int, tables: dict) -> np.ndarray:
    """Rank ``rank``'s send buffer: the element for peer j at position t is ``100*rank + 10*j + t``."""
    counts, displs = tables["sendCounts"][rank], tables["sdispls"][rank]
    data = np.full(extent(displs, counts), -1, dtype=np.float16)
    for j, (d, c) in enumerate(zip(displs, counts, strict=True)):
        data[d : d + c] = 100 * rank + 10 * j + np.arange(c)
    return data


def reference(rank: int, tables: dict) -> np.ndarray:
    """What ``rank`` must receive, computed from every rank's send buffer."""
    n = len(tables["sendCounts"])
    counts, displs = tables["recvCounts"][rank], tables["rdispls"][rank]
    out = np.zeros(extent(displs, counts), dtype=np.float16)
    for i in range(n):
        s, c = tables["sdispls"][i][rank], tables["sendCounts"][i][rank]
        out[displs[i] : displs[i] + c] = send_data(i, tables)[s : s + c]
    return out


def main() -> list[str]:
    rank, n = hp.get_rank(), hp.get_world_size()
    documented = n == len(UNEVEN["sendCounts"])
    cases = [("equal-count", equal_tables(n, EQUAL_COUNT))] + (
        [("uneven", UNEVEN)] if documented else []
    )
    verdicts = []
    for name, tables in cases:
        expected = reference(rank, tables)
        x, y = on_device(send_data(rank, tables)), zeros(len(expected))
        hp.launch(alltoallv_custom, x, y, None, make_tiling(), tables, block_dim=8)
        verdicts.append(compare(name, y, expected, f"recvCounts {tables['recvCounts'][rank]}"))
    if not documented:
        verdicts.append(skip("uneven", f"the documented tables are for 4 ranks, not {n}"))
    return verdicts


if __name__ == "__main__":
    run_sample(main, platform=PLATFORM)
