"""Training-dynamics probe of the O(n) group RNN on Tiny Shakespeare: why O(30) diverges, and
which fixes help.

    python -m experiments.studies.large_n_divergence.dynamics_probe run O30-base O16-base [--steps 200 --batch 32 --length 128]
    python -m experiments.studies.large_n_divergence.dynamics_probe plot | summary | first-step | list

Each arm of ``ARMS`` trains through ``experiments.train``'s loop (``ProbeRun``, a ``Run``) at a
constant rate, with its fix applied to the built model and its optimizers from outside the library,
and records the update's terms and the state's dynamics at every step. Results:
``experiments/results/large_n_divergence/``.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from experiments.baselines import LSTMConfig
from experiments.cli import CommandParser
from experiments.data import load_dataset
from experiments.tasks.lm import LanguageModellingConfig
from experiments.training.loop import Run
from experiments.training.config import RunConfig, TrainConfig
from experiments.training.optim import Optimizers
from manifold_impl.linalg import realvec
from reference.config import GroupRNNConfig

RESULTS = Path(__file__).resolve().parents[2] / "results" / "large_n_divergence"
SAMPLE = 8          # sequences of the batch the dynamics are measured on
LAGS = (1, 10)
EVAL_EVERY = 50


@dataclass(frozen=True)
class Arm:
    """One probe run: a model and, optionally, one fix."""

    model: str = "group_rnn"
    n: int = 30
    embedding_dim: int = 97
    lr: float = 1e-3
    recurrent: bool = True
    hidden_size: int = 242            # LSTM only (0.5M parameters on 65 symbols)
    bound: tuple | None = None        # (norm, θ)
    relative: float | None = None     # ρ
    lr_maps: float | None = None      # multiplier on the lr of W and U
    n_ref: int | None = None          # lr of W × √(dim_ref/dim g), of U × n_ref√dim_ref / (n√dim g)
    warmup: int = 0                   # linear warm-up steps of every learning rate
    readout_scale: float = 1.0        # multiplier on the readout weight's initial draw
    note: str = ""


def _arms():
    arms = {}
    for n in (16, 30):
        arms[f"O{n}-base"] = Arm(n=n, note="the paper's update, lr 1e-3")
        arms[f"O{n}-lr3e-4"] = Arm(n=n, lr=3e-4, note="global lr 3e-4")
        arms[f"O{n}-lrmaps0.3"] = Arm(n=n, lr_maps=0.3, note="lr of W, U x0.3")
        arms[f"O{n}-lrmaps0.1"] = Arm(n=n, lr_maps=0.1, note="lr of W, U x0.1")
        for rho in (0.02, 0.05, 0.1):
            arms[f"O{n}-rel{rho}"] = Arm(n=n, relative=rho, note=f"lr of W, U = {rho} x init std")
        for theta in (0.5, 1.0):
            arms[f"O{n}-spec{theta}"] = Arm(n=n, bound=("spectral", theta), note=f"tanh bound on ||A||_2 at {theta}")
            arms[f"O{n}-frob{theta}"] = Arm(n=n, bound=("frobenius", theta), note=f"tanh bound on ||A||_F at {theta}")
        arms[f"O{n}-nscale16"] = Arm(n=n, n_ref=16, note="lr of W, U scaled so that Adam's coherent step on "
                                     "the drive equals O(16)'s")
        arms[f"O{n}-readout0.1"] = Arm(n=n, readout_scale=0.1, note="readout weight drawn 10x smaller")
        arms[f"O{n}-nscale16-readout0.1"] = Arm(n=n, n_ref=16, readout_scale=0.1, note="nscale16 and readout0.1")
        arms[f"O{n}-warmup100"] = Arm(n=n, warmup=100, note="lr 1e-3 after a 100-step linear warm-up")
        arms[f"O{n}-norec"] = Arm(n=n, recurrent=False, note="no state term U (input-driven)")
        arms[f"O{n}-norec-lr3e-3"] = Arm(n=n, recurrent=False, lr=3e-3, note="no state term U, lr 3e-3")
    arms["lstm-lr3e-3"] = Arm(model="lstm", lr=3e-3, note="LSTM 0.5M, lr 3e-3")
    arms["lstm-lr1e-3"] = Arm(model="lstm", lr=1e-3, note="LSTM 0.5M, lr 1e-3")
    return arms


ARMS = _arms()


class BoundedStep(nn.Module):
    """c ↦ θ·tanh(r/θ)·c/r after the cell's mixing, r = ‖hat(c)‖₂ or ‖c‖ (= ‖hat(c)‖_F)."""

    def __init__(self, inner, group, norm, theta):
        super().__init__()
        self.inner, self.group, self.norm, self.theta = inner, group, norm, theta

    def radius(self, c):
        if self.norm == "spectral":
            return torch.linalg.matrix_norm(self.group.hat(c), ord=2)
        return c.norm(dim=-1)

    def forward(self, c):
        c = self.inner(c)
        r = self.radius(c).clamp_min(1e-12)[..., None]
        return c * (self.theta * torch.tanh(r / self.theta) / r)


def run_config(arm, steps, batch, length, eval_tokens, seed=0):
    """The ``experiments.train`` configuration of the arm's run: Tiny Shakespeare, constant rate
    (after the arm's warm-up), clip 1.0, plain map rates (the fixes set their own), evaluation every
    ``EVAL_EVERY`` steps on the first ``eval_tokens`` validation tokens."""
    vocab_size = len(load_dataset("tinyshakespeare").vocabulary)
    if arm.model == "lstm":
        model = LSTMConfig(vocab_size=vocab_size, hidden_size=arm.hidden_size)
    else:
        model = GroupRNNConfig(vocab_size=vocab_size, group="O", n=arm.n, embedding_dim=arm.embedding_dim,
                               recurrent=arm.recurrent)
    train = TrainConfig(model=arm.model, task="lm", steps=steps, batch=batch, lr=arm.lr, schedule="constant",
                        warmup=arm.warmup, clip=1.0, eval_every=EVAL_EVERY, checkpoint_every=steps, seed=seed,
                        map_lr="plain")
    return RunConfig(train, LanguageModellingConfig(dataset="tinyshakespeare", length=length,
                                                    eval_tokens=eval_tokens), model)


def apply_fix(arm, model):
    """The arm's fix to the built model, from outside the library (the rates: ``map_learning_rates``):

    - ``readout_scale``: the readout weight's initial draw multiplied by it;
    - ``bound``: A ← θ·tanh(r/θ)·A/r after mixing, r = ‖A‖₂ (``spectral``) or ‖A‖_F = ‖c‖ (``frobenius``).
    """
    if arm.model != "group_rnn":
        return
    with torch.no_grad():
        model.readout.weight.mul_(arm.readout_scale)
    if arm.bound is not None:
        model.cell.mixing = BoundedStep(model.cell.mixing, model.group, *arm.bound)


def map_learning_rates(arm, model):
    """{parameter name: lr} for W and U under the arm's fix (empty: every parameter at arm.lr):

    - ``relative``: Adam learning rate of W set to ρ·σ_W and of U to ρ·σ_U, σ the full-scale init std
      (σ_W = 1/√(F·dim g), σ_U = 1/√(n·dim g)): every Adam step moves W and U by about ρ relative to
      their scale, whatever n (the same as W = σ_W·W̃ with W̃ ~ N(0, 1) trained at lr ρ);
    - ``n_ref``: W's rate × √(dim_ref/dim g), U's × n_ref·√dim_ref / (n·√dim g);
    - ``lr_maps``: a plain multiplier on the learning rate of W and U.
    """
    if arm.model != "group_rnn":
        return {}
    dim, n, features = model.group.dim, model.group.n, arm.embedding_dim
    if arm.relative is not None:
        rates = {"cell.input_map.weight": arm.relative / math.sqrt(features * dim),
                 "cell.state_map.weight": arm.relative / math.sqrt(n * dim)}
    elif arm.n_ref is not None:
        ref = arm.n_ref * (arm.n_ref - 1) // 2
        rates = {"cell.input_map.weight": arm.lr * math.sqrt(ref / dim),
                 "cell.state_map.weight": arm.lr * arm.n_ref * math.sqrt(ref) / (n * math.sqrt(dim))}
    elif arm.lr_maps is not None:
        rates = {"cell.input_map.weight": arm.lr * arm.lr_maps, "cell.state_map.weight": arm.lr * arm.lr_maps}
    else:
        return {}
    names = dict(model.named_parameters())
    return {name: lr for name, lr in rates.items() if name in names}


@torch.no_grad()
def dynamics(model, inputs, states):
    """The update's terms, its spectral norm and the state's self-similarity on SAMPLE sequences."""
    cell, group, n = model.cell, model.group, model.group.n
    tokens, states = inputs[:SAMPLE], states[:SAMPLE].detach()
    previous = torch.cat([cell.initial_state.detach().expand(len(tokens), n, n)[:, None], states[:, :-1]], dim=1)
    embedded = model.embedding(tokens)
    input_term = embedded @ cell.input_map.weight.T
    state_term = (realvec(previous) @ cell.state_map.weight.T if cell.state_map is not None
                  else torch.zeros_like(input_term))
    raw = input_term + cell.input_map.bias + state_term
    mixing = cell.mixing
    inner = mixing.inner if isinstance(mixing, BoundedStep) else mixing
    raw = inner(raw)
    applied = mixing.forward(input_term + cell.input_map.bias + state_term)
    spectral_raw = torch.linalg.matrix_norm(group.hat(raw), ord=2)
    spectral = torch.linalg.matrix_norm(group.hat(applied), ord=2)
    flat = realvec(states)
    record = {
        "input_term": input_term.norm(dim=-1).mean().item(),
        "state_term": state_term.norm(dim=-1).mean().item(),
        "bias": cell.input_map.bias.norm().item(),
        "drive": raw.norm(dim=-1).mean().item(),
        "spectral_mean": spectral.mean().item(), "spectral_max": spectral.max().item(),
        "spectral_raw_mean": spectral_raw.mean().item(), "spectral_raw_max": spectral_raw.max().item(),
        "readout_norm": model.readout.weight.norm().item(),
    }
    for k in LAGS:
        record[f"similarity_{k}"] = ((flat[:, :-k] * flat[:, k:]).sum(-1) / n).mean().item()
    return record


WATCHED = {"W": "cell.input_map.weight", "U": "cell.state_map.weight", "embedding": "embedding.weight",
           "readout": "readout.weight"}


class ProbeRun(Run):
    """A run of ``experiments.train`` with the arm's fix, recording what ``train`` describes.

    The forward pass of each training batch is kept (a forward hook), and ``update`` measures around
    the loop's own clip and step; ``evaluate`` keeps each validation score. Training is the loop's:
    the same parameters, step for step, as a ``Run`` of the same configuration and fix.
    """

    def __init__(self, directory, config, arm, every):
        super().__init__(directory, config)
        self.arm, self.every = arm, every
        apply_fix(arm, self.model)
        self.special = map_learning_rates(arm, self.model)
        if self.special:
            self.optimizers = Optimizers(self.model, self.train, rates=self.special)
        params = dict(self.model.named_parameters())
        self.watched = {key: params[p] for key, p in WATCHED.items() if p in params}
        self.initial = {key: p.detach().clone() for key, p in self.watched.items()}
        self.walked = {key: 0.0 for key in self.watched}  # Σ_s ‖ΔP_s‖²
        self.per_step, self.records, self.evals = [], [], []
        self.batch = self.loss = None
        self.model.register_forward_hook(self._keep_training_forward)

    def _keep_training_forward(self, model, args, output):
        if model.training:
            self.batch = (args[0], output[1])  # the inputs and the cache of this step's training batch

    def backward(self, inputs, targets):
        self.loss = super().backward(inputs, targets)
        return self.loss

    @torch.no_grad()
    def evaluate(self, split):
        metrics = super().evaluate(split)
        if split == "valid":
            self.evals.append({"step": self.step, "valid_bits": metrics["valid_bits"]})
            print(f"{self.directory.name} step {self.step} valid {metrics['valid_bits']:.3f}", flush=True)
        return metrics

    def update(self):
        model, step, arm = self.model, self.step, self.arm
        grads = {name: (p.grad.norm().item() if p.grad is not None else 0.0) for name, p in model.named_parameters()}
        total = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None])).item()
        measured = dynamics(model, self.batch[0], self.batch[1].states) if arm.model == "group_rnn" and step % self.every == 0 else {}
        before = {key: p.detach().clone() for key, p in self.watched.items()}
        factor = self.optimizers.optimizers[0].param_groups[0]["lr"] / arm.lr  # the warm-up's factor this step
        super().update()
        row = {"step": step, "loss_bits": self.loss / math.log(2), "grad_total": total}
        for key, p in self.watched.items():
            delta = p.detach() - before[key]
            row[f"rel_step_{key}"] = (delta.norm() / before[key].norm().clamp_min(1e-30)).item()
            self.walked[key] += delta.norm().item() ** 2
            if key in ("W", "U"):
                lr = self.special.get(WATCHED[key], arm.lr)
                row[f"entry_step_{key}"] = (delta.abs().mean() / (lr * factor)).item()  # Adam: ≈ 1 when every entry moves by lr
        self.per_step.append(row)
        if step % self.every == 0:
            record = {"step": step, "loss_bits": row["loss_bits"], "grad_norms": grads, **measured}
            for key, p in self.watched.items():  # after this step's update
                record[f"norm_{key}"] = p.detach().norm().item()
                travelled = (p.detach() - self.initial[key]).norm().item()
                record[f"travel_{key}"] = travelled  # ‖P_t − P_0‖
                record[f"coherence_{key}"] = travelled / max(math.sqrt(self.walked[key]), 1e-30)  # 1: random walk; √t: straight
            self.records.append(record)


def train(name, arm, steps, batch, length, every, eval_tokens, seed=0):
    """Train arm ``name`` through ``experiments.train``'s loop and write its record to
    ``RESULTS/<name>.json``: every ``every`` steps, on the first ``SAMPLE`` sequences of the training
    batch,

    - ‖W e_t‖, ‖U realvec(H_{t−1})‖, ‖b‖ and ‖c_t‖ (mean over t and sequences) — the input and state
      terms of the update's coordinates c_t;
    - the spectral norm of A_t = hat(c_t) (the largest rotation angle of one step), mean and max, of the
      raw c_t and of the c_t actually applied (they differ only under a bounded step);
    - the state's self-similarity Re tr(H_tᴴ H_{t+k}) / n at k = 1 and 10;
    - the gradient norm of each parameter before clipping, and the readout's weight norm;

    and at every step the training loss (bits) and the relative change ‖ΔP‖/‖P‖ of W, U, the
    embedding and the readout weight made by that optimizer step. Validation bits (windowed, 128
    tokens, ``--eval-tokens`` tokens of the validation split) at steps 0, 50, 100, ….
    """
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:  # the run's own files; the record below is the result
        (Path(scratch) / name).mkdir()
        probe = ProbeRun(Path(scratch) / name, run_config(arm, steps, batch, length, eval_tokens, seed), arm, every)
        probe.evaluate("valid")
        probe.fit()
    model = probe.model
    result = {"arm": name, "config": asdict(arm), "steps": steps, "batch": batch, "length": length, "seed": seed,
              "eval_tokens": eval_tokens, "special_lr": probe.special, "seconds": time.perf_counter() - start,
              "parameters": sum(p.numel() for p in model.parameters()),
              "parameter_split": {p: q.numel() for p, q in model.named_parameters()},
              "records": probe.records, "per_step": probe.per_step, "evals": probe.evals}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1))
    return result


def _load(names):
    out = {}
    for name in names:
        path = RESULTS / f"{name}.json"
        if path.exists():
            out[name] = json.loads(path.read_text())
    return out


def _smooth(values, width=10):
    values = np.asarray(values, dtype=float)
    kernel = np.ones(width) / width
    return np.convolve(values, kernel, mode="valid"), np.arange(width - 1, len(values))


PANELS = (("loss (bits, train, 10-step mean)", None), ("valid bits", None),
          ("‖W e_t‖ (input term)", "input_term"), ("‖U realvec(H_{t-1})‖ (state term)", "state_term"),
          ("max ‖A_t‖₂ (applied)", "spectral_max"), ("mean ‖A_t‖₂ (applied)", "spectral_mean"),
          ("similarity lag 10", "similarity_10"), ("similarity lag 1", "similarity_1"),
          ("grad norm W (pre-clip)", "grad:cell.input_map.weight"), ("grad norm U (pre-clip)", "grad:cell.state_map.weight"),
          ("relative step ‖ΔW‖/‖W‖", "rel_step_W"), ("relative step ‖ΔU‖/‖U‖", "rel_step_U"),
          ("readout weight norm", "readout_norm"), ("‖W_t − W_0‖ / √Σ‖ΔW_s‖²", "coherence_W"))


def plot(names, path, title):
    from experiments.analysis.plotting import plt

    runs = _load(names)
    fig, axes = plt.subplots(4, 4, figsize=(18, 14))
    mixed = any(n.startswith("O30") for n in runs) and any(n.startswith("O16") for n in runs)
    colors = plt.get_cmap("tab20").colors[::2] + plt.get_cmap("tab20").colors[1::2]
    for i, (name, run) in enumerate(runs.items()):
        style = {"color": "black" if "lstm" in name else colors[i % len(colors)], "label": name,
                 "linestyle": ":" if "lstm" in name else "--" if name.startswith("O16") and mixed else "-"}
        for ax, (label, key) in zip(axes.flat, PANELS):
            ax.set_title(label, fontsize=9)
            if key is None and label.startswith("loss"):
                values, x = _smooth([r["loss_bits"] for r in run["per_step"]])
                ax.plot(x, values, **style)
            elif key is None:
                ax.plot([e["step"] for e in run["evals"]], [e["valid_bits"] for e in run["evals"]], marker="o", **style)
            elif key.startswith("rel_step"):
                if key in run["per_step"][0]:
                    values, x = _smooth([r[key] for r in run["per_step"]])
                    ax.semilogy(x, values, **style)
            elif key.startswith("grad:"):
                ax.semilogy([r["step"] for r in run["records"]],
                            [r["grad_norms"].get(key[5:], np.nan) for r in run["records"]], **style)
            elif key in run["records"][0]:
                ax.plot([r["step"] for r in run["records"]], [r[key] for r in run["records"]], **style)
    axes.flat[1].axhline(4.83, color="gray", linewidth=0.8, linestyle=":")
    axes.flat[4].axhline(math.pi, color="gray", linewidth=0.8, linestyle=":")
    for ax in axes.flat[len(PANELS):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"wrote {path}")


FIGURES = {
    "reproduction": (["O30-base", "O16-base", "O30-lr3e-4", "O16-lr3e-4"],
                     "O(30) vs O(16), embedding 97, lr 1e-3, and both at a global lr 3e-4"),
    "fixes_O30": (["O30-base", "O30-lr3e-4", "O30-lrmaps0.3", "O30-lrmaps0.1", "O30-rel0.05", "O30-nscale16",
                   "O30-spec1.0", "O30-frob1.0", "O30-warmup100", "lstm-lr3e-3"],
                  "O(30): candidate fixes (LSTM 0.5M at lr 3e-3 for reference: loss panels only)"),
    "fixes_O16": (["O16-base", "O16-lr3e-4", "O16-lrmaps0.1", "O16-rel0.05", "O16-frob1.0", "O16-norec",
                   "O16-readout0.1", "lstm-lr3e-3"],
                  "O(16): the same fixes (for O(16), nscale16 is the base run)"),
}


def first_step(sizes=(8, 12, 16, 24, 30, 36), lr=1e-3, batch=32, length=128, seed=0):
    """The drive before and after ONE optimizer step of the training loop (Adam's first step is
    lr·sign(g) per entry), on that step's batch, against the predicted scalings: ‖ΔW‖/‖W‖ = lr·√(F·dim g)
    and, with the state near I (where realvec(H) = realvec(I) is a constant input, so U's n diagonal
    columns take the same step), Δ‖U realvec(H)‖ ≈ lr·n·√(dim g)."""
    rows = []
    for n in sizes:
        arm = Arm(n=n, lr=lr)
        with tempfile.TemporaryDirectory() as scratch:
            probe = ProbeRun(Path(scratch), run_config(arm, 1, batch, length, length, seed), arm, every=1)
            probe.fit()
        model, (inputs, _) = probe.model, probe.batch
        before = probe.records[0]
        with torch.no_grad():
            _, cache = model(inputs)
        after = dynamics(model, inputs, cache.states)
        dim = model.group.dim
        rows.append({"n": n, "dim": dim, "rel_step_W": probe.per_step[0]["rel_step_W"],
                     "predicted_rel_step_W": lr * math.sqrt(arm.embedding_dim * dim),
                     "state_term": [before["state_term"], after["state_term"]],
                     "predicted_state_term_jump": lr * n * math.sqrt(dim),
                     "input_term": [before["input_term"], after["input_term"]],
                     "spectral_max": [before["spectral_max"], after["spectral_max"]],
                     "similarity_10": [before["similarity_10"], after["similarity_10"]]})
        print(json.dumps(rows[-1]), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "first_step.json").write_text(json.dumps(rows, indent=1))


def summary():
    """One row per arm (the numbers the report quotes), printed as Markdown and saved as summary.json."""
    rows = []
    for path in sorted(RESULTS.glob("*.json")):
        if path.name in ("summary.json", "first_step.json"):
            continue
        run = json.loads(path.read_text())
        first, last = run["records"][0], run["records"][-1]
        tail = [r["loss_bits"] for r in run["per_step"][-10:]]
        row = {"arm": run["arm"], "note": run["config"]["note"], "parameters": run["parameters"],
               "valid_bits": {e["step"]: round(e["valid_bits"], 3) for e in run["evals"]},
               "train_bits_last10": round(float(np.mean(tail)), 3), "first_rel_step_W": None}
        if "rel_step_W" in run["per_step"][0]:
            row["first_rel_step_W"] = round(run["per_step"][0]["rel_step_W"], 3)
            row["first_rel_step_U"] = round(run["per_step"][0].get("rel_step_U", float("nan")), 3)
        for key in ("input_term", "state_term", "spectral_mean", "spectral_max", "similarity_10"):
            if key in first:
                row[key] = [round(first[key], 3), round(last[key], 3)]
        for key, name in (("grad_W", "cell.input_map.weight"), ("grad_U", "cell.state_map.weight")):
            if name in first["grad_norms"]:
                row[key] = [round(first["grad_norms"][name], 2), round(last["grad_norms"][name], 2)]
        rows.append(row)
    (RESULTS / "summary.json").write_text(json.dumps(rows, indent=1))
    print("| arm | valid bits 0/50/100/150/200 | train (last 10) | ‖We‖ | ‖Uh‖ | max ‖A‖₂ | sim lag 10 | grad W | grad U |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        pair = lambda key: "→".join(f"{v:.2f}" for v in row[key]) if key in row else "–"
        print(f"| {row['arm']} | {' / '.join(f'{v:.2f}' for v in row['valid_bits'].values())} | "
              f"{row['train_bits_last10']:.2f} | {pair('input_term')} | {pair('state_term')} | {pair('spectral_max')} | "
              f"{pair('similarity_10')} | {pair('grad_W')} | {pair('grad_U')} |")


def main(argv=None):
    parser = CommandParser("experiments.studies.large_n_divergence.dynamics_probe", __doc__)
    parser.add_argument("command", choices=("run", "plot", "list", "summary", "first-step"),
                        help="run arms, plot the figures, list the arms, print the summary table, or the "
                             "first-step measurement")
    parser.add_argument("arms", nargs="*", help="the arms to run (list shows them)")
    parser.add_argument("--steps", type=int, default=200, help="training steps of each arm")
    parser.add_argument("--batch", type=int, default=32, help="windows per step")
    parser.add_argument("--length", type=int, default=128, help="tokens per window")
    parser.add_argument("--every", type=int, default=10, help="steps between recorded dynamics")
    parser.add_argument("--eval-tokens", type=int, default=16_384, help="validation tokens of each evaluation")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.command == "list":
        for name, arm in ARMS.items():
            print(f"{name:22s} {arm.note}")
    elif args.command == "run":
        unknown = [a for a in args.arms if a not in ARMS]
        if unknown:
            parser.error(f"unknown arms {unknown}; see `list`")
        for name in args.arms:
            train(name, ARMS[name], args.steps, args.batch, args.length, args.every, args.eval_tokens)
    elif args.command == "first-step":
        first_step()
    elif args.command == "summary":
        summary()
    else:
        for key, (names, title) in FIGURES.items():
            plot(names, RESULTS / f"{key}.png", title)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
