"""Registry of the trainable language models: a name, its config class, and how to build it.

Every model maps ``tokens: [B, T]`` to ``(logits [B, T, V], states or None)``.
"""

from __future__ import annotations

import torch

from experiments.baselines import GPTConfig, GPTLanguageModel, LSTMConfig, LSTMLanguageModel
from reference.config import GroupRNNConfig, GroupTransformerConfig, MLSTMConfig

MODEL_CONFIGS = {"group_rnn": GroupRNNConfig, "group_transformer": GroupTransformerConfig, "mlstm": MLSTMConfig,
                 "lstm": LSTMConfig, "gpt": GPTConfig}


def build_model(config, device=None, dtype=None, generator=None):
    """The torch model of a config (any class in MODEL_CONFIGS).

    With a ``generator`` on another device than ``device`` (a CPU seed for a CUDA model), the model
    is drawn where the generator lives and then moved, so one seed gives one model on every device.
    """
    if generator is not None and device is not None and torch.device(device) != generator.device:
        return build_model(config, generator.device, dtype, generator).to(device)
    if isinstance(config, GroupRNNConfig):
        from manifold_impl.group_rnn import GroupRNN

        return GroupRNN(config, device=device, dtype=dtype, generator=generator)
    if isinstance(config, GroupTransformerConfig):
        from manifold_impl.group_transformer import GroupTransformer

        return GroupTransformer(config, device=device, dtype=dtype, generator=generator)
    if isinstance(config, MLSTMConfig):
        from manifold_impl.mlstm import MLSTM

        return MLSTM(config, device=device, dtype=dtype, generator=generator)
    builders = {LSTMConfig: LSTMLanguageModel, GPTConfig: GPTLanguageModel}
    if type(config) not in builders:
        raise TypeError(f"no model for {type(config).__name__}; known: {[c.__name__ for c in MODEL_CONFIGS.values()]}")
    return builders[type(config)](config, device=device, dtype=dtype, generator=generator)
