"""Training-step throughput of the O(n) group Transformer ÷ a parameter-matched GPT baseline."""

from __future__ import annotations

import numpy as np
import torch

from experiments.baselines import GPTConfig
from experiments.bench.timing import alternate, row, training_step
from experiments.models import build_model
from experiments.params_budget import parameter_count, size_to_budget
from manifold_impl.optim import AdamW, RiemannianAdam
from reference.config import GroupTransformerConfig


def run(quick=False, device="cpu"):
    batch, length = (8, 32) if quick else (32, 128)
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 65, size=(batch, length + 1))).to(device)
    config = GroupTransformerConfig(vocab_size=65, group="O", n=8, num_layers=2, num_heads=2, attention="algebra")
    gpt = size_to_budget(GPTConfig(vocab_size=65, width=8, num_layers=2, num_heads=2, max_length=length),
                         parameter_count(config))
    transformer, baseline = build_model(config, device=device), build_model(gpt, device=device)
    times = alternate({"group_transformer": training_step(transformer, RiemannianAdam(transformer.parameters(), lr=1e-3),
                                                          tokens),
                       "gpt": training_step(baseline, AdamW(baseline.parameters(), lr=1e-3), tokens)},
                      repeats=2 if quick else 5, device=device)
    return [row(f"group Transformer O(8) 2 layers 2 heads step tokens/s / GPT (batch {batch}, length {length})",
                times["gpt"] / times["group_transformer"], ">=", 0.3, seconds=times,
                parameters={"group_transformer": parameter_count(config), "gpt": parameter_count(gpt)})]
