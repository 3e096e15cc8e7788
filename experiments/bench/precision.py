"""``python -m experiments.bench.precision``: bfloat16 autocast (``train --precision bf16``) against
float32, on the CPU.

Three kinds of row, each pair measured in one process:
- training tokens/s, bf16 ÷ float32: the training step as ``experiments.train`` runs it
  (``loop.Run``: forward under autocast, backward, clipping, the optimizers), the two precisions
  timed alternately, for every model at a small size;
- validation bits after the same steps, bf16 − float32: each model trained both ways
  (``loop.run``; Tiny Shakespeare, read through ``GROUPSTATE_DATA_DIR``) at ``LR``, or at its own
  rate where it diverges there (the group RNN: 1e-3);
- the state's drift at step 10,000: max |HᴴH − I| of a float32 group RNN's state run over 10,000
  tokens (``experiments.studies.drift``'s curve) under bf16 autocast and without it, against the
  float32 membership tolerance.

Saves ``--out``/``precision.json`` (``precision_quick.json`` with ``--quick``: 2 steps, 200 tokens).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from experiments.bench.timing import alternate, row, save_record
from experiments.cli import CommandParser
from experiments.studies.drift.curves import drift_curve
from experiments.training import loop
from experiments.training.config import build_config
from experiments.training.precision import Precision
from manifold_impl.linalg import default_atol

LR = 3e-3  # every model's rate, but where its options in MODELS set "lr"
MODELS = {  # name -> (model, options): small models, 25k to 125k parameters
    "group RNN O(16)": ("group_rnn", {"group": "O", "n": 16, "embedding_dim": 64, "lr": 1e-3}),  # diverges at 3e-3
    "LSTM": ("lstm", {"hidden_size": 96}),
    "expRNN": ("exprnn", {"hidden_size": 128}),
    "GPT": ("gpt", {"width": 64, "num_heads": 4, "num_layers": 2}),
    "mLSTM (NS read)": ("mlstm", {"embedding_dim": 64, "num_heads": 4, "read": "ns"}),
    "group Transformer O(8)": ("group_transformer", {"n": 8, "num_heads": 4, "num_layers": 2}),
}
DRIFT_GROUP, DRIFT_N = "O", 8


def _config(model, options, precision, steps, batch, length):
    return build_config(model, "lm", {"dataset": "tinyshakespeare", "steps": steps, "batch": batch, "length": length,
                                      "eval_every": steps, "checkpoint_every": steps, "eval_tokens": 8192,
                                      "lr": LR, "warmup": min(10, steps - 1), **options, "precision": precision})


def _training_step(config, directory):
    """A zero-argument callable: one training step of a fresh ``loop.Run`` of ``config``, on batches
    drawn as the run draws them."""
    run = loop.Run(directory, config)

    def step():
        inputs, targets = run.task.train_batch(run.rng, config.train.batch, run.step)
        run.backward(inputs, targets)
        run.update()

    return step


def speed_rows(quick, root):
    batch, length, repeats = (4, 16, 2) if quick else (32, 128, 7)
    rows = []
    for name, (model, options) in MODELS.items():
        steps = {precision: _training_step(_config(model, options, precision, 10, batch, length), root / precision)
                 for precision in ("float32", "bf16")}
        times = alternate(steps, repeats=repeats)
        rows.append(row(f"{name} training tokens/s, bf16 / float32 (batch {batch} x {length})",
                        times["float32"] / times["bf16"], seconds=times))
        print(f"{rows[-1]['name']}: {rows[-1]['ratio']:.2f}", flush=True)
    return rows


def bits_rows(quick, root):
    steps, batch, length = (2, 4, 16) if quick else (300, 16, 128)
    rows = []
    for name, (model, options) in MODELS.items():
        configs = {precision: _config(model, options, precision, steps, batch, length) for precision in ("float32", "bf16")}
        bits = {precision: loop.run(config, root / f"{model}-{precision}")["valid_bits"] for precision, config in configs.items()}
        lr = configs["float32"].train.lr
        rows.append(row(f"{name} validation bits after {steps} steps at lr {lr:g}, bf16 - float32 "
                        f"(batch {batch} x {length})", bits["bf16"] - bits["float32"], valid_bits=bits, lr=lr))
        print(f"{rows[-1]['name']}: {bits}", flush=True)
    return rows


def drift_rows(quick):
    steps = 200 if quick else 10_000
    drift = {}
    for precision in ("float32", "bf16"):
        with Precision(precision, "cpu").autocast():
            drift[precision] = drift_curve(DRIFT_GROUP, DRIFT_N, steps, seed=0, record_every=steps)[-1]
    tolerance = default_atol(torch.float32, DRIFT_N)
    return [row(f"group RNN {DRIFT_GROUP}({DRIFT_N}) state drift max |H^H H - I| at step {steps:,} (loop), "
                "bf16 autocast / float32", drift["bf16"] / drift["float32"], drift=drift, tolerance=tolerance,
                within_tolerance=max(drift.values()) <= tolerance)]


def main(argv=None):
    parser = CommandParser("experiments.bench.precision", __doc__)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 2 training steps, 200 tokens of drift")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"),
                        help="the directory of the results (the committed ones: experiments/results/bench)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        rows = [*speed_rows(args.quick, root / "speed"), *bits_rows(args.quick, root / "bits"), *drift_rows(args.quick)]
    for result in rows:
        print(f"info {result['ratio']:8.3g}  {result['name']}", flush=True)
    path = save_record(args.out / ("precision_quick.json" if args.quick else "precision.json"),
                       {"quick": args.quick, "seconds": time.perf_counter() - start, "rows": rows})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
