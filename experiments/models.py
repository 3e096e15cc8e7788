"""Registry of the trainable models: a name, its config class, and how to build it.

Every model maps ``tokens: [B, T]`` to ``(logits [B, T, V], cache)``; callers use
``logits, _ = model(tokens)``. A model joins by one ``register`` call: its name, its config class
and the dotted path of its ``nn.Module`` class (imported when first built), whose constructor is
``Model(config, device=None, dtype=None, generator=None)``.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

from experiments.baselines import ExpRNNConfig, GPTConfig, LSTMConfig
from reference.config import GroupRNNConfig, GroupTransformerConfig, MLSTMConfig


class ModelEntry(NamedTuple):
    name: str
    config_class: type
    module_class: str  # "package.module:ClassName"
    recurrent: bool  # a fixed-size state carries the whole past (no context limit)
    checkpointed: bool  # modules with ``checkpoint_activations`` (train --checkpoint-activations)


_BY_CONFIG = {}
MODEL_CONFIGS = {}  # name -> config class


def register(name, config_class, module_class, recurrent=False, checkpointed=False):
    """Add model ``name`` built from ``config_class`` instances by the class at ``module_class``;
    ``recurrent``: its state carries the whole past (evaluated with the state carried too);
    ``checkpointed``: it has modules that ``checkpoint_activations`` turns on."""
    if name in MODEL_CONFIGS or config_class in _BY_CONFIG:
        raise ValueError(f"model {name!r} or config {config_class.__name__} is already registered")
    MODEL_CONFIGS[name] = config_class
    _BY_CONFIG[config_class] = ModelEntry(name, config_class, module_class, recurrent, checkpointed)


register("group_rnn", GroupRNNConfig, "manifold_impl.group_rnn:GroupRNN", recurrent=True)
register("group_transformer", GroupTransformerConfig, "manifold_impl.group_transformer:GroupTransformer",
         checkpointed=True)
register("mlstm", MLSTMConfig, "manifold_impl.mlstm:MLSTM", recurrent=True, checkpointed=True)
register("lstm", LSTMConfig, "experiments.baselines:LSTMLanguageModel", recurrent=True)
register("gpt", GPTConfig, "experiments.baselines:GPTLanguageModel", checkpointed=True)
register("exprnn", ExpRNNConfig, "experiments.baselines:ExpRNNLanguageModel", recurrent=True)


def is_recurrent(model):
    """Whether a built model (its ``config`` of a registered class) was registered as recurrent."""
    entry = _BY_CONFIG.get(type(getattr(model, "config", None)))
    return entry is not None and entry.recurrent


def checkpointed_models():
    """The names of the models that ``--checkpoint-activations`` applies to."""
    return [entry.name for entry in _BY_CONFIG.values() if entry.checkpointed]


def checkpoint_activations(model):
    """Recompute in the backward pass what the checkpointed modules of ``model`` compute (those whose
    class has ``checkpoint_activations``: a Transformer's layers, the mLSTM's cell, every chunk),
    instead of keeping it for the backward; returns how many modules it turned on."""
    modules = [module for module in model.modules() if hasattr(type(module), "checkpoint_activations")]
    for module in modules:
        module.checkpoint_activations = True
    return len(modules)


def build_model(config, device=None, dtype=None, generator=None):
    """The torch model of a config (an instance of a class in MODEL_CONFIGS), built on ``device``.

    Every draw happens on the ``generator``'s device and is copied (``manifold_impl.draws``), so one
    CPU seed gives one model on every device.
    """
    entry = _BY_CONFIG.get(type(config))
    if entry is None:
        raise TypeError(f"no model for {type(config).__name__}; known: {[c.__name__ for c in MODEL_CONFIGS.values()]}")
    module, _, cls = entry.module_class.partition(":")
    return getattr(importlib.import_module(module), cls)(config, device=device, dtype=dtype, generator=generator)
