"""Activation checkpointing (``--checkpoint-activations``): a Transformer's layers and every mLSTM chunk
are computed again in the backward pass, and the gradients are those of the run that keeps them."""

import json

import pytest
import torch

import manifold_impl.mlstm
from experiments.baselines import TransformerBlock
from experiments.models import MODEL_CONFIGS, build_model, checkpoint_activations, checkpointed_models
from experiments.training import loop
from experiments.training.config import TrainConfig, build_config
from manifold_impl.group_transformer import GroupTransformerLayer
from manifold_impl.losses import cross_entropy

TOKENS = torch.randint(0, 30, (3, 40), generator=torch.Generator().manual_seed(0))
MODELS = [
    ("gpt", {"width": 16, "num_heads": 2, "num_layers": 2, "dropout": 0.1}, TransformerBlock),
    ("group_transformer", {"group": "O", "n": 4, "num_heads": 2, "num_layers": 2}, GroupTransformerLayer),
    ("mlstm", {"embedding_dim": 16, "num_heads": 2, "read": "plain"}, None),
    ("mlstm", {"embedding_dim": 16, "num_heads": 2, "read": "ns"}, None),
]


def _counting(monkeypatch, layer_class):
    """A list that grows by one per call of ``layer_class``'s computation (the mLSTM's: per chunk)."""
    calls = []
    if layer_class is None:
        chunk = manifold_impl.mlstm._cell_chunk
        monkeypatch.setattr(manifold_impl.mlstm, "_cell_chunk", lambda *a: calls.append(1) or chunk(*a))
    else:
        forward = layer_class._forward
        monkeypatch.setattr(layer_class, "_forward", lambda self, *a: calls.append(1) or forward(self, *a))
    return calls


def _gradients(model, checkpointed):
    torch.manual_seed(1)  # dropout's draws
    if checkpointed:
        assert checkpoint_activations(model) > 0
    logits, _ = model(TOKENS)
    cross_entropy(logits, TOKENS).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("model_name, options, layer_class", MODELS,
                         ids=[f"{m}-{o.get('read', '')}" for m, o, _ in MODELS])
def test_checkpointed_layers_run_again_in_the_backward_pass_and_give_the_same_gradients(
        model_name, options, layer_class, monkeypatch):
    config = MODEL_CONFIGS[model_name](vocab_size=30, **options)
    calls = _counting(monkeypatch, layer_class)
    kept = _gradients(build_model(config, generator=torch.Generator().manual_seed(2)), checkpointed=False)
    forward_calls = len(calls)
    recomputed = _gradients(build_model(config, generator=torch.Generator().manual_seed(2)), checkpointed=True)
    assert forward_calls > 0
    if model_name == "mlstm" and options["read"] == "ns":  # its NS chunks are recomputed by default
        assert len(calls) == 2 * forward_calls
    else:
        assert len(calls) == 3 * forward_calls  # the kept run's, the forward pass's, the backward pass's
    assert set(kept) == set(recomputed)
    for name in kept:
        torch.testing.assert_close(recomputed[name], kept[name], rtol=1e-6, atol=1e-7, msg=name)


def test_the_models_that_have_checkpointed_modules_are_the_ones_the_option_accepts():
    for name, config_class in MODEL_CONFIGS.items():
        sizes = {"group_rnn": {"group": "O", "n": 4}, "group_transformer": {"group": "O", "n": 4},
                 "lstm": {"hidden_size": 8}, "exprnn": {"hidden_size": 8}, "gpt": {"width": 8}}.get(name, {})
        model = build_model(config_class(vocab_size=10, **sizes))
        assert (checkpoint_activations(model) > 0) == (name in checkpointed_models()), name
    with pytest.raises(ValueError, match="--model group_rnn has none .*--keep-state-every"):
        TrainConfig(model="group_rnn", checkpoint_activations=True)


def test_a_run_with_checkpointed_activations_trains_what_one_without_trains_and_resumes_with_them(tmp_path):
    """The same bits within float32 rounding; a resume may turn the option on (a run that ran out of
    memory continues with less)."""
    options = {"dataset": "tinyshakespeare", "steps": 10, "batch": 4, "length": 32, "eval_every": 5,
               "checkpoint_every": 5, "eval_tokens": 512, "width": 16, "num_heads": 2, "num_layers": 2,
               "schedule": "constant"}
    plain = loop.run(build_config("gpt", "lm", options), tmp_path / "plain")
    checkpointed = loop.run(build_config("gpt", "lm", {**options, "checkpoint_activations": True}), tmp_path / "on")
    for key in ("valid_bits", "test_bits_per_token"):
        assert checkpointed[key] == pytest.approx(plain[key], rel=1e-6), key
    loop.run(build_config("gpt", "lm", {**options, "steps": 5}), tmp_path / "resumed")
    resumed = loop.run(build_config("gpt", "lm", {**options, "checkpoint_activations": True}), tmp_path / "resumed")
    assert resumed["valid_bits"] == pytest.approx(plain["valid_bits"], rel=1e-6)
    (line,) = (tmp_path / "resumed" / "resumes.jsonl").read_text().splitlines()
    assert json.loads(line)["overrides"] == {"train.steps": [5, 10], "train.checkpoint_activations": [False, True]}
