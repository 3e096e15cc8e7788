"""Group exponential: forward + backward of ``torch.linalg.matrix_exp`` ÷ ours (manifold_impl.linalg.expm),
an information row (no target)."""

from __future__ import annotations

import torch

from experiments.bench.timing import alternate, row
from manifold_impl.groups import get_group
from manifold_impl.linalg import expm


def run(quick=False, device="cpu"):
    rows = []
    for n in (8, 16) if quick else (8, 16, 32):
        group = get_group("O", n)
        a = group.random_algebra((64,), generator=torch.Generator().manual_seed(n), dtype=torch.float32).to(device)
        a.requires_grad_(True)
        weights = torch.randn(64, n, n, generator=torch.Generator().manual_seed(0)).to(device)

        def step(function):
            return lambda: (function(a) * weights).sum().backward()

        times = alternate({"torch": step(torch.linalg.matrix_exp), "ours": step(expm)},
                          repeats=5 if quick else 20, device=device)
        rows.append(row(f"exp O({n}) batch 64 float32 fwd+bwd: matrix_exp / ours", times["torch"] / times["ours"],
                        seconds=times))
    return rows
