"""The character-level language-model study (issue "Experiments I", item 6), at CPU scale.

Arms, all sized to one budget (``BUDGET`` real parameters, within ±2%, by
``experiments.params_budget.size_to_budget``): the group RNN with O, SO, U, SU, T, BO and GL; the
mixing ablation of the O(n) RNN (``none`` is the O arm; ``scalar``; ``lowrank`` of rank 4); the
O(n) group Transformer (2 layers, 2 heads, algebra attention); an LSTM and a GPT (2 layers,
4 heads). ``SEEDS`` seeds per arm. One training recipe for every arm: AdamW / RiemannianAdam at
``LR`` with a 20-step warm-up and cosine decay over ``STEPS`` steps of 32 × 128 tokens.

Cost measured on the 2-core CPU machine (one torch thread per worker, two workers): about
0.5–0.75 s per step for the group models and 0.15–0.25 s for the baselines at 0.5M parameters,
so one dataset (36 runs of 400 steps) takes about an hour.
"""

from __future__ import annotations

import dataclasses

from experiments.baselines import GPTConfig, LSTMConfig
from experiments.params_budget import size_to_budget
from experiments.sweep_run import SweepRun
from reference.config import GroupRNNConfig, GroupTransformerConfig

BUDGET = 500_000
SEEDS = (0, 1, 2)
STEPS = 400
LR = 1e-3
TRAINING = {"steps": STEPS, "batch": 32, "length": 128, "lr": LR, "schedule": "cosine", "warmup": 20,
            "eval_every": 100, "eval_tokens": 20_000, "checkpoint_every": 100,
            "map_lr": "plain"}  # the committed runs (before issue 13's n-aware rates) used one rate
GROUPS = ("O", "SO", "U", "SU", "T", "BO", "GL")


def templates(vocab_size, length=None):
    """``{arm name: (model name, config template)}`` of this study; ``length``: the GPT's maximum length."""
    sized = {f"rnn-{group}": ("group_rnn", GroupRNNConfig(vocab_size=vocab_size, group=group)) for group in GROUPS}
    sized["rnn-O-mix-scalar"] = ("group_rnn", GroupRNNConfig(vocab_size=vocab_size, group="O", mixing="scalar"))
    sized["rnn-O-mix-lowrank"] = ("group_rnn", GroupRNNConfig(vocab_size=vocab_size, group="O", mixing="lowrank",
                                                              mixing_rank=4))
    sized["transformer-O"] = ("group_transformer", GroupTransformerConfig(vocab_size=vocab_size, group="O",
                                                                          num_layers=2, num_heads=2))
    sized["lstm"] = ("lstm", LSTMConfig(vocab_size=vocab_size, hidden_size=1))
    sized["gpt"] = ("gpt", GPTConfig(vocab_size=vocab_size, width=4, max_length=length or TRAINING["length"]))
    return sized


def arms(vocab_size, budget=BUDGET, length=None, study=templates, free=None):
    """``{arm name: (model name, config sized to ``budget``)}`` of ``study(vocab_size, length)``'s templates;
    ``free``: ``{arm: the size field(s) to search}`` where not the family's default (``size_to_budget``)."""
    free = free or {}
    return {name: (model, size_to_budget(template, budget, free=free.get(name)))
            for name, (model, template) in study(vocab_size, length).items()}


def runs(dataset, vocab_size, budget=BUDGET, training=None, seeds=SEEDS, study=templates, free=None):
    """Every (arm, seed) of a study on ``dataset`` as SweepRuns (defaults: this CPU study's arms and
    recipe); ``study``: a function ``(vocab_size, length) -> {arm: (model name, config template)}``;
    ``free``: as in ``arms``."""
    training = TRAINING if training is None else training
    return runs_of(arms(vocab_size, budget, training["length"], study, free), dataset, training, seeds)


def runs_of(sized, dataset, training, seeds):
    """SweepRuns ``<arm>-seed<seed>`` of sized arms (``{arm: (model name, config)}``, as ``arms``
    returns them) on ``dataset`` with the ``training`` options."""
    result = []
    for name, (model, config) in sized.items():
        fields = {k: v for k, v in dataclasses.asdict(config).items() if k != "vocab_size" and v is not None}
        for seed in seeds:
            result.append(SweepRun(f"{name}-seed{seed}", model, "lm",
                                   {**fields, "dataset": dataset, **training, "seed": seed}))
    return result
