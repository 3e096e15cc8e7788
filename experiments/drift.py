"""Float32 drift of the group-RNN state from its group over long sequences, with and without
``reproject_every`` (issue: foundation, item 6).

    python -m experiments.drift [--steps 10000] [--n 8] [--reproject-every 100]

Writes ``experiments/results/drift/drift.json`` (config, per-group drift curves) and a PNG.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

from manifold_impl.group_rnn import GroupRNN  # noqa: E402
from manifold_impl.groups import GROUPS  # noqa: E402
from reference.config import GroupRNNConfig  # noqa: E402

COMPACT = tuple(name for name, group in GROUPS.items() if group.is_compact)


def unitarity_error(group, states):
    """max |H^H H − I| per time step (``group.distance``). ``states: [B, T, n, n] -> [T]``."""
    return group.distance(states).amax(dim=0)


@torch.no_grad()
def drift_curve(group, n, steps, reproject_every, seed, record_every):
    config = GroupRNNConfig(vocab_size=50, group=group, n=n, embedding_dim=16, reproject_every=reproject_every)
    model = GroupRNN(config, dtype=torch.float32, generator=torch.Generator().manual_seed(seed))
    tokens = torch.from_numpy(np.random.default_rng(seed).integers(0, 50, size=(4, steps)))
    _, cache = model(tokens)
    errors = unitarity_error(model.group, cache.states)
    return [float(errors[t - 1]) for t in range(record_every, steps + 1, record_every)]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.drift", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--reproject-every", type=int, default=100)
    parser.add_argument("--record-every", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/drift"))
    args = parser.parse_args(argv)
    runs = {}
    for group in tqdm(COMPACT, desc="groups"):
        runs[group] = {setting: drift_curve(group, args.n, args.steps, every, args.seed, args.record_every)
                       for setting, every in (("none", None), (f"every_{args.reproject_every}", args.reproject_every))}
    steps = list(range(args.record_every, args.steps + 1, args.record_every))
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"config": {**vars(args), "out": str(args.out), "dtype": "float32", "batch": 4, "embedding_dim": 16},
              "machine": {"torch": torch.__version__, "threads": torch.get_num_threads(),
                          "platform": platform.platform()},
              "steps": steps, "max_unitarity_error": runs}
    (args.out / "drift.json").write_text(json.dumps(record, indent=2))
    figure, axis = plt.subplots(figsize=(7, 4))
    for index, (group, curves) in enumerate(runs.items()):
        for setting, curve in curves.items():
            axis.semilogy(steps, curve, color=f"C{index}", linestyle="-" if setting == "none" else "--",
                          label=f"{group} ({'no reprojection' if setting == 'none' else setting.replace('_', ' ')})")
    axis.set_xlabel("time step")
    axis.set_ylabel("max |HᴴH − I| (float32)")
    axis.set_title(f"State drift from the group, n = {args.n}")
    axis.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(args.out / "drift.png", dpi=120)
    for group, curves in runs.items():
        print(group, {setting: f"{curve[-1]:.2e}" for setting, curve in curves.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
