"""Training-step throughput of the group RNN ÷ a parameter-matched ``nn.LSTM`` language model (O(24)
and U(24) at batch 32 × 128, the demo's O(16) at 32 × 64, T and BO(2×2 blocks) sized to 0.5M
parameters), of the leaky update's fused step ÷ its loop, and of the reference's training step ÷ the
torch one (information). Each row times its contenders alternately in one process (``alternate``).
"""

from __future__ import annotations

import dataclasses

import autograd
import numpy as np
import torch

from experiments.baselines import LSTMConfig
from experiments.bench.timing import alternate, row
from experiments.bench.timing import training_step as timed_step
from experiments.demo import VOCABULARY as DEMO_VOCABULARY
from experiments.models import build_model
from experiments.params_budget import parameter_count, size_to_budget
from manifold_impl.group_rnn import GroupRNN
from manifold_impl.optim import RiemannianAdam
from reference.config import GroupRNNConfig
from reference.group_rnn import GroupRNN as ReferenceGroupRNN
from reference.losses import cross_entropy as reference_cross_entropy
from reference.optim import RiemannianAdam as ReferenceRiemannianAdam
from reference.optim import ambient_gradients


def training_step(model, tokens):
    return timed_step(model, RiemannianAdam(model.parameters(), lr=1e-3), tokens)


def lstm_matched_cases(quick=False):
    """``(label, group-RNN config, batch, length, target)`` per row; quick: smaller shapes and a 20k budget."""
    batch, length = (8, 32) if quick else (32, 128)
    demo_batch, demo_length = (8, 32) if quick else (32, 64)
    budget = 20_000 if quick else 500_000
    sized = {group: size_to_budget(GroupRNNConfig(vocab_size=65, group=group, block=block), budget)
             for group, block in (("T", None), ("BO", 2))}
    return [
        ("O(24)", GroupRNNConfig(vocab_size=65, group="O", n=24, embedding_dim=64), batch, length, 0.5),
        ("U(24)", GroupRNNConfig(vocab_size=65, group="U", n=24, embedding_dim=64), batch, length, 0.35),
        # the demo's model (experiments.demo: O(16), embedding 32, Penn Treebank characters)
        ("demo O(16)", GroupRNNConfig(vocab_size=DEMO_VOCABULARY, group="O", n=16, embedding_dim=32), demo_batch,
         demo_length, 0.3),
        (f"T sized to {budget:,} parameters (T({sized['T'].n}))", sized["T"], batch, length, 0.7),
        (f"BO 2×2 blocks sized to {budget:,} parameters (BO({sized['BO'].n}))", sized["BO"], batch, length, 0.5),
    ]


def matched_contenders(config, batch, length, device):
    """``(contenders, lstm)``: training steps of the group RNN of ``config`` and of the LSTM
    ``lstm`` matched to its parameter count, on the same random tokens ``[batch, length + 1]``."""
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, config.vocab_size, size=(batch, length + 1)))
    tokens = tokens.to(device)
    lstm = size_to_budget(LSTMConfig(vocab_size=config.vocab_size, hidden_size=1), parameter_count(config))
    return {"group_rnn": training_step(GroupRNN(config, device=device), tokens),
            "lstm": training_step(build_model(lstm, device=device), tokens)}, lstm


def versus_lstm(quick=False, device="cpu"):
    rows = []
    for label, config, batch, length, target in lstm_matched_cases(quick):
        contenders, lstm = matched_contenders(config, batch, length, device)
        times = alternate(contenders, repeats=2 if quick else 5, device=device)
        rows.append(row(f"group RNN {label} step tokens/s / matched LSTM (batch {batch}, length {length})",
                        times["lstm"] / times["group_rnn"], ">=", target, seconds=times,
                        config={"group": config.group, "n": config.n, "block": config.block,
                                "embedding_dim": config.embedding_dim, "vocab_size": config.vocab_size},
                        lstm_hidden=lstm.hidden_size,
                        parameters={"group_rnn": parameter_count(config), "lstm": parameter_count(lstm)}))
    return rows


def forget_fused_versus_loop(quick=False, device="cpu"):
    """The leaky update with the gate (``GroupRNNConfig.forget``) at the gap study's screen shape, O(16)
    with embedding 63 and α ≤ 0.45, batch 32 × 128 (quick: 8 × 32): the fused recurrence's step
    against the loop's (target: at least as fast), and its cost against the paper's update (fused,
    information)."""
    batch, length = (8, 32) if quick else (32, 128)
    leaky = GroupRNNConfig(vocab_size=50, group="O", n=16, embedding_dim=63, forget="gate", forget_alpha=0.45)
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 50, size=(batch, length + 1))).to(device)
    configs = {"fused": leaky, "loop": dataclasses.replace(leaky, recurrence="loop"),
               "paper_fused": dataclasses.replace(leaky, forget="none", forget_alpha=None)}
    times = alternate({name: training_step(GroupRNN(config, device=device), tokens) for name, config in configs.items()},
                      repeats=2 if quick else 5, device=device)
    shape = f"O(16), gate α ≤ 0.45, batch {batch}, length {length}"
    return [row(f"leaky update fused step tokens/s / its loop ({shape})", times["loop"] / times["fused"], ">=", 1.0,
                seconds=times),
            row(f"leaky update fused step time / the paper's update fused ({shape})",
                times["fused"] / times["paper_fused"], seconds=times)]


def reference_versus_torch(quick=False, device="cpu"):
    """Both in float64 on a small configuration: O(16), batch 16, length 64 (quick: O(6), 4 × 16); the
    reference on the CPU, torch on ``device``."""
    n, batch, length, embedding = (6, 4, 16, 8) if quick else (16, 16, 64, 32)
    config = GroupRNNConfig(vocab_size=20, group="O", n=n, embedding_dim=embedding)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 20, size=(batch, length + 1))
    reference = ReferenceGroupRNN(config)
    params = reference.init_params(rng)
    optimizer = ReferenceRiemannianAdam(reference.param_spec(), lr=1e-3)

    def loss(p):
        return reference_cross_entropy(reference.forward(p, tokens[:, :-1])[0], tokens[:, 1:])

    def reference_step():
        optimizer.step(params, ambient_gradients(autograd.grad(loss)(params)))

    times = alternate({"reference": reference_step,
                       "torch": training_step(GroupRNN(config, device=device, dtype=torch.float64),
                                              torch.from_numpy(tokens).to(device))},
                      repeats=2 if quick else 5, device=device)
    return [row(f"reference training step time / torch (O({n}), batch {batch}, length {length}, float64)",
                times["reference"] / times["torch"], seconds=times)]


def run(quick=False, device="cpu"):
    return versus_lstm(quick, device) + forget_fused_versus_loop(quick, device) + reference_versus_torch(quick, device)
