"""The arms of a language-model comparison, sized to one parameter budget, as SweepRuns.

``templates``: the group RNN with every group, the O RNN's mixing ablation, the O group
Transformer, an LSTM and a GPT; ``arms`` sizes a study's templates to a budget
(``experiments.params_budget.size_to_budget``, ±2%); ``runs``/``runs_of`` make the SweepRuns
``<arm>-seed<k>`` of sized arms on a dataset with one set of training options.
"""

from __future__ import annotations

import dataclasses

from experiments.baselines import GPTConfig, LSTMConfig
from experiments.params_budget import size_to_budget
from experiments.sweep_run import SweepRun
from reference.config import GroupRNNConfig, GroupTransformerConfig

GROUPS = ("O", "SO", "U", "SU", "T", "BO", "GL")
GPT_LENGTH = 128  # the GPT's maximum length where a caller gives none


def templates(vocab_size, length=None):
    """``{arm name: (model name, config template)}``; ``length``: the GPT's maximum length."""
    sized = {f"rnn-{group}": ("group_rnn", GroupRNNConfig(vocab_size=vocab_size, group=group)) for group in GROUPS}
    sized["rnn-O-mix-scalar"] = ("group_rnn", GroupRNNConfig(vocab_size=vocab_size, group="O", mixing="scalar"))
    sized["rnn-O-mix-lowrank"] = ("group_rnn", GroupRNNConfig(vocab_size=vocab_size, group="O", mixing="lowrank",
                                                              mixing_rank=4))
    sized["transformer-O"] = ("group_transformer", GroupTransformerConfig(vocab_size=vocab_size, group="O",
                                                                          num_layers=2, num_heads=2))
    sized["lstm"] = ("lstm", LSTMConfig(vocab_size=vocab_size, hidden_size=1))
    sized["gpt"] = ("gpt", GPTConfig(vocab_size=vocab_size, width=4, max_length=length or GPT_LENGTH))
    return sized


def arms(vocab_size, budget, length=None, study=templates, free=None):
    """``{arm name: (model name, config sized to ``budget``)}`` of ``study(vocab_size, length)``'s templates;
    ``free``: ``{arm: the size field(s) to search}`` where not the family's default (``size_to_budget``)."""
    free = free or {}
    return {name: (model, size_to_budget(template, budget, free=free.get(name)))
            for name, (model, template) in study(vocab_size, length).items()}


def runs(dataset, vocab_size, budget, training, seeds, study=templates, free=None):
    """Every (arm, seed) of ``study``'s arms (a function ``(vocab_size, length) -> {arm: (model name,
    config template)}``) at ``budget`` on ``dataset`` as SweepRuns; ``free``: as in ``arms``."""
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
