"""``python -m experiments.bench.compile_probe``: would ``torch.compile`` speed up the exponential?

A sync-free copy of ``manifold_impl.linalg.expm``'s float32 scheme (the degree-12 Taylor
polynomial, one fixed s for the whole batch, passed as a constant so the graph has no data-
dependent branch; backward derived by AOTAutograd) is compiled and timed forward + backward
against ``torch.linalg.matrix_exp`` and our eager ``expm``, batch 64, float32, n ∈ {8, 16, 32},
alternating in one process. Saves ``--out``/``compile_probe.json``
(``compile_probe_quick.json`` with ``--quick``). A probe, not a
library path: the fixed s makes it exact only for the batch it was chosen for.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from experiments.bench.timing import alternate, save_record
from experiments.cli import CommandParser
from manifold_impl.groups import get_group
from manifold_impl.linalg import _THETA, _coefficients, _norms, expm


def _taylor12_fixed(a, squarings: int):
    """exp(a) for ``a: [N, n, n]`` float32 with the same s for every matrix (no host sync): the
    scheme of ``manifold_impl.linalg._TaylorExp`` (its float32 table, Y = T − I and its squarings)."""
    combination, identity, (c, d0) = _coefficients(a.dtype, a.device)
    table = torch.cat([identity[:, None], combination], dim=1)
    b = a * 2.0 ** -squarings
    square = b @ b
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    powers = torch.stack([eye.expand_as(b), b, square, square @ b])
    left, right, addend, outer, shift = torch.einsum("ij,j...->i...", table, powers).unbind()
    inner = left @ right + addend
    shifted = shift + inner
    increment = outer + c * inner + d0 * shifted + shifted @ inner
    for _ in range(squarings):
        increment = 2 * increment + increment @ increment
    return eye + increment


def run(sizes=(8, 16, 32), repeats=30):
    compiled = torch.compile(_taylor12_fixed, dynamic=False)
    rows = []
    for n in sizes:
        a = get_group("O", n).random_algebra((64,), generator=torch.Generator().manual_seed(n), dtype=torch.float32)
        square = a @ a  # the batch's largest s of expm's own rule, α = max(‖a²‖^{1/2}, ‖a³‖^{1/3})
        alpha = torch.maximum(_norms(square).sqrt(), _norms(square @ a).pow(1 / 3)).max()
        squarings = max(0, int(torch.ceil(torch.log2(alpha / _THETA[torch.float32]))))
        a.requires_grad_(True)
        weights = torch.randn(64, n, n, generator=torch.Generator().manual_seed(0))

        def step(function):
            return lambda: (function(a) * weights).sum().backward()

        start = time.perf_counter()
        step(lambda x: compiled(x, squarings))()
        compile_seconds = time.perf_counter() - start
        error = (compiled(a, squarings) - torch.linalg.matrix_exp(a)).abs().max().item()
        times = alternate({"matrix_exp": step(torch.linalg.matrix_exp), "ours": step(expm),
                           "compiled": step(lambda x: compiled(x, squarings))}, repeats=repeats)
        rows.append({"n": n, "squarings": squarings, "compile_seconds": compile_seconds, "max_error": error,
                     "seconds": times, "matrix_exp_over_ours": times["matrix_exp"] / times["ours"],
                     "matrix_exp_over_compiled": times["matrix_exp"] / times["compiled"]})
        print(f"O({n}): matrix_exp ÷ ours {rows[-1]['matrix_exp_over_ours']:.2f}, matrix_exp ÷ compiled "
              f"{rows[-1]['matrix_exp_over_compiled']:.2f} (compile {compile_seconds:.1f} s, error {error:.1e})",
              flush=True)
    return rows


def main(argv=None):
    parser = CommandParser("experiments.bench.compile_probe", __doc__)
    parser.add_argument("--quick", action="store_true", help="n = 4 only, few repetitions (smoke test)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"),
                        help="the directory of the results (the committed ones: experiments/results/bench)")
    args = parser.parse_args(argv)
    rows = run(sizes=(4,), repeats=2) if args.quick else run()
    path = save_record(args.out / ("compile_probe_quick.json" if args.quick else "compile_probe.json"),
                       {"quick": args.quick, "rows": rows})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
