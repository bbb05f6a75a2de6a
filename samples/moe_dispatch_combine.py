"""A small mixture-of-experts layer with expert parallelism: dispatch and combine on hccl_py.

Run: ``python samples/moe_dispatch_combine.py`` (4 emulated ranks) or
``python -m hccl_py run -n 4 --backend gloo samples/moe_dispatch_combine.py``.

Every rank (card) holds ``TOKENS`` tokens and ``N_EXPERT`` experts (a linear layer
each); a replicated router picks the top-1 or top-2 experts of every token:

1. route: softmax of ``x @ router``, top-k experts and their gates;
2. dispatch: sort the (token, expert) pairs by expert, count them per expert
   (``local_count``), swap counts with ``alltoall_single`` (``global_count``),
   then ``global_scatter`` the rows to the experts' cards;
3. experts: each local expert applies its linear layer to its rows;
4. combine: ``global_gather`` the results back and sum them per token, weighted
   by the gates;
5. backward: gradients flow back through global_gather and global_scatter; the
   replicated router's gradient is summed with ``all_reduce``.

Every rank checks its output and every gradient against a single-process
dense reference that evaluates all experts of all tokens directly, and prints
one line per case: the largest error of each result and how many rows its
experts served.
"""

import os

import torch
from _common import run_sample, verdict

import hccl_py as hp

D_MODEL = 8
N_EXPERT = 2  # experts per card
TOKENS = 6  # tokens per card
SEED = 2024
ATOL = 1e-4


def parameters(n_cards: int) -> dict[str, torch.Tensor]:
    """Every card's tokens and loss weights, the router and all experts (same on every rank)."""
    gen = torch.Generator().manual_seed(SEED)
    experts = n_cards * N_EXPERT

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float32)

    return {
        "x": draw(n_cards, TOKENS, D_MODEL),
        "target": draw(n_cards, TOKENS, D_MODEL),
        "router": draw(D_MODEL, experts),
        "weight": draw(experts, D_MODEL, D_MODEL) / D_MODEL**0.5,
        "bias": draw(experts, D_MODEL),
    }


def route(x: torch.Tensor, router: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k experts of every token and their gates (renormalised over the k chosen)."""
    probs = torch.softmax(x @ router, dim=-1)
    gates, experts = probs.topk(top_k, dim=-1)
    return gates / gates.sum(-1, keepdim=True), experts


def reference(p: dict[str, torch.Tensor], top_k: int) -> dict[str, torch.Tensor]:
    """Single process, dense: every token times its chosen experts' weights, then all gradients."""
    leaves = {k: p[k].clone().requires_grad_(True) for k in ("x", "router", "weight", "bias")}
    gates, experts = route(leaves["x"], leaves["router"], top_k)
    w, b = leaves["weight"][experts], leaves["bias"][experts]  # (cards, tokens, k, d, d)
    y = torch.einsum("ctk,ctkd->ctd", gates, torch.einsum("ctm,ctkmd->ctkd", leaves["x"], w) + b)
    (y * p["target"]).sum().backward()
    return {"y": y.detach(), **{f"grad_{k}": v.grad for k, v in leaves.items()}}


def moe_layer(
    x: torch.Tensor, router: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, top_k: int
) -> tuple[torch.Tensor, int]:
    """The expert-parallel layer on this card; returns its output and how many rows it served."""
    n = hp.get_world_size()
    gates, experts = route(x, router, top_k)
    flat_expert = experts.reshape(-1)
    order = torch.argsort(flat_expert, stable=True)
    token = torch.arange(x.shape[0]).repeat_interleave(top_k)[order]
    local_count = torch.bincount(flat_expert, minlength=n * N_EXPERT).to(torch.int64)
    global_count = torch.empty_like(local_count)
    hp.alltoall_single(local_count, global_count)
    rows = hp.global_scatter(x[token], local_count, global_count)
    per_expert = global_count.view(n, N_EXPERT).sum(0).tolist()
    outputs = [block @ weight[e] + bias[e] for e, block in enumerate(torch.split(rows, per_expert))]
    combined = hp.global_gather(torch.cat(outputs), local_count, global_count)
    weighted = combined * gates.reshape(-1)[order].unsqueeze(1)
    return torch.zeros_like(x).index_add(0, token, weighted), rows.shape[0]


def max_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest absolute difference between a result and its reference."""
    return (got.detach().cpu() - want).abs().max().item()


def run_case(top_k: int) -> str:
    """One forward and backward pass; a verdict line with the worst error of each result."""
    rank, n = hp.get_rank(), hp.get_world_size()
    p = parameters(n)
    mine = slice(rank * N_EXPERT, (rank + 1) * N_EXPERT)
    x = p["x"][rank].clone().requires_grad_(True)
    router = p["router"].clone().requires_grad_(True)
    weight = p["weight"][mine].clone().requires_grad_(True)
    bias = p["bias"][mine].clone().requires_grad_(True)
    y, served = moe_layer(x, router, weight, bias, top_k)
    (y * p["target"][rank]).sum().backward()
    hp.all_reduce(router.grad)
    ref = reference(p, top_k)
    errors = {
        "y": max_error(y, ref["y"][rank]),
        "dx": max_error(x.grad, ref["grad_x"][rank]),
        "dW": max_error(weight.grad, ref["grad_weight"][mine]),
        "db": max_error(bias.grad, ref["grad_bias"][mine]),
        "drouter": max_error(router.grad, ref["grad_router"]),
    }
    detail = ", ".join(f"{k} {v:.0e}" for k, v in errors.items())
    return verdict(
        f"top{top_k}",
        max(errors.values()) <= ATOL,
        f"max |error| {detail}; experts {mine.start}-{mine.stop - 1} served {served} rows",
    )


def main() -> list[str]:
    return [run_case(1), run_case(2)]


if __name__ == "__main__":
    # its backward passes wait for the other ranks: the emulator runs ranks as threads for it
    os.environ.setdefault("HCCL_PY_EMU_RUNNERS", "threads")
    run_sample(main)
