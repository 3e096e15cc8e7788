"""How much of the recent context a trained language model's readout can see, linearly.

    python -m experiments.studies.charlm_v2.context_probe DIR [DIR ...] --out OUT

takes finished runs of a character LM (``<arm>-seed<k>`` directories with ``best.pt``) and measures
on each: a linear context probe (which earlier character x_{t−k} a ridge map reads from the vector
the readout reads), a readout probe (a linear and an MLP readout trained on the frozen state) and
the model's own bits by position. Writes ``OUT/context_probe.json`` and ``OUT/context_probe.png``.
The method in full: ``probe``.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from experiments.analysis.plotting import plt
from experiments.baselines import ExpRNNLanguageModel, LSTMLanguageModel
from experiments.cli import CommandParser
from experiments.data import load_dataset
from experiments.sweep_run import arm_of
from experiments.training.config import load_run_model
from manifold_impl.group_rnn import GroupRNN

LAGS = 8
WINDOWS = 256
LENGTH = 128
BURN_IN = 32
RIDGE = 1e-2
SEED = 0
READOUT_WINDOWS = 2048
HIDDEN = 256
PROBE_STEPS = 4000
PROBE_EVERY = 200
PROBE_BATCH = 1024
PROBE_LR = 1e-3


def runs_with_best(directories, reader):
    """``directories`` as Paths, each a finished run with its ``best.pt``; else ValueError naming
    the others (``reader``: who asks, for the message)."""
    directories = [Path(d) for d in directories]
    unfinished = [str(d) for d in directories if not ((d / "final.json").exists() and (d / "best.pt").exists())]
    if unfinished:
        raise ValueError(f"{reader} reads finished runs with their best.pt; these are not: {unfinished}")
    return directories


@torch.no_grad()
def readout_inputs(model, tokens):
    """One forward pass: ``([B, T, D]`` z_t, the vector each position's logits are an affine function
    of (float64), ``[B, T, V]`` the logits)."""
    if isinstance(model, GroupRNN):
        logits, cache = model(tokens)
        return model.group.packed_features(cache.packed_states).double(), logits
    if isinstance(model, (LSTMLanguageModel, ExpRNNLanguageModel)):  # z_t = h_t, the head's input
        seen = []
        hook = model.head.register_forward_hook(lambda head, inputs, output: seen.append(inputs[0]))
        try:
            logits, _ = model(tokens)
        finally:
            hook.remove()
        return seen[0].double(), logits
    raise TypeError(f"the context probe reads group RNNs, LSTMs and expRNNs, not {type(model).__name__}")


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


def readout_bits(train, valid, vocab_size, hidden=None, seed=SEED, steps=PROBE_STEPS):
    """Validation bits per token of a readout trained on frozen features: ``train`` and ``valid`` are
    (features [N, D], next tokens [N]); ``hidden`` None gives a linear softmax on the standardized
    features, an int an MLP with one hidden layer of that many ReLU units. Early-stopped: the last
    tenth of ``train`` is held out, scored every ``PROBE_EVERY`` steps, and the best state is scored
    on ``valid``."""
    generator = torch.Generator().manual_seed(seed)
    (z, y), (valid_z, valid_y) = ((torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b)) for a, b in (train, valid))
    mean, scale = z.mean(0), z.std(0) + 1e-6
    z, valid_z = (z - mean) / scale, (valid_z - mean) / scale
    cut = len(y) - len(y) // 10
    (z, held_z), (y, held_y) = (z[:cut], z[cut:]), (y[:cut], y[cut:])
    with torch.random.fork_rng():  # PyTorch's default initialization, repeatable by seed
        torch.manual_seed(seed)
        layers = [] if hidden is None else [torch.nn.Linear(z.shape[1], hidden), torch.nn.ReLU()]
        network = torch.nn.Sequential(*layers, torch.nn.Linear(z.shape[1] if hidden is None else hidden, vocab_size))
    optimizer = torch.optim.Adam(network.parameters(), lr=PROBE_LR)
    best, kept = math.inf, None
    for step in range(1, steps + 1):
        batch = torch.randint(0, len(y), (PROBE_BATCH,), generator=generator)
        loss = F.cross_entropy(network(z[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % PROBE_EVERY == 0 or step == steps:
            with torch.no_grad():
                held = float(F.cross_entropy(network(held_z), held_y))
            if held < best:
                best, kept = held, copy.deepcopy(network.state_dict())
    if kept is None:
        raise ValueError("the readout's held-out loss was never finite; are the features finite?")
    network.load_state_dict(kept)
    with torch.no_grad():
        return float(F.cross_entropy(network(valid_z), valid_y)) / math.log(2)


@torch.no_grad()
def _windows(model, stream, count, length, seed, burn_in):
    """Of ``count`` random windows, those on which the model stays finite (a GL state can run away
    on a few): z_t and x_{t+1} at positions t ≥ burn_in, x_t, the bits of the model's own prediction
    of x_{t+1} at every position [kept, length], and how many windows were dropped."""
    starts = np.random.default_rng(seed).integers(0, len(stream) - length - 1, size=count)
    tokens = torch.from_numpy(np.stack([stream[s:s + length + 1] for s in starts]))
    features, nats = [], []
    for chunk in tokens.split(128):
        state, logits = readout_inputs(model, chunk[:, :-1])
        features.append(state[:, burn_in:])
        nats.append(F.cross_entropy(logits.double().transpose(1, 2), chunk[:, 1:], reduction="none"))
    features, nats = torch.cat(features), torch.cat(nats)
    finite = torch.isfinite(features).flatten(1).all(1) & torch.isfinite(nats).all(1)
    return (features[finite].numpy(), tokens[finite, :-1].numpy(), tokens[finite, burn_in + 1:].numpy(),
            nats[finite].numpy() / math.log(2), int((~finite).sum()))


def probe_run(directory, lags=LAGS, windows=WINDOWS, length=LENGTH, burn_in=BURN_IN, seed=SEED,
              readout_windows=READOUT_WINDOWS, steps=PROBE_STEPS):
    """The probes of the best-validation model of the run in ``directory``: ``{"accuracy": [lags]
    (context probe), "majority": the most frequent character's share on the probed positions,
    "bits": {"model", "linear", "mlp"} (validation bits per character of the readouts), "by_position":
    [length] the model's own validation bits at each position of a window (the state restarts at 0),
    "dropped": {"valid", "train"} the windows left out because the model was not finite on them}``."""
    config, model = load_run_model(directory)
    dataset, vocab = load_dataset(config.task.dataset), config.model.vocab_size
    features, tokens, following, own_bits, dropped = _windows(model, dataset.streams["valid"], windows, length, seed,
                                                              burn_in)
    flat = features.reshape(-1, features.shape[-1])
    accuracy = [probe_accuracy(flat, tokens[:, burn_in - lag:length - lag].reshape(-1), vocab) for lag in range(lags)]
    majority = float(np.bincount(tokens[:, burn_in:].reshape(-1), minlength=vocab).max() / flat.shape[0])
    valid = (flat, following.reshape(-1))
    train_features, _, train_following, _, train_dropped = _windows(model, dataset.streams["train"], readout_windows,
                                                                     length, seed, burn_in)
    train = (train_features.reshape(-1, flat.shape[1]), train_following.reshape(-1))
    bits = {"model": float(own_bits[:, burn_in:].mean()), "linear": readout_bits(train, valid, vocab, None, seed, steps),
            "mlp": readout_bits(train, valid, vocab, HIDDEN, seed, steps)}
    return {"accuracy": accuracy, "majority": majority, "bits": bits, "by_position": own_bits.mean(0).tolist(),
            "dropped": {"valid": dropped, "train": train_dropped}}


def position_bins(values):
    """Means of ``values`` over the positions [0], [1], [2, 3], [4, 7], … (doubling bins): (bin starts, means)."""
    edges = [0, 1] + [2 ** k for k in range(1, int(np.log2(max(len(values), 2))) + 1) if 2 ** k < len(values)]
    edges.append(len(values))
    return edges[:-1], [float(np.mean(values[a:b])) for a, b in zip(edges[:-1], edges[1:])]


def probe(directories, out, **options):
    """Probe every run of ``directories`` (``options``: ``probe_run``'s sizes); write
    ``out/context_probe.json`` and ``.png``; returns the record.

    ``python -m experiments.studies.charlm_v2.context_probe DIR [DIR ...] --out OUT`` takes finished runs of a character
    LM (the v2 study's ``<arm>-seed<k>`` directories, each with ``best.pt``) and asks of each: at
    position t of a validation window, which earlier character x_{t−k} can a linear map read from the
    vector the model's readout reads, z_t?

    - group RNN: z_t = features(H_t) (the readout's input: n² reals for O(n), 2n for T, k·b² for BO);
    - LSTM and expRNN: z_t = h_t (the head's input).

    For each lag k = 0 … ``LAGS`` − 1 a ridge regression from the standardized z_t onto the one-hot of
    x_{t−k} is fitted on half of ``WINDOWS`` random validation windows (positions t ≥ ``BURN_IN`` of
    ``LENGTH``, so that the state has seen enough context) and scored on the other half as the accuracy
    of its arg-max: a **linear context probe**. Lag 0 is the token just read; the next character
    depends mostly on the last few, so a readout that can linearly see only x_t is a bigram model. The
    level to beat is the most frequent character's share.

    Second, a **readout probe**: is the next character a linear function of z_t, or does the state hold
    more than a linear readout can use? With the model frozen, z_t of ``READOUT_WINDOWS`` random training
    windows (positions t ≥ ``BURN_IN``) trains two readouts to predict x_{t+1}: a linear softmax and an
    MLP with one hidden layer of ``HIDDEN`` ReLU units (Adam, up to ``PROBE_STEPS`` batches of
    ``PROBE_BATCH``, early-stopped on a held-out tenth of those positions). Both are scored in bits per
    character on the validation windows, next to the model's own readout on the same positions. The
    linear probe can learn the model's own map, but from far fewer positions, so it lands somewhat
    above it; what the MLP gains over the linear probe is information the state holds but a linear
    readout cannot use.

    Third, the model's own validation bits at each position of the window: how far back its
    predictions keep gaining from context.

    Writes ``OUT/context_probe.json`` (per run: the accuracy per lag, the three readouts' bits, the bits
    by position, its arm and test bits) and ``OUT/context_probe.png`` (the three, mean over each arm's
    seeds).
    """
    out, directories = Path(out), runs_with_best(directories, "the context probe")
    out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for directory in directories:
        result = probe_run(directory, **options)
        final = json.loads((directory / "final.json").read_text())
        runs[directory.name] = {"arm": arm_of(directory.name), "test_bits": final["test_bits_per_token"],
                                **{key: result[key] for key in ("accuracy", "bits", "by_position", "dropped")}}
    majority = result["majority"]
    sizes = {"lags": LAGS, "windows": WINDOWS, "length": LENGTH, "burn_in": BURN_IN, "readout_windows": READOUT_WINDOWS,
             "steps": PROBE_STEPS, **options}
    record = {**sizes, "ridge": RIDGE, "hidden": HIDDEN, "majority": majority, "runs": runs}
    (out / "context_probe.json").write_text(json.dumps(record, indent=1))
    plot(record, out / "context_probe.png")
    return record


def plot(record, path):
    """The figure of a probe record: accuracy per lag, bits by position (bins), the three readouts."""
    runs, majority = record["runs"], record["majority"]
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(17, 4.4))
    arms = list(dict.fromkeys(run["arm"] for run in runs.values()))
    for index, arm in enumerate(arms):
        members = [run for run in runs.values() if run["arm"] == arm]
        curve = np.mean([run["accuracy"] for run in members], axis=0)
        left.plot(range(len(curve)), curve, marker="o", label=f"{arm} ({len(members)} seeds)")
        starts, means = position_bins(np.mean([run["by_position"] for run in members], axis=0))
        middle.plot(starts, means, marker="o", label=arm)
        for offset, (kind, hatch) in enumerate((("model", ""), ("linear", "//"), ("mlp", ".."))):
            right.bar(index + (offset - 1) * 0.27, np.mean([run["bits"][kind] for run in members]), width=0.27,
                      color=f"C{offset}", hatch=hatch, label=kind if index == 0 else None)
    left.axhline(majority, color="gray", linestyle=":", label="most frequent character")
    left.set_xlabel("lag k (x_{t−k}; 0 = the token just read)")
    left.set_ylabel("held-out accuracy of a linear probe on z_t")
    left.set_ylim(0, 1.02)
    left.legend(fontsize=7)
    middle.set_xscale("symlog", linthresh=1)
    middle.set_xlabel("position t in the window (bins [0], [1], [2, 3], [4, 7], …; the state starts at t = 0)")
    middle.set_ylabel("the model's validation bits for x_{t+1}, bin mean")
    middle.legend(fontsize=7)
    right.set_xticks(range(len(arms)), arms, rotation=30, fontsize=8)
    right.set_ylabel("validation bits per character of x_{t+1}")
    right.set_title("readouts of the frozen z_t: the model's own, a linear softmax, an MLP", fontsize=9)
    low = min(run["bits"][kind] for run in runs.values() for kind in run["bits"])
    right.set_ylim(max(0.0, low - 0.3), None)
    right.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None):
    parser = CommandParser("experiments.studies.charlm_v2.context_probe", __doc__)
    parser.add_argument("directories", nargs="+", type=Path, help="finished runs (with best.pt)")
    parser.add_argument("--out", type=Path, required=True, help="the directory of the results")
    args = parser.parse_args(argv)
    with parser.refusals():
        runs_with_best(args.directories, "the context probe")
    record = probe(args.directories, args.out)
    for name, run in record["runs"].items():
        print(name, "lags:", " ".join(f"{a:.3f}" for a in run["accuracy"]), "| bits:",
              " ".join(f"{kind} {bits:.3f}" for kind, bits in run["bits"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
