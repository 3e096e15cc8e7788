"""Float32 drift of the group-RNN state from its group over 10,000 steps: the step loop with and
without ``reproject_every``, and the associative scan on a 50-token and a 10,000-token vocabulary,
for every compact group. Writes ``drift.json`` (config, per-group curves) and ``drift.png``.

    python -m experiments.studies.drift.curves [--steps 10000] [--n 8] [--reproject-every 100]

Why two vocabularies, and what the curves show: experiments/studies/drift/README.md.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from experiments.analysis.plotting import plt
from experiments.cli import CommandParser
from manifold_impl.group_rnn import GroupRNN
from manifold_impl.groups import GROUPS
from reference.config import GroupRNNConfig

COMPACT = tuple(name for name, group in GROUPS.items() if group.is_compact)


def unitarity_error(group, states):
    """max |H^H H − I| per time step (``group.distance``). ``states: [B, T, n, n] -> [T]``."""
    return group.distance(states).amax(dim=0)


@torch.no_grad()
def drift_curve(group, n, steps, seed, record_every, reproject_every=None, recurrent=True, vocab_size=50,
                chunk=None):
    """max|HᴴH − I| of a float32 batch of 4 at steps record_every, 2·record_every, .., steps.

    With ``chunk`` the sequence runs in chunks of that many steps, each from the last state (the
    loop is the same either way; the scan runs per chunk), so the logits stay 4 × chunk × V; each
    chunk's initial state must then pass the model's membership check (float32: 9.5e-5).
    """
    chunk = chunk or steps
    scan = {} if recurrent else {"recurrence": "scan"}  # recurrent=False alone now runs the fused loop
    config = GroupRNNConfig(vocab_size=vocab_size, group=group, n=n, embedding_dim=16, recurrent=recurrent,
                            reproject_every=reproject_every, **scan)
    model = GroupRNN(config, dtype=torch.float32, generator=torch.Generator().manual_seed(seed))
    tokens = torch.from_numpy(np.random.default_rng(seed).integers(0, vocab_size, size=(4, steps)))
    errors, cache = [], None
    for start in range(0, steps, chunk):
        _, cache = model(tokens[:, start:start + chunk], cache=cache)
        errors.append(unitarity_error(model.group, cache.states))
    errors = torch.cat(errors)
    return [float(errors[t - 1]) for t in range(record_every, steps + 1, record_every)]


def settings(reproject_every):
    """The runs per group: the loop with and without reprojection, the scan on both vocabularies."""
    return {"none": {}, f"every_{reproject_every}": {"reproject_every": reproject_every},
            "scan": {"recurrent": False},
            "scan_vocab10000": {"recurrent": False, "vocab_size": 10_000, "chunk": 1000}}


def plot(runs, steps, args, path):
    """Two panels: the loop (with and without reprojection) and the scan (both vocabularies)."""
    figure, (loop, scan) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    panels = {"none": (loop, "-"), f"every_{args.reproject_every}": (loop, "--"), "scan": (scan, "-"),
              "scan_vocab10000": (scan, "--")}
    names = {"none": "no reprojection", f"every_{args.reproject_every}": f"reprojected every {args.reproject_every}",
             "scan": "50 tokens", "scan_vocab10000": "10,000 tokens"}
    for index, (group, curves) in enumerate(runs.items()):
        for setting, curve in curves.items():
            axis, style = panels[setting]
            axis.semilogy(steps, curve, color=f"C{index}", linestyle=style, label=f"{group} ({names[setting]})")
    loop.set(xlabel="time step", ylabel="max |HᴴH − I| (float32)", title=f"step loop (recurrent), n = {args.n}")
    scan.set(xlabel="time step", title=f"associative scan (recurrent=False), n = {args.n}")
    for axis in (loop, scan):
        axis.legend(fontsize=6, ncol=2)
        axis.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None):
    parser = CommandParser("experiments.studies.drift.curves", __doc__)
    parser.add_argument("--steps", type=int, default=10_000, help="steps of each curve")
    parser.add_argument("--n", type=int, default=8, help="the state size of every group")
    parser.add_argument("--reproject-every", type=int, default=100, help="k of the re-projected curve")
    parser.add_argument("--record-every", type=int, default=500, help="steps between recorded points")
    parser.add_argument("--seed", type=int, default=0, help="seeds the models and their inputs")
    parser.add_argument("--out", type=Path, default=Path("runs/drift"),
                        help="the directory of drift.json and drift.png (the committed ones: experiments/results/drift)")
    args = parser.parse_args(argv)
    runs = {}
    for group in tqdm(COMPACT, desc="groups"):
        runs[group] = {setting: drift_curve(group, args.n, args.steps, args.seed, args.record_every, **options)
                       for setting, options in settings(args.reproject_every).items()}
    steps = list(range(args.record_every, args.steps + 1, args.record_every))
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"config": {**vars(args), "out": str(args.out), "dtype": "float32", "batch": 4, "embedding_dim": 16},
              "machine": {"torch": torch.__version__, "threads": torch.get_num_threads(),
                          "platform": platform.platform()},
              "settings": settings(args.reproject_every), "steps": steps, "max_unitarity_error": runs}
    (args.out / "drift.json").write_text(json.dumps(record, indent=2))
    plot(runs, steps, args, args.out / "drift.png")
    for group, curves in runs.items():
        print(group, {setting: f"{curve[-1]:.2e}" for setting, curve in curves.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
