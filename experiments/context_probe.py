"""How much of the recent context a trained language model's readout can see, linearly.

``python -m experiments.context_probe DIR [DIR ...] --out OUT`` takes finished runs of a character
LM (the v2 study's ``<arm>-seed<k>`` directories, each with ``best.pt``) and asks of each: at
position t of a validation window, which earlier character x_{t−k} can a linear map read from the
vector the model's readout reads, z_t?

- group RNN: z_t = features(H_t) (the readout's input: n² reals for O(n), 2n for T, k·b² for BO);
- LSTM: z_t = h_t (the head's input).

For each lag k = 0 … ``LAGS`` − 1 a ridge regression from the standardized z_t onto the one-hot of
x_{t−k} is fitted on half of ``WINDOWS`` random validation windows (positions t ≥ ``BURN_IN`` of
``LENGTH``, so that the state has seen enough context) and scored on the other half as the accuracy
of its arg-max: a **linear context probe**. Lag 0 is the token just read; the next character
depends mostly on the last few, so a readout that can linearly see only x_t is a bigram model. The
level to beat is the most frequent character's share. Writes ``OUT/context_probe.json`` (accuracy
per run and lag, the runs' arms and test bits) and ``OUT/context_probe.png`` (mean over each arm's
seeds).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from experiments.baselines import LSTMLanguageModel  # noqa: E402
from experiments.datasets import load_dataset  # noqa: E402
from experiments.models import build_model  # noqa: E402
from experiments.sweep_run import arm_of  # noqa: E402
from experiments.train import RunConfig, load_checkpoint_file  # noqa: E402
from manifold_impl.group_rnn import GroupRNN  # noqa: E402

LAGS = 8
WINDOWS = 256
LENGTH = 128
BURN_IN = 32
RIDGE = 1e-2
SEED = 0


@torch.no_grad()
def readout_inputs(model, tokens):
    """``[B, T, D]`` z_t, the vector each position's logits are a linear function of (float64)."""
    if isinstance(model, GroupRNN):
        _, cache = model(tokens)
        return model.group.packed_features(cache.packed_states).double()
    if isinstance(model, LSTMLanguageModel):
        hidden, _ = model.lstm(model.embedding(tokens))
        return hidden.double()
    raise TypeError(f"the context probe reads group RNNs and LSTMs, not {type(model).__name__}")


def probe_accuracy(features, targets, vocab_size, ridge=RIDGE):
    """Held-out accuracy of the ridge map from ``features`` [N, D] to the one-hot of ``targets`` [N]:
    W = argmin ‖[Z 1] W − Y‖² + ridge·N‖W‖² on the first half (Z standardized by that half), the
    arg-max of [Z 1] W scored on the second half."""
    features, targets = np.asarray(features, dtype=float), np.asarray(targets)
    if features.ndim != 2 or targets.shape != features.shape[:1]:
        raise ValueError(f"features [N, D] and targets [N] expected, got {features.shape} and {targets.shape}")
    half = len(targets) // 2
    if half == 0:
        raise ValueError("the probe needs at least two samples")
    mean, scale = features[:half].mean(0), features[:half].std(0) + 1e-8
    design = np.hstack([(features - mean) / scale, np.ones((len(targets), 1))])
    onehot = np.eye(vocab_size)[targets[:half]]
    fit = design[:half]
    weights = np.linalg.solve(fit.T @ fit + ridge * half * np.eye(design.shape[1]), fit.T @ onehot)
    return float(((design[half:] @ weights).argmax(1) == targets[half:]).mean())


def probe_run(directory, lags=LAGS, windows=WINDOWS, length=LENGTH, burn_in=BURN_IN, seed=SEED):
    """``[lags]`` context-probe accuracy of the best-validation model of the run in ``directory``,
    and the validation split's most-frequent-character share on the probed positions."""
    directory = Path(directory)
    config = RunConfig.from_json(json.loads((directory / "config.json").read_text()))
    model = build_model(config.model)
    model.load_state_dict(load_checkpoint_file(directory / "best.pt", "cpu")["model"])
    model.eval()
    stream = load_dataset(config.task.dataset).streams["valid"]
    starts = np.random.default_rng(seed).integers(0, len(stream) - length, size=windows)
    tokens = np.stack([stream[s:s + length] for s in starts])
    features = readout_inputs(model, torch.from_numpy(tokens)).numpy()[:, burn_in:]  # [B, T', D]
    flat = features.reshape(-1, features.shape[-1])
    vocab = config.model.vocab_size
    accuracy = [probe_accuracy(flat, tokens[:, burn_in - lag:length - lag].reshape(-1), vocab) for lag in range(lags)]
    majority = float(np.bincount(tokens[:, burn_in:].reshape(-1), minlength=vocab).max() / flat.shape[0])
    return accuracy, majority


def probe(directories, out):
    """Probe every run of ``directories``; write ``out/context_probe.json`` and ``.png``; returns the record."""
    out, directories = Path(out), [Path(d) for d in directories]
    unfinished = [str(d) for d in directories if not ((d / "final.json").exists() and (d / "best.pt").exists())]
    if unfinished:
        raise ValueError(f"the context probe reads finished runs with their best.pt; these are not: {unfinished}")
    out.mkdir(parents=True, exist_ok=True)
    runs, majority = {}, None
    for directory in directories:
        accuracy, majority = probe_run(directory)
        final = json.loads((directory / "final.json").read_text())
        runs[directory.name] = {"arm": arm_of(directory.name), "accuracy": accuracy,
                                "test_bits": final["test_bits_per_token"]}
    record = {"lags": LAGS, "windows": WINDOWS, "length": LENGTH, "burn_in": BURN_IN, "ridge": RIDGE,
              "majority": majority, "runs": runs}
    (out / "context_probe.json").write_text(json.dumps(record, indent=1))
    figure, axis = plt.subplots(figsize=(7, 4))
    for arm in dict.fromkeys(run["arm"] for run in runs.values()):
        curves = np.array([run["accuracy"] for run in runs.values() if run["arm"] == arm])
        bits = np.mean([run["test_bits"] for run in runs.values() if run["arm"] == arm])
        axis.plot(range(LAGS), curves.mean(0), marker="o", label=f"{arm} ({len(curves)} seeds, test {bits:.2f} bits)")
    axis.axhline(majority, color="gray", linestyle=":", label="most frequent character")
    axis.set_xlabel("lag k (x_{t−k}; 0 = the token just read)")
    axis.set_ylabel("held-out accuracy of a linear probe on z_t")
    axis.set_ylim(0, 1.02)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(out / "context_probe.png", dpi=120)
    plt.close(figure)
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.context_probe", description=__doc__.splitlines()[0])
    parser.add_argument("directories", nargs="+", type=Path, help="finished runs (with best.pt)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    record = probe(args.directories, args.out)
    for name, run in record["runs"].items():
        print(name, " ".join(f"{a:.3f}" for a in run["accuracy"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
