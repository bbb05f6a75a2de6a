"""MindSpore's ``mint.distributed.all_gather_into_tensor`` example, on hccl_py.

Run: ``python samples/mindspore_all_gather_into_tensor.py`` (2 emulated ranks, as in
the documentation) or ``python -m hccl_py run -n 4 --backend gloo
samples/mindspore_all_gather_into_tensor.py``. Every rank contributes ``ones([2, 8])``;
every rank receives ``ones([2 * N, 8])``.
"""

import os

import torch
from _common import compare, run_sample

import hccl_py as hp


def main() -> list[str]:
    n = hp.get_world_size()
    input_tensor = torch.ones([2, 8], dtype=torch.float32, device=hp.device())
    output_tensor = torch.zeros([2 * n, 8], dtype=torch.float32, device=hp.device())
    hp.all_gather_into_tensor(output_tensor, input_tensor)
    expected = torch.ones([2 * n, 8]).numpy()
    return [compare("all_gather", output_tensor, expected, f"output {list(output_tensor.shape)}")]


if __name__ == "__main__":
    run_sample(main, world_size=None if os.environ.get(hp.runtime.WORLD_SIZE_ENV) else 2)
