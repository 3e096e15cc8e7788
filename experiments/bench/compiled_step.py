"""``python -m experiments.bench.compiled_step``: the group RNN's training step compiled, against eager.

O(24) (embedding 64, as in the bench's row) at batch 32 × 128 on one CPU thread: the eager step, the
step as ``train --compile inductor`` runs it (the fused recurrence's per-step functions compiled by
``GroupRNNCell.compile_steps``, the forward pass and loss around it by ``torch.compile``), and the
parameter-matched LSTM, alternating in one process after the compiled one's first call (the compile
seconds are reported). Saves ``--out``/``compiled_step.json`` (``compiled_step_quick.json`` with
``--quick``: O(4), 4 × 4, aot_eager).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from experiments.bench.group_rnn import matched_contenders
from experiments.bench.timing import alternate, row, save_record
from experiments.cli import CommandParser
from manifold_impl.group_rnn import GroupRNN
from manifold_impl.losses import cross_entropy
from manifold_impl.optim import RiemannianAdam
from reference.config import GroupRNNConfig

TARGET = 0.35  # compiled O(24) tokens/s ÷ the matched LSTM's on one CPU thread


def compiled_step(config, tokens, backend, device="cpu"):
    """A zero-argument callable: one training step of a fresh group RNN on ``device`` compiled as
    ``train --compile`` compiles it, with ``backend`` (``tokens`` on that device)."""
    model = GroupRNN(config, device=device, generator=torch.Generator().manual_seed(0))
    model.cell.compile_steps(backend)
    optimizer = RiemannianAdam(model.parameters(), lr=1e-3)

    def loss_of(tokens):
        logits, _ = model(tokens[:, :-1])
        return cross_entropy(logits, tokens[:, 1:])

    loss_of = torch.compile(loss_of, backend=backend)

    def step():
        loss = loss_of(tokens)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def run(quick=False, repeats=5):
    n, embedding, batch, length = (4, 8, 4, 4) if quick else (24, 64, 32, 128)
    backend = "aot_eager" if quick else "inductor"
    config = GroupRNNConfig(vocab_size=65, group="O", n=n, embedding_dim=embedding)
    contenders, lstm = matched_contenders(config, batch, length, "cpu")
    tokens = torch.randint(0, config.vocab_size, (batch, length + 1), generator=torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    contenders[backend] = compiled_step(config, tokens, backend)
    start = time.perf_counter()
    contenders[backend]()  # the first call compiles, forward and backward
    compile_seconds = time.perf_counter() - start
    print(f"{backend}: compiled in {compile_seconds:.1f} s", flush=True)
    times = alternate(contenders, repeats=2 if quick else repeats)
    shape = f"O({n}), batch {batch}, length {length}"
    details = {"seconds": times, "compile_seconds": compile_seconds, "lstm_hidden": lstm.hidden_size}
    return [row(f"group RNN training step tokens/s, eager / matched LSTM ({shape})",
                times["lstm"] / times["group_rnn"], **details),
            row(f"group RNN training step tokens/s, compiled ({backend}) / eager ({shape})",
                times["group_rnn"] / times[backend], **details),
            row(f"group RNN training step tokens/s, compiled ({backend}) / matched LSTM ({shape})",
                times["lstm"] / times[backend], *((">=", TARGET) if not quick else ()), **details)]


def main(argv=None):
    parser = CommandParser("experiments.bench.compiled_step", __doc__)
    parser.add_argument("--quick", action="store_true", help="O(4), 4 × 4, aot_eager only (smoke test)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"),
                        help="the directory of the results (the committed ones: experiments/results/bench)")
    args = parser.parse_args(argv)
    start, threads = time.perf_counter(), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = run(quick=args.quick)
    finally:
        torch.set_num_threads(threads)
    for result in rows:
        verdict = "info" if result["met"] is None else ("met " if result["met"] else "MISS")
        print(f"{verdict} {result['ratio']:8.2f}  {result['name']}", flush=True)
    path = save_record(args.out / ("compiled_step_quick.json" if args.quick else "compiled_step.json"),
                       {"quick": args.quick, "seconds": time.perf_counter() - start, "rows": rows})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
