"""The model arms of the state-tracking and copy studies (issue 14 items 2, 3 and 5), shared by the
``state-tracking`` and ``copy`` presets.

Arms (``arms``), every one sized to one parameter budget per task by
``experiments.params_budget`` (within ±2%; the mLSTM, whose inner width moves in steps, within
±``MLSTM_TOLERANCE``; the learned-position GPT on long copy sequences within ±``COARSE_TOLERANCE``):

* ``rnn-{G}-input`` and ``rnn-{G}-rec``: the group RNN with G ∈ {SO, U, T, BO}, input-driven
  (``recurrent=False``: the updates depend on the token only, run as an associative scan) and
  recurrent (the state term U(H_{t−1}) in the update); SO stands for SO/O (one Lie algebra; the
  state's exponentials lie in SO(n)). Sized along n, then the embedding width.
* ``lstm``: one layer, sized along the hidden size.
* ``gpt-learned``: 2 layers, 2 heads, learned absolute positions. Its count is matched at the
  training length (positions past it never receive a gradient and are not counted); the built
  model holds ``max_length`` = the longest test length, so it can be evaluated there at all.
* ``gpt-rotary``, ``gpt-alibi``: the same GPT with rotary / ALiBi positions (no parameters, no
  length limit; ``experiments.positions``).
* ``mlstm-plain``, ``mlstm-ns``: the mLSTM (2 heads) with the plain and the Newton–Schulz read.
* ``gtf-SO``: the SO(n) group Transformer (2 layers, 2 heads, algebra attention).

Remedy arms (``remedy_arms``, issue 14 item 3): the input-driven group RNNs trained with a length
curriculum (``curriculum_steps``; the probe in experiments/results/state_tracking/
so2_parity_probe.txt found that short sequences first let the SO(2) parity clock θ_0 settle in its
basin, which is wide only at short lengths), and (``spread_arms``) the same arms initialised with
every token's rotation angles spread over [0, π] (``GroupRNNConfig.input_init = "spread"``; the
probe's other remedy), otherwise the same config.
"""

from __future__ import annotations

import dataclasses

from experiments.baselines import GPTConfig, LSTMConfig
from experiments.params_budget import parameter_count, size_to_budget
from experiments.positions import POSITIONS
from experiments.sweep_run import SweepRun
from reference.config import GroupRNNConfig, GroupTransformerConfig, MLSTMConfig

RNN_GROUPS = ("SO", "U", "T", "BO")
GPT_POSITION_SCHEMES = tuple(scheme for scheme in POSITIONS if scheme != "learned")  # rotary, ALiBi
MLSTM_TOLERANCE = 0.1
COARSE_TOLERANCE = 0.25
LR = 1e-2
ATTENTION_LR = 3e-3
WARMUP = 10
MLSTM_TEMPLATE = {"num_heads": 2, "proj_factor": 2.0, "round_proj_up_to_multiple_of": 4, "qkv_proj_blocksize": 4}


def _mlstm_to_budget(vocab_size, target, read):
    """The mLSTM (``MLSTM_TEMPLATE``) whose embedding width puts its count closest to ``target``
    (bisection: the count grows with the width); ValueError beyond ``MLSTM_TOLERANCE``."""

    def config(width):
        return MLSTMConfig(vocab_size=vocab_size, embedding_dim=width, read=read, **MLSTM_TEMPLATE)

    low, high = 1, 1
    while parameter_count(config(high)) < target:
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if parameter_count(config(middle)) < target else (low, middle)
    best = min((config(low), config(high)), key=lambda c: abs(parameter_count(c) - target))
    if abs(parameter_count(best) - target) > MLSTM_TOLERANCE * target:
        raise ValueError(f"no mLSTM width within ±{MLSTM_TOLERANCE:.0%} of {target:,} parameters "
                         f"(nearest {parameter_count(best):,})")
    return best


def _to_budget(template, budget):
    """``size_to_budget`` within ±2%, else within ±``COARSE_TOLERANCE`` (the learned-position GPT at the
    copy task's lengths, where one width step adds ``max_length`` parameters)."""
    try:
        return size_to_budget(template, budget)
    except ValueError:
        return size_to_budget(template, budget, tolerance=COARSE_TOLERANCE)


def arms(vocab_size, budget, train_length, test_length):
    """``{arm: (model name, config)}``, every config sized to ``budget`` parameters (module docstring).

    ``train_length``: the longest training sequence (the learned-position GPT's matched count);
    ``test_length``: the longest evaluated one (that GPT's ``max_length``).
    """
    sized = {}
    for group in RNN_GROUPS:
        for recurrent, label in ((False, "input"), (True, "rec")):
            sized[f"rnn-{group}-{label}"] = ("group_rnn", size_to_budget(
                GroupRNNConfig(vocab_size=vocab_size, group=group, recurrent=recurrent), budget))
    sized["lstm"] = ("lstm", size_to_budget(LSTMConfig(vocab_size=vocab_size, hidden_size=1), budget))
    learned = _to_budget(GPTConfig(vocab_size=vocab_size, width=2, num_heads=2, max_length=train_length), budget)
    sized["gpt-learned"] = ("gpt", dataclasses.replace(learned, max_length=max(train_length, test_length)))
    for scheme in GPT_POSITION_SCHEMES:
        sized[f"gpt-{scheme}"] = ("gpt", size_to_budget(
            GPTConfig(vocab_size=vocab_size, width=4, num_heads=2, positions=scheme), budget))
    for read in ("plain", "ns"):
        sized[f"mlstm-{read}"] = ("mlstm", _mlstm_to_budget(vocab_size, budget, read))
    sized["gtf-SO"] = ("group_transformer", size_to_budget(
        GroupTransformerConfig(vocab_size=vocab_size, group="SO", num_layers=2, num_heads=2), budget))
    return sized


def remedy_arms(sized):
    """The input-driven group-RNN arms of ``sized`` (the ones the curriculum remedy is tried on)."""
    return {name: entry for name, entry in sized.items() if name.startswith("rnn-") and name.endswith("-input")}


def spread_arms(sized):
    """``{arm-spread: entry}``: the arms of ``remedy_arms`` with ``input_init = "spread"``."""
    return {f"{name}-spread": (model, dataclasses.replace(config, input_init="spread"))
            for name, (model, config) in remedy_arms(sized).items()}


def training(model, steps, batch):
    """The TrainConfig fields of an arm: ``steps`` of ``batch``, AdamW / RiemannianAdam at ``LR``
    (``ATTENTION_LR`` for the two attention models, whose usual rates are lower), a warm-up of
    ``WARMUP`` steps (at most a tenth of the run), cosine decay, validation only at the end."""
    lr = ATTENTION_LR if model in ("gpt", "group_transformer") else LR
    return {"steps": steps, "batch": batch, "lr": lr, "schedule": "cosine", "warmup": min(WARMUP, steps // 10),
            "eval_every": steps, "checkpoint_every": max(1, steps // 3)}


def model_options(config):
    """A sized config as SweepRun options: its fields except the vocabulary, the None ones and a default
    ``input_init`` (the runs named before that field existed keep their options)."""
    return {k: v for k, v in dataclasses.asdict(config).items()
            if k != "vocab_size" and v is not None and (k, v) != ("input_init", "default")}


def sweep_runs(cell, task, sized, training, seeds, task_options):
    """SweepRuns ``{cell}-{arm}-seed{k}`` of every arm in ``sized`` on ``task`` (``training``: the
    TrainConfig fields, ``task_options``: the task's)."""
    return [SweepRun(f"{cell}-{arm}-seed{seed}", model, task,
                     {**model_options(config), **task_options, **training, "seed": seed})
            for arm, (model, config) in sized.items() for seed in seeds]
