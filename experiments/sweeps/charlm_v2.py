"""The character-level study v2 (issue 13): every arm at its own tuned learning rate, trained on
equal tokens with 3 seeds, tested at its best-validation step.

Arms (``ARMS``, each sized to ``BUDGET`` real parameters within ±2% by
``experiments.params_budget.size_to_budget``): an LSTM and a GPT; the group RNN with O (the
paper's plain update, ``map_lr="plain"``), O with scalar mixing, U, T, BO and GL; the O(n) group
Transformer; ``rnn-O-fix``, the O RNN with the fix of issue 13 item 2 (``O_FIX``: the n-aware
learning rates of its maps, ``map_lr="n_aware"``, see ``reference.config.map_lr_scales``); and a second
O shape with the fix, ``rnn-O16-fix``: n = 16 with the embedding sized to the budget (at 200k the
default sizing gives O(23) with embedding 97, where the state map U holds 67% of the parameters; at
n = 16 it holds 15% and the embedding is 823 wide). A group RNN's embedding is kept at least
``MIN_EMBEDDING`` wide (``arms``): where the sizer's closer n leaves less, the arm takes the next
smaller n and the embedding takes the rest of the budget. Only U on Penn Treebank characters is
affected: the sizer gives it U(17) with a 9-wide embedding, which learns nothing (its seed-0 run
at the searched 1e-3 reaches 4.21 validation bits at step 300, then rises while its gradient norm
grows 6 → 1,360 by step 800), while U(16)
with a 140-wide embedding reaches 2.65 bits at step 900 at the same rate; U(16) with a 9-wide
embedding fails as U(17) does, so the width, not n, decides
(experiments/studies/charlm_v2/README.md). Every arm but ``rnn-O`` trains with the default ``n_aware``, so the mixing ablation reads
``rnn-O-mix-scalar`` against ``rnn-O-fix``. A further arm (another shape of the O RNN, say) is one
more entry in ``templates``.

Recipe (``experiments.tuning``): each arm's learning rate is chosen on validation from
``experiments.sweep_run.LEARNING_RATES`` = {3e-4, 1e-3, 3e-3, 1e-2} by one seed trained for
``TUNE_STEPS``. The 300-step search cannot see a divergence that starts later (on Tiny
Shakespeare the plain O, T, BO and GL diverged at their chosen rates, from steps 300-600), so
the choice is checked at the full length: each arm's seed-0 run trains first, and if its last
validation ends more than ``STABILITY_MARGIN`` bits above its best (or its loss turns
non-finite), the arm's runs at that rate move to ``diverged/lr<rate>/`` and the arm takes its
next-best searched rate (an arm with no stable rate keeps the best-scoring one, marked
unstable). Then 3 seeds per arm train ``STEPS`` steps of 32 × 128 characters (cosine decay
after a 50-step warm-up, gradient norm clipped to 1), evaluated every 100 steps on the first
``eval_tokens`` characters of the validation split; the best-validation model is tested on the
test split, windowed and (recurrent arms) with the state carried across it in 16 contiguous
pieces. Results go to ``experiments/results/charlm_v2/<ptb_char or shakespeare>/``; the device is
chosen when each run starts.

    python -m experiments.sweep charlm-v2-shakespeare      # then: python -m experiments.report DIR
    python -m experiments.sweep charlm-v2-ptb

(``python -m experiments.train --preset charlm-v2-ptb/rnn-O-seed0`` trains one run at the arm's
rate in ``chosen_rates.json``, as the sweep did; before the sweep has chosen it, at the placeholder
``TRAINING["lr"]``.)

Cost (one thread, 32 × 128, median of 4 steps, measured at commit e93958d beside a 2-worker sweep
on the shared 2-core machine), seconds per step: LSTM 0.11, GPT 0.14, O 0.43, O scalar 0.44, U 0.63,
T(203) 0.16, BO(280) 0.23 (since the states stay packed), GL 0.71, O Transformer 0.47, O-fix 0.52.
Each arm trains 3 × STEPS + 4 × TUNE_STEPS = 7,200 steps; all eleven arms take about 20,000
worker-seconds per dataset with evaluations, about 3 hours on two workers, so both datasets fit in
about 6 hours; each rate an arm diverges at costs its seed-0 run (and any seeds already run)
again. The LSTM's best step must fall inside its run: on Tiny Shakespeare STEPS is about 7 epochs
of its training split; on Penn Treebank characters about 1.5, where it may not.
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
SECOND_SHAPE_N = 16  # the second O shape (issue 13 item 5): n fixed, the embedding takes the budget
SECOND_SHAPE = f"rnn-O{SECOND_SHAPE_N}-fix"
FREE = {SECOND_SHAPE: "embedding_dim"}
MIN_EMBEDDING = 32  # the sizer's default width (params_budget); U(17) on PTB, 9 wide, does not learn
O_FIX = {"map_lr": "n_aware"}  # options of the O RNN's fix (issue 13 item 2), GroupRNNConfig fields or
# run options; non-empty: adds the arm rnn-O-fix


def _split_fix():
    """``O_FIX`` as (its GroupRNNConfig fields, its other run options)."""
    fields = {f.name for f in dataclasses.fields(GroupRNNConfig)}
    return ({k: v for k, v in O_FIX.items() if k in fields}, {k: v for k, v in O_FIX.items() if k not in fields})


def templates(vocab_size, length=None):
    """``{arm: (model name, config template)}``: ``ARMS`` from the first study, ``rnn-O-fix``, and the
    second O shape ``rnn-O{SECOND_SHAPE_N}-fix`` (sized along its embedding width, ``FREE``)."""
    first = lm_arms.templates(vocab_size, length)
    chosen = {name: first[name] for name in ARMS}
    if O_FIX:
        chosen["rnn-O-fix"] = ("group_rnn", dataclasses.replace(first["rnn-O"][1], **_split_fix()[0]))
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
    takes ``PLAIN``'s options and ``rnn-O-fix`` the run options of ``O_FIX``."""
    extra = {"rnn-O": PLAIN, "rnn-O-fix": _split_fix()[1], SECOND_SHAPE: _split_fix()[1]}
    training = TRAINING if training is None else training
    every = lm_arms.runs_of(arms(vocab_size, budget, training["length"]), dataset, training, seeds)
    return [dataclasses.replace(run, options={**run.options, **extra.get(arm_of(run.name), {})}) for run in every]
