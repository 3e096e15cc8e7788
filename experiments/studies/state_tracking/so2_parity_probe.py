"""Why an input-driven SO(2) RNN often stays at chance on parity: ``--part spread`` (the initial
token angles over many inits), ``landscape`` (the exact expected loss over the (θ_0, θ_1) torus and
the clock's basin against the training length) and ``train`` (400-step runs of ``experiments.train``
on parity: the default model, readouts, hand-set angles, a curriculum, smaller rates and an LSTM).

    python -m experiments.studies.state_tracking.so2_parity_probe [--part spread|landscape|train|all] [--seeds 3]

The state after t bits with k ones is the rotation by (t − k)θ_0 + kθ_1 (θ_v: token v's angle); parity
is solved by θ_0 ≡ 0, θ_1 ≡ π. Single-threaded, a few minutes; nothing here changes a library default.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import scipy.optimize
import scipy.stats
import torch

from experiments.baselines import LSTMConfig
from experiments.cli import CommandParser
from experiments.models import build_model
from experiments.tasks.base import split_generator
from experiments.tasks.count import CountingConfig, parity_batch
from experiments.training.loop import Run
from experiments.training.config import RunConfig, TrainConfig
from reference.config import GroupRNNConfig

MIN_LENGTH, MAX_LENGTH = 2, 40
TEST_LENGTHS = (40, 256, 1024)
KAPPA = 5.0  # logit scale of the ideal fixed readout


def so2_config(readout="linear"):
    return GroupRNNConfig(vocab_size=2, group="SO", n=2, readout=readout, recurrent=False)


def token_angles(model):
    """θ_v ∈ (−π, π] with exp(hat(W e_v + b)) = [[cos θ, −sin θ], [sin θ, cos θ]]: ``[V]``."""
    with torch.no_grad():
        rotations = model.cell.group.exp(model.cell.group.hat(model.cell.input_map(model.embedding.weight)))
    return torch.atan2(rotations[:, 1, 0], rotations[:, 0, 0]).numpy()


def set_token_angles(model, angles):
    """Write θ_v into a model: the minimum-norm input map W with W e_v = vee(θ_v J), b = 0."""
    group = model.cell.group
    j = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=model.embedding.weight.dtype)
    coordinates = group.vee(torch.as_tensor(angles, dtype=j.dtype)[:, None, None] * j)  # [V, 1]
    with torch.no_grad():
        model.cell.input_map.weight.copy_((torch.linalg.pinv(model.embedding.weight) @ coordinates).T)
        model.cell.input_map.bias.zero_()


def wrap(angle):
    """Angle in (−π, π]."""
    return np.pi - np.mod(np.pi - np.asarray(angle), 2 * np.pi)


# --- 1. initial spread -----------------------------------------------------------------------------

def spread(draws=2000):
    angles = np.array([token_angles(build_model(so2_config(), generator=torch.Generator().manual_seed(s)))
                       for s in range(draws)])  # [draws, 2]
    gap = np.abs(wrap(angles[:, 1] - angles[:, 0]))
    print(f"[spread] {draws} default inits of the SO(2) RNN (embedding_dim 32)")
    for v in (0, 1):
        q = np.quantile(np.abs(angles[:, v]), [0.5, 0.9, 0.99])
        print(f"  |θ_{v}|: std {angles[:, v].std():.3f} rad, median {q[0]:.3f}, 90% {q[1]:.3f}, 99% {q[2]:.3f}")
    print(f"  |θ_1 − θ_0| (wrapped): median {np.median(gap):.3f}; P(gap > π/2) = {np.mean(gap > np.pi / 2):.3f}, "
          f"P(gap > 3π/4) = {np.mean(gap > 3 * np.pi / 4):.4f}, P(gap > π − 0.1) = {np.mean(gap > np.pi - 0.1):.4f}")
    return angles


# --- 2. loss landscape -----------------------------------------------------------------------------

def position_weights(max_length=MAX_LENGTH):
    """w[t, k]: share of scored positions that are position t (1-based) holding k 1-bits so far.

    A batch has length L uniform in [MIN_LENGTH, max_length] and the loss averages its L positions,
    so position t ≤ L weighs 1/L, and k ~ Binomial(t, 1/2) there. ``[max_length + 1, max_length + 1]``
    (row 0 unused).
    """
    weights = np.zeros((max_length + 1, max_length + 1))
    lengths = np.arange(MIN_LENGTH, max_length + 1)
    for length in lengths:
        for t in range(1, length + 1):
            weights[t, : t + 1] += scipy.stats.binom.pmf(np.arange(t + 1), t, 0.5) / (length * len(lengths))
    return weights


def _phases(theta0, theta1, size):
    """φ = (t − k)θ_0 + kθ_1 at every (t, k) < size, and the sign +1 of odd targets: ``[size, size]`` each."""
    t, k = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    return (t - k) * theta0 + k * theta1, np.where(k % 2, 1.0, -1.0)


def fixed_readout_loss(theta0, theta1, weights, kappa=KAPPA):
    """Expected loss with the ideal readout of the exact solution: P(odd) = sigmoid(−κ cos φ)."""
    phase, sign = _phases(theta0, theta1, len(weights))
    return float(np.sum(weights * np.logaddexp(0.0, kappa * np.cos(phase) * sign)))


def profile_loss(theta0, theta1, weights, ridge=1e-6):
    """Expected loss with the best logistic readout of (cos φ, sin φ, 1) at these angles.

    This is what any readout of an SO(2) state can reach (the linear readout of realvec(H) sees
    exactly cos φ and sin φ; the prototype readout a subset without the bias).
    """
    phase, sign = _phases(theta0, theta1, len(weights))
    mask = weights > 0
    w, y, phase = weights[mask], sign[mask], phase[mask]
    features = np.stack([np.cos(phase), np.sin(phase), np.ones_like(phase)], axis=1)

    def objective(beta):
        margin = y * (features @ beta)
        grad = -(w * y * scipy.special.expit(-margin)) @ features + 2 * ridge * beta
        return np.logaddexp(0.0, -margin) @ w + ridge * beta @ beta, grad

    result = scipy.optimize.minimize(objective, np.zeros(3), jac=True, method="L-BFGS-B")
    return float(result.fun - ridge * result.x @ result.x)


def monotone_basin(theta, loss, center, tolerance=1e-5):
    """Largest grid interval around ``center`` where ``loss`` decreases toward it (up to ``tolerance``)."""
    i = int(np.argmin(np.abs(theta - center)))
    lo, hi = i, i
    while lo > 0 and loss[lo - 1] >= loss[lo] - tolerance:
        lo -= 1
    while hi < len(loss) - 1 and loss[hi + 1] >= loss[hi] - tolerance:
        hi += 1
    return theta[lo], theta[hi]


def _slice_report(label, theta, loss, center, marks):
    lo, hi = monotone_basin(theta, loss, center)
    slope = np.gradient(loss, theta)
    values = ", ".join(f"{m:.2f}: {np.interp(m, theta, loss):.3f} (slope {np.interp(m, theta, slope):+.4f})"
                       for m in marks)
    print(f"    {label}: descends to {center:.2f} from [{lo:.3f}, {hi:.3f}]; share below ln 2 − 0.05: "
          f"{np.mean(loss < math.log(2) - 0.05):.3f}\n      loss (slope per rad) at {values}")


def landscape(points=721, grid=72):
    weights = position_weights()
    counts = np.arange(MAX_LENGTH + 1)
    print(f"[landscape] lengths {MIN_LENGTH}–{MAX_LENGTH}, chance ln 2 = {math.log(2):.4f}; at a scored position "
          f"mean t = {weights.sum(1) @ counts:.2f}, mean number of 1-bits k = {weights.sum(0) @ counts:.2f}")
    slices = {
        "θ_0 = 0, θ_1 varies (the parity rotation)": (lambda a: (0.0, a), np.pi, (0.5, 1.0, 2.0, 2.5, 3.0, 3.1)),
        "θ_1 = θ_0 + π, θ_0 varies (the 0-token's clock)": (lambda a: (a, a + np.pi), 0.0, (0.5, 0.2, 0.1, 0.05)),
    }
    for name, (angles, center, marks) in slices.items():
        theta = np.linspace(center - np.pi, center + np.pi, points)
        print(f"  slice {name}")
        readouts = (("fixed readout −κ cos φ, κ=5", fixed_readout_loss), ("best readout (profile)", profile_loss))
        for label, fn in readouts:
            _slice_report(label, theta, np.array([fn(*angles(a), weights) for a in theta]), center, marks)
    # the whole torus, coarse: where does the best readout beat chance?
    axis = np.linspace(-np.pi, np.pi, grid, endpoint=False)
    profile = np.array([[profile_loss(a, b, weights) for b in axis] for a in axis])  # [θ_0, θ_1]
    shares = ", ".join(f"< {level}: {np.mean(profile < level):.4f}" for level in (0.68, 0.6, 0.3, 0.1))
    print(f"  whole torus ({grid}×{grid} grid of (θ_0, θ_1)), best readout: share with loss {shares}")
    # the clock's basin against the longest training length (why a curriculum helps)
    offsets = (0.1, 0.3, 0.6, 1.0)
    print(f"  θ_1 = θ_0 + π, best readout, by longest training length (lengths 2–L): loss at θ_0 = {offsets}")
    for longest in (5, 10, 20, 40, 64):
        shorter = position_weights(longest)
        print(f"    L = {longest:2d}: " + " ".join(f"{profile_loss(a, a + np.pi, shorter):.3f}" for a in offsets))
    return profile


# --- 3. training -----------------------------------------------------------------------------------

def evaluate(model, seed, batch=64):
    """Accuracy over all positions and at the last one, per test length."""
    out = {}
    with torch.no_grad():
        for length, generator in zip(TEST_LENGTHS, split_generator(seed, "test").spawn(len(TEST_LENGTHS))):
            inputs, targets = parity_batch(generator, batch, length)
            logits, _ = model(torch.from_numpy(inputs))
            right = logits.argmax(-1).numpy() == targets
            out[length] = (right.mean(), right[:, -1].mean())
    return out


class AngleRun(Run):
    """A ``Run`` of ``experiments.train`` that keeps each step's training loss and, for the SO(2) RNN,
    the token angles at the start and after every step (``path``, ``[steps + 1, 2]``; None otherwise).
    ``prepare(model, seed)``, if given, changes the built model before the first step."""

    def __init__(self, directory, config, prepare=None):
        super().__init__(directory, config)
        if prepare is not None:
            prepare(self.model, self.train.seed)
        self.losses = []
        self.path = [token_angles(self.model)] if hasattr(self.model, "cell") else None

    def backward(self, inputs, targets):
        loss = super().backward(inputs, targets)
        self.losses.append(loss)
        return loss

    def update(self):
        super().update()
        if self.path is not None:
            self.path.append(token_angles(self.model))


def run_config(model, seed, steps=400, batch=64, lr=1e-2, ramp=0):
    """The ``experiments.train`` configuration of a parity run: lengths 2–40 (``ramp`` > 0: the longest
    grows from 2 to 40 over ``ramp`` steps), cosine rate, clip 1.0, one evaluation at the end."""
    name = "lstm" if isinstance(model, LSTMConfig) else "group_rnn"
    train = TrainConfig(model=name, task="count", steps=steps, batch=batch, lr=lr, schedule="cosine", clip=1.0,
                        eval_every=steps, checkpoint_every=steps, seed=seed, map_lr="plain")
    task = CountingConfig(modulus=2, train_min_length=MIN_LENGTH, train_max_length=MAX_LENGTH, curriculum_steps=ramp,
                          eval_max_length=MAX_LENGTH)
    return RunConfig(train, task, model)


def train(model, seed, prepare=None, **options):
    """Train ``model`` (a config) on parity through ``experiments.train``'s loop (``run_config``'s options).

    Returns:
        the mean training loss of the last 20 steps, ``evaluate``'s dict, and for a group RNN the
        token angles after every step ``[steps + 1, 2]`` (None for other models).
    """
    with tempfile.TemporaryDirectory() as scratch:
        run = AngleRun(Path(scratch), run_config(model, seed, **options), prepare)
        run.fit()
    path = None if run.path is None else np.array(run.path)
    return float(np.mean(run.losses[-20:])), evaluate(run.model, seed), path


def variants():
    """name -> (model config, prepare(model, seed) or None, training options)."""
    def angles(choose):
        return lambda model, seed: set_token_angles(model, choose(seed))

    spread_init = lambda seed: np.random.default_rng(seed).uniform(0, np.pi, size=2)  # noqa: E731
    return {
        "SO(2) linear readout (default)": (so2_config(), None, {}),
        "SO(2) prototype readout": (so2_config("prototype"), None, {}),
        "SO(2) linear, θ ~ U[0, π] per token": (so2_config(), angles(spread_init), {}),
        "SO(2) linear, θ_0=0, θ_1=2.5": (so2_config(), angles(lambda seed: [0.0, 2.5]), {}),
        "SO(2) linear, θ_0=0, θ_1=3.0": (so2_config(), angles(lambda seed: [0.0, 3.0]), {}),
        "SO(2) linear, curriculum 2→40 over 300 steps": (so2_config(), None, {"ramp": 300}),
        "SO(2) linear, lr 3e-3": (so2_config(), None, {"lr": 3e-3}),
        "SO(2) linear, lr 1e-3": (so2_config(), None, {"lr": 1e-3}),
        "LSTM hidden 32": (LSTMConfig(vocab_size=2, hidden_size=32), None, {}),
    }


def _angle_summary(path):
    """Start → end angles, the median per-step |Δθ| of the first 100 steps, when |δ| first came within
    0.1 of π, and the length horizon of the final angles.

    With ε = wrap(θ_1 − π), the state's phase after t tokens with k ≈ t/2 ones is off parity by
    about t·(θ_0 + ε)/2; the prediction flips once that passes π/2, near t = π/|θ_0 + ε|.
    """
    delta = wrap(path[:, 1] - path[:, 0])
    step = np.abs(wrap(np.diff(path, axis=0)))[:100]
    reached = np.flatnonzero(np.abs(np.abs(delta) - np.pi) < 0.1)
    ends = " → ".join(f"({a[0]:+.3f}, {a[1]:+.3f}; δ {d:+.3f})" for a, d in ((path[0], delta[0]), (path[-1], delta[-1])))
    when = f"step {reached[0]}, θ_0 then {path[reached[0], 0]:+.3f}" if reached.size else "never"
    drift = path[-1, 0] + wrap(path[-1, 1] - np.pi)  # phase error per two steps (k ≈ t/2 ones)
    return (f"{ends}; median |Δθ_0|, |Δθ_1| per step (steps 1–100) {np.median(step[:, 0]):.3f}, "
            f"{np.median(step[:, 1]):.3f}; |δ| within 0.1 of π: {when}; horizon π/|θ_0 + wrap(θ_1 − π)| "
            f"= {np.pi / max(abs(drift), 1e-12):.0f}")


def train_all(seeds):
    print(f"[train] parity, 400 steps, batch 64, lengths {MIN_LENGTH}–{MAX_LENGTH}, lr 1e-2 unless said; accuracy "
          f"over all positions (at the last position) at lengths {TEST_LENGTHS}; angles (θ_0, θ_1; δ = θ_1 − θ_0)")
    for name, (model, prepare, options) in variants().items():
        solved = np.zeros(len(TEST_LENGTHS), dtype=int)
        for seed in range(seeds):
            loss, scores, path = train(model, seed, prepare, **options)
            solved += [accuracy >= 0.99 for accuracy, _ in scores.values()]
            accuracy = " ".join(f"{length}: {a:.3f} ({last:.2f})" for length, (a, last) in scores.items())
            angles = "" if path is None else "\n      " + _angle_summary(path)
            print(f"  {name:46s} seed {seed}: loss {loss:.3f}; {accuracy}{angles}", flush=True)
        print(f"  {name:46s} seeds with ≥ 99% accuracy at {TEST_LENGTHS}: {solved.tolist()} of {seeds}", flush=True)


def main(argv=None):
    parser = CommandParser("experiments.studies.state_tracking.so2_parity_probe", __doc__)
    parser.add_argument("--part", choices=("spread", "landscape", "train", "all"), default="all", help="which part to run")
    parser.add_argument("--seeds", type=int, default=3, help="seeds of each training arm")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.part in ("spread", "all"):
        spread()
    if args.part in ("landscape", "all"):
        landscape()
    if args.part in ("train", "all"):
        train_all(args.seeds)


if __name__ == "__main__":
    main()
