"""How a trained group RNN's state is conditioned along a validation stream (why GL's carried-state
evaluation fails while its windowed one does not), and how a GL run's training loss turns NaN.

    python -m experiments.studies.charlm_v2.state_spectrum DIR [DIR ...] --out OUT [--length 1024]
    python -m experiments.studies.charlm_v2.state_spectrum --blowup DIR [DIR ...] --out OUT

The first measures the singular values of H_t along ``STREAMS`` validation pieces and writes
``OUT/state_spectrum.json`` and ``.png`` (``measure``); the second replays runs that stopped on a
non-finite loss to the failing step and writes ``OUT/blowup.json`` (``trace_blowup``).
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from experiments.analysis.plotting import plt
from experiments.cli import CommandParser
from experiments.data import load_dataset
from experiments.studies.charlm_v2.context_probe import runs_with_best
from experiments.sweep_run import arm_of
from experiments.training.loop import Run
from experiments.training.config import load_run_model, recorded_config
from manifold_impl.group_rnn import GroupRNN

STREAMS = 16
LENGTH = 1024
SEED = 0
TRACE = 8  # states of the failing sequence before the first non-finite one
RANK_TOLERANCE = 1e-4  # float32 round-off of a product of n × n matrices sits near 1e-7 · σ_max


@torch.no_grad()
def spectrum(model, tokens):
    """The medians over the batch of ``tokens`` ([B, T] ids) at each position t of the state's
    singular-value summary: ``{"frobenius", "sigma_max", "sigma_min", "inverse_condition", "rank"}``, each [T]."""
    if not isinstance(model, GroupRNN):
        raise TypeError(f"the state spectrum reads group RNNs, not {type(model).__name__}")
    _, cache = model(tokens)
    states = model.group.unpack(cache.packed_states)  # [B, T, n, n]
    sigma = torch.linalg.svdvals(states.to(torch.complex128 if states.is_complex() else torch.float64))  # descending
    n = sigma.shape[-1]
    curves = {"frobenius": sigma.square().sum(-1).sqrt() / math.sqrt(n), "sigma_max": sigma[..., 0],
              "sigma_min": sigma[..., -1], "inverse_condition": sigma[..., -1] / sigma[..., 0],
              "rank": (sigma > RANK_TOLERANCE * sigma[..., :1]).sum(-1).double()}
    return {key: value.median(0).values.tolist() for key, value in curves.items()}


def spectrum_run(directory, length=LENGTH, streams=STREAMS, seed=SEED):
    """``spectrum`` of the best-validation model of the run in ``directory`` on ``streams`` random
    validation pieces of ``length`` characters."""
    config, model = load_run_model(directory)
    stream = load_dataset(config.task.dataset).streams["valid"]
    if len(stream) <= length:
        raise ValueError(f"the validation split ({len(stream)} tokens) is not longer than --length {length}")
    starts = np.random.default_rng(seed).integers(0, len(stream) - length, size=streams)
    return spectrum(model, torch.from_numpy(np.stack([stream[s:s + length] for s in starts])))


def measure(directories, out, length=LENGTH, streams=STREAMS):
    """Measure every run of ``directories``; write ``out/state_spectrum.json`` and ``.png``; returns the record.

    ``python -m experiments.studies.charlm_v2.state_spectrum DIR [DIR ...] --out OUT [--length 1024]`` takes finished
    group-RNN runs (with ``best.pt``) and feeds each best-validation model ``STREAMS`` random validation
    pieces of ``--length`` characters, the state starting at the model's H_0. At each position t it
    takes the singular values σ_1 ≥ … ≥ σ_n of the state H_t (n × n, unpacked for T and BO; float32 as
    trained, the SVD in float64) and records, over the pieces, the median of

    - ‖H_t‖_F / √n, which is 1 on a compact group (every σ_i = 1);
    - σ_max and σ_min;
    - σ_min / σ_max, the state's inverse condition number: 1 on a compact group; below float32's
      resolution (about 1e-7) the state has numerically lost rank, and GL's membership test
      (``GeneralLinear``: σ_min ≤ atol · max(1, σ_max)) refuses it, which ends a carried evaluation with
      NaN (``experiments.tasks.lm.carried_bits``);
    - the numerical rank, the number of σ_i above ``RANK_TOLERANCE`` · σ_max: how many directions of
      H_t are far above float32's round-off (n on a compact group).

    Writes ``OUT/state_spectrum.json`` (per run: its arm, test bits and the five curves) and
    ``OUT/state_spectrum.png`` (σ_min / σ_max, the rank and ‖H_t‖_F / √n against t).

    ``python -m experiments.studies.charlm_v2.state_spectrum --blowup DIR [DIR ...] --out OUT`` replays runs that stopped
    on a non-finite training loss (``final.json``'s ``stopped``): a copy of each run resumes from its
    last checkpoint (or starts afresh, if it stopped before one) and trains to the failing step exactly
    as it did (the training is deterministic on the CPU). On that step's batch it finds the first
    sequence and position whose state H_t is not finite, and records σ_max of that sequence's states
    before it, and at the last finite state H_{t−1}: ‖d_t‖ (the input drive W e_t + b), ‖c_t‖ (with the
    state term U features(H_{t−1})) and the largest real part of an eigenvalue of A_t = hat(c_t), whose
    exponential the update multiplies in.
    Writes ``OUT/blowup.json``.
    """
    out, directories = Path(out), runs_with_best(directories, "the state spectrum")
    out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for directory in directories:
        final = json.loads((directory / "final.json").read_text())
        runs[directory.name] = {"arm": arm_of(directory.name), "test_bits": final["test_bits_per_token"],
                                "test_carried_bits": final.get("test_carried_bits_per_token"),
                                **spectrum_run(directory, length, streams)}
    record = {"length": length, "streams": streams, "seed": SEED, "runs": runs}
    (out / "state_spectrum.json").write_text(json.dumps(record, indent=1))
    plot(record, out / "state_spectrum.png")
    return record


@torch.no_grad()
def _first_failure(model, tokens):
    """Where the states of one forward pass over ``tokens`` first turn non-finite, and how."""
    _, cache = model(tokens)
    states = model.group.unpack(cache.packed_states)  # [B, T, n, n]
    broken = ~torch.isfinite(states.flatten(2)).all(-1)
    if not broken.any():
        return None
    sequence, position = (int(i) for i in broken.nonzero()[0])
    if position == 0:
        raise ValueError("the state is not finite at the first position: nothing to trace before it")
    before = states[sequence, max(0, position - TRACE):position].double()
    cell, state = model.cell, states[sequence, position - 1][None]
    drive = cell.input_map(model.embedding(tokens[sequence:sequence + 1, position]))
    coordinates = cell.coordinates(model.group.pack(state), drive)
    update = model.group.hat(cell.bound(cell.mixing(coordinates)))[0].double()
    return {"sequence": sequence, "position": position,
            "sigma_max_before": torch.linalg.matrix_norm(before, 2).tolist(),
            "drive_norm": float(drive.norm()), "coordinates_norm": float(coordinates.norm()),
            "largest_real_eigenvalue": float(torch.linalg.eigvals(update).real.max())}


def trace_blowup(directory):
    """Replay the run in ``directory`` (it stopped on a non-finite training loss) from its last
    checkpoint (or from the start), in a temporary copy, to the failing step; ``{"step", **_first_failure}``."""
    directory = Path(directory)
    final = json.loads((directory / "final.json").read_text()) if (directory / "final.json").exists() else {}
    if "not finite" not in final.get("stopped", ""):
        raise ValueError(f"{directory} is not a finished run stopped by a non-finite loss")
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / directory.name
        shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("final.json", "best.pt"))
        config = recorded_config(copy)
        training = Run(copy, config)
        if training.checkpoint_path.exists():  # else the run stopped before its first checkpoint: from step 0
            training.load_checkpoint()
        resumed, batches, draw = training.step, [], training.task.train_batch
        training.task.train_batch = lambda *args: batches.append(draw(*args)) or batches[-1]
        training.fit()
        if training.stopped is None:
            raise ValueError(f"replaying {directory} from step {resumed} did not reproduce its stop")
        return {"step": training.step + 1, **_first_failure(training.model.eval(), batches[-1][0])}


def plot(record, path):
    """σ_min / σ_max, the numerical rank and ‖H_t‖_F / √n against the position t, one line per run."""
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(17, 4.2))
    for name, run in record["runs"].items():
        steps = np.arange(1, len(run["inverse_condition"]) + 1)
        left.plot(steps, run["inverse_condition"], label=name)
        middle.plot(steps, run["rank"], label=name)
        right.plot(steps, run["frobenius"], label=name)
    left.axhline(np.finfo(np.float32).eps, color="gray", linestyle=":", label="float32 resolution")
    left.set_yscale("log")
    right.set_yscale("log")
    for axis, label in ((left, "σ_min / σ_max of H_t (median over pieces)"),
                        (middle, f"numerical rank of H_t (σ_i > {RANK_TOLERANCE:g} σ_max; median)"),
                        (right, "‖H_t‖_F / √n (median over pieces)")):
        axis.set_xscale("log")
        axis.set_xlabel("position t in the piece (the state starts at H_0)")
        axis.set_ylabel(label)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None):
    parser = CommandParser("experiments.studies.charlm_v2.state_spectrum", __doc__)
    parser.add_argument("directories", nargs="+", type=Path, help="finished group-RNN runs (with best.pt)")
    parser.add_argument("--out", type=Path, required=True, help="the directory of the results")
    parser.add_argument("--length", type=int, default=LENGTH, help="tokens of each validation stream")
    parser.add_argument("--streams", type=int, default=STREAMS, help="validation streams per run")
    parser.add_argument("--blowup", action="store_true", help="replay runs stopped by a NaN loss to their failing step")
    args = parser.parse_args(argv)
    if not args.blowup:
        with parser.refusals():
            runs_with_best(args.directories, "the state spectrum")
    if args.blowup:
        record = {str(directory): trace_blowup(directory) for directory in args.directories}
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "blowup.json").write_text(json.dumps(record, indent=1))
        for name, trace in record.items():
            print(name, json.dumps(trace))
        return 0
    record = measure(args.directories, args.out, args.length, args.streams)
    for name, run in record["runs"].items():
        marks = [t for t in (1, 16, 128, args.length) if t <= args.length]
        print(name, " ".join(f"t={t}: σmin/σmax {run['inverse_condition'][t - 1]:.3g}, rank {run['rank'][t - 1]:g}, "
                             f"‖H‖/√n {run['frobenius'][t - 1]:.3g};" for t in marks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
