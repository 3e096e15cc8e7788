"""The model arms of the state-tracking study, shared by its ``state-tracking`` and ``copy`` presets.

``arms``: every arm sized to one parameter budget per task by ``experiments.params_budget``
(within ±2%; the mLSTM within ±``MLSTM_TOLERANCE``, the learned-position GPT on long copy sequences
within ±``COARSE_TOLERANCE``): the group RNN with G ∈ {SO, U, T, BO}, input-driven (``rnn-G-input``)
and recurrent (``rnn-G-rec``); ``lstm``; GPTs with learned, rotary and ALiBi positions; the mLSTM
with the plain and the Newton–Schulz read; the SO(n) group Transformer (``gtf-SO``).
``remedy_arms`` and ``spread_arms``: the input-driven group RNNs with a length curriculum
(``-curriculum``) and with ``input_init="spread"`` (``-spread``); README.md says why.
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
