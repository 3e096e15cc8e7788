"""The v2 character-level study's arms and recipe: every arm at its own tuned learning rate, trained on
equal tokens with ``SEEDS`` seeds, tested at its best-validation step.

Arms (``templates``, sized to ``BUDGET`` by ``experiments.lm_arms.arms``): ``ARMS`` of the
templates of ``experiments.lm_arms``; ``rnn-O-naware``, the O RNN with ``O_FIX`` (n-aware map rates);
``rnn-O16-naware``, n = 16 with the embedding taking the budget. ``rnn-O`` trains with the plain
rate (``PLAIN``); a group RNN's embedding is kept at least ``MIN_EMBEDDING`` wide (``arms``).
Recipe: ``TUNING`` searches ``experiments.sweep_run.LEARNING_RATES`` on ``TUNE_STEPS`` steps, checks
the choice at full length (``STABILITY_MARGIN``), then ``STEPS`` steps of 32 × 128 per run.
Presets ``charlm-v2-ptb`` and ``charlm-v2-shakespeare``; why each choice, and the costs: README.md.
"""

from __future__ import annotations

import dataclasses

from experiments.params_budget import size_to_budget
from experiments.sweep_run import Tuning, arm_of
from experiments import lm_arms
from reference.config import GroupRNNConfig

BUDGET = 200_000
SEEDS = (0, 1, 2)
STEPS = 2000
TUNE_STEPS = 300
TRAINING = {"steps": STEPS, "batch": 32, "length": 128, "lr": 1e-3, "schedule": "cosine", "warmup": 50,
            "eval_every": 100, "eval_tokens": 100_000, "checkpoint_every": 100, "carried_streams": 16,
            "device": "auto"}  # lr: replaced by each arm's chosen rate
STABILITY_MARGIN = 0.25  # bits: on Tiny Shakespeare the diverged seed-0 runs ended 0.45-1.4 above their
# best, every other run within 0.001 of it
TUNING = Tuning(options={"steps": TUNE_STEPS}, stability_margin=STABILITY_MARGIN)
ARMS = ("lstm", "gpt", "rnn-O", "rnn-O-mix-scalar", "rnn-U", "rnn-T", "rnn-BO", "rnn-GL", "transformer-O")
PLAIN = {"map_lr": "plain"}  # run options of the plain O arm rnn-O: the paper's single learning rate
SECOND_SHAPE_N = 16  # the second O shape: n fixed, the embedding takes the budget
SECOND_SHAPE = f"rnn-O{SECOND_SHAPE_N}-naware"
FREE = {SECOND_SHAPE: "embedding_dim"}
MIN_EMBEDDING = 32  # the sizer's default width (params_budget); U(17) on PTB, 9 wide, does not learn
O_FIX = {"map_lr": "n_aware"}  # options of the O RNN's fix, GroupRNNConfig fields or
# run options; non-empty: adds the arm rnn-O-naware


def _split_fix():
    """``O_FIX`` as (its GroupRNNConfig fields, its other run options)."""
    fields = {f.name for f in dataclasses.fields(GroupRNNConfig)}
    return ({k: v for k, v in O_FIX.items() if k in fields}, {k: v for k, v in O_FIX.items() if k not in fields})


def templates(vocab_size, length=None):
    """``{arm: (model name, config template)}``: ``ARMS`` from the first study, ``rnn-O-naware``, and the
    second O shape ``rnn-O{SECOND_SHAPE_N}-naware`` (sized along its embedding width, ``FREE``)."""
    first = lm_arms.templates(vocab_size, length)
    chosen = {name: first[name] for name in ARMS}
    if O_FIX:
        chosen["rnn-O-naware"] = ("group_rnn", dataclasses.replace(first["rnn-O"][1], **_split_fix()[0]))
    chosen[SECOND_SHAPE] = ("group_rnn", dataclasses.replace(first["rnn-O"][1], n=SECOND_SHAPE_N,
                                                             **_split_fix()[0]))
    return chosen


def arms(vocab_size, budget=BUDGET, length=None):
    """``{arm: (model name, config sized to ``budget``)}``: ``templates`` sized by ``lm_arms.arms``,
    then each group RNN whose embedding came out narrower than ``MIN_EMBEDDING`` sized again at
    the next smaller n (``block`` smaller for BO) along its embedding alone."""
    sized = lm_arms.arms(vocab_size, budget, length, templates, FREE)
    for arm, (model, config) in sized.items():
        if model == "group_rnn" and config.embedding_dim < MIN_EMBEDDING:
            smaller = dataclasses.replace(config, n=config.n - (config.block or 1))
            sized[arm] = (model, size_to_budget(smaller, budget, free="embedding_dim"))
    return sized


def runs(dataset, vocab_size, budget=BUDGET, training=None, seeds=SEEDS):
    """Every (arm, seed) of the v2 study on ``dataset`` (its learning rates still to be tuned); ``rnn-O``
    takes ``PLAIN``'s options and ``rnn-O-naware`` the run options of ``O_FIX``."""
    extra = {"rnn-O": PLAIN, "rnn-O-naware": _split_fix()[1], SECOND_SHAPE: _split_fix()[1]}
    training = TRAINING if training is None else training
    every = lm_arms.runs_of(arms(vocab_size, budget, training["length"]), dataset, training, seeds)
    return [dataclasses.replace(run, options={**run.options, **extra.get(arm_of(run.name), {})}) for run in every]
