"""Memory of the group recurrence at growing lengths: keeping every state for the backward pass
(``loop``, ``fused``) against rebuilding them in reverse (``fused`` with ``keep_state_every``), the
float32 gradient error of the rebuilding mode, and the peak of a training step of the Transformers
and the mLSTM with and without ``--checkpoint-activations`` (``ACTIVATION_MODELS``, batch 2).

    python -m experiments.bench.memory [--quick] [--out DIR]   # -> DIR/memory.json (default runs/bench)

Each measurement runs in a fresh process on one CPU thread. For the cell (O(16), batch 8, loss
Σ_t ‖H_t‖²): ``held``, the bytes of the tensors autograd saves for the backward, counted once per
storage and without the parameters, the input and the output (the allocator's cache does not enter
it), and ``peak``, the high-water mark of the pass in Linux's /proc/self/status over the resident size
after a short warm-up (its output and the gradients are O(T) whatever the mode); for a training step
(cross-entropy on random tokens) its ``peak``. The gradient error is max |g₃₂ − g₆₄| / max |g₆₄|
over all parameters, float64 keeping every state.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import torch

from experiments.bench.timing import save_record
from experiments.cli import CommandParser
from experiments.models import MODEL_CONFIGS, build_model, checkpoint_activations
from manifold_impl.losses import cross_entropy
from manifold_impl.group_rnn import GroupRNN
from reference.config import GroupRNNConfig

CONFIG = GroupRNNConfig(vocab_size=16, group="O", n=16, embedding_dim=32)
BATCH, KEEP_STATE_EVERY = 8, 64
MODES = {"loop": {"recurrence": "loop"}, "fused": {},
         f"fused, keep_state_every={KEEP_STATE_EVERY}": {"keep_state_every": KEEP_STATE_EVERY}}


def _resident():
    """(current, peak) resident bytes of this process."""
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return tuple(int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM"))


def _storage(tensor):
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def measure(config, length, seed=0):
    """``{held, peak}`` bytes of one forward and backward pass of ``config``'s cell (this process)."""
    torch.set_num_threads(1)
    model = GroupRNN(config, generator=torch.Generator().manual_seed(seed))
    embedded = torch.randn(BATCH, length, config.embedding_dim, generator=torch.Generator().manual_seed(seed),
                           requires_grad=True)
    initial = model.cell.initial_state.expand(BATCH, -1, -1)
    model.cell(embedded[:, :8], initial).square().sum().backward()  # warm-up: kernels, allocator
    saved = set()

    def keep(tensor):
        saved.add(_storage(tensor))
        return tensor

    before, _ = _resident()
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        states = model.cell(embedded, initial)
    outside = {_storage(tensor) for tensor in (embedded, initial, states, *model.parameters())}
    held = sum(size for _, size in saved - outside)
    states.square().sum().backward()
    _, peak = _resident()
    return {"held": held, "peak": peak - before}


ACTIVATION_BATCH = 2
ACTIVATION_MODELS = {  # name -> (model, options), at batch ACTIVATION_BATCH
    "GPT": ("gpt", {"width": 64, "num_heads": 4, "num_layers": 4, "max_length": 4096}),
    "group Transformer O(8)": ("group_transformer", {"group": "O", "n": 8, "num_heads": 2, "num_layers": 2}),
    "mLSTM (plain read)": ("mlstm", {"embedding_dim": 64, "num_heads": 4, "read": "plain"}),
    "mLSTM (NS read)": ("mlstm", {"embedding_dim": 64, "num_heads": 4, "read": "ns"}),
}


def measure_training_step(name, length, checkpointed, seed=0):
    """``{peak}`` bytes of one training step's forward and backward pass of ``ACTIVATION_MODELS[name]``
    at ``length`` (this process), with ``checkpoint_activations`` or without."""
    torch.set_num_threads(1)
    model_name, options = ACTIVATION_MODELS[name]
    model = build_model(MODEL_CONFIGS[model_name](vocab_size=65, **options), generator=torch.Generator().manual_seed(seed))
    if checkpointed:
        checkpoint_activations(model)
    tokens = torch.randint(0, 65, (ACTIVATION_BATCH, length + 1), generator=torch.Generator().manual_seed(seed))

    def step(tokens):
        logits, _ = model(tokens[:, :-1])
        cross_entropy(logits, tokens[:, 1:]).backward()

    step(tokens[:, :17])  # warm-up: kernels, allocator, the gradients' storage
    before, _ = _resident()
    step(tokens)
    _, peak = _resident()
    return {"peak": peak - before}


def activation_rows(lengths):
    """One row per (model, length, checkpointing), each measured in a fresh process."""
    rows = []
    for name in ACTIVATION_MODELS:
        for length in lengths:
            for checkpointed in (False, True):
                out = subprocess.run([sys.executable, "-m", "experiments.bench.memory", "--activation-child", name,
                                      str(length), str(checkpointed)], capture_output=True, text=True, check=True).stdout
                rows.append({"model": name, "length": length, "checkpoint_activations": checkpointed,
                             "batch": ACTIVATION_BATCH, **json.loads(out)})
                print(f"{name:24} T={length:5} checkpoint_activations={checkpointed!s:5}  "
                      f"peak {rows[-1]['peak'] / 2**20:8.1f} MiB", flush=True)
    return rows


def gradient_error(config, length, seed=0):
    """max |g₃₂ − g₆₄| / max |g₆₄| over the parameters, for ``config`` run in float32, against
    float64 keeping every state; one batch of random tokens, the loss Σ logits²/V."""
    tokens = torch.randint(0, config.vocab_size, (BATCH, length), generator=torch.Generator().manual_seed(seed))
    truth_model = GroupRNN(dataclasses.replace(config, keep_state_every=None), dtype=torch.float64,
                           generator=torch.Generator().manual_seed(seed))

    def grads(model):
        logits, _ = model(tokens)
        return torch.autograd.grad(logits.square().mean(), list(model.parameters()))

    model = GroupRNN(config, dtype=torch.float32)
    model.load_state_dict(truth_model.state_dict())
    truth, got = grads(truth_model), grads(model)
    scale = max(g.abs().max().item() for g in truth)
    return max((a.double() - b).abs().max().item() for a, b in zip(got, truth)) / scale


def _child(mode, length, recurrent):
    config = dataclasses.replace(CONFIG, recurrent=recurrent, **MODES[mode])
    print(json.dumps(measure(config, length)))


def run(quick=False):
    lengths = (64, 256) if quick else (256, 1024, 4096)
    rows = []
    for recurrent in (True, False):
        for mode in MODES:
            if mode == "loop" and not recurrent:
                continue
            for length in lengths:
                out = subprocess.run([sys.executable, "-m", "experiments.bench.memory", "--child", mode, str(length),
                                      str(recurrent)], capture_output=True, text=True, check=True).stdout
                rows.append({"recurrent": recurrent, "mode": mode, "length": length, **json.loads(out)})
                print(f"{'recurrent' if recurrent else 'input-driven':12} {mode:30} T={length:5}  "
                      f"held {rows[-1]['held'] / 2**20:8.1f} MiB  peak {rows[-1]['peak'] / 2**20:8.1f} MiB",
                      flush=True)
    for length in lengths[-2:]:
        for name, options in (("fused", {}), (f"fused, keep_state_every={KEEP_STATE_EVERY}", MODES[
                f"fused, keep_state_every={KEEP_STATE_EVERY}"])):
            error = gradient_error(dataclasses.replace(CONFIG, **options), length)
            rows.append({"mode": name, "length": length, "float32_gradient_error": error})
            print(f"float32 gradient error vs float64, {name:30} T={length:5}  {error:.2e}", flush=True)
    return rows + activation_rows(lengths)


def main(argv=None):
    parser = CommandParser("experiments.bench.memory", __doc__)
    parser.add_argument("--quick", action="store_true", help="short lengths (a smoke test)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"),
                        help="the directory of the results (the committed ones: experiments/results/bench)")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "LENGTH", "RECURRENT"), help=argparse.SUPPRESS)
    parser.add_argument("--activation-child", nargs=3, metavar=("MODEL", "LENGTH", "CHECKPOINTED"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.activation_child:
        name, length, checkpointed = args.activation_child
        print(json.dumps(measure_training_step(name, int(length), checkpointed == "True")))
    elif args.child:
        mode, length, recurrent = args.child
        _child(mode, int(length), recurrent == "True")
    else:
        rows = run(args.quick)
        path = save_record(args.out / ("memory_quick.json" if args.quick else "memory.json"),
                           {"config": dataclasses.asdict(CONFIG), "batch": BATCH, "rows": rows})
        print(f"saved {path}")


if __name__ == "__main__":
    main()
