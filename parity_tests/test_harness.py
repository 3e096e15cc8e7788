"""The parity procedure itself (parity_tests.harness): it serves every model, and each of its
checks fails when the property it guards is broken (a cache ignored, a gradient missing)."""

import dataclasses

import pytest

from parity_tests import harness
from reference.config import GroupRNNConfig, GroupTransformerConfig, MLSTMConfig

SMALL = {
    "group_rnn": GroupRNNConfig(vocab_size=7, group="SO", n=3, embedding_dim=4),
    "group_transformer": GroupTransformerConfig(vocab_size=7, group="SU", n=2, num_layers=1, num_heads=2),
    "mlstm": MLSTMConfig(vocab_size=11, embedding_dim=16, num_heads=2, round_proj_up_to_multiple_of=8,
                         qkv_proj_blocksize=2, conv1d_kernel_size=2),
}
MODELS = list(SMALL)


@pytest.mark.parametrize("model", MODELS)
def test_every_model_passes_and_every_parameter_is_counted(model):
    config = SMALL[model]
    report = harness.parity(config, length=4)
    assert report["pass"] and report["model"] == model
    assert set(report["gradient_errors"]) == set(harness.adapter_for(config).reference(config).param_spec())
    assert set(report["cache_positions"].values()) == {4}
    assert {"stepwise_torch", "stepwise_reference"} <= set(report["errors"]) and not report["shapes_differ"]


@pytest.mark.parametrize("model", MODELS)
def test_a_model_that_ignores_its_cache_fails_the_stepped_check(model, monkeypatch):
    """Torch's forward run without the cache: every step restarts the sequence."""
    config = SMALL[model]
    torch_class = harness.adapter_for(config).torch
    forward = torch_class.forward
    monkeypatch.setattr(torch_class, "forward", lambda self, tokens, cache=None: forward(self, tokens))
    report = harness.parity(config, length=4)
    assert not report["pass"]
    assert not report["checks"]["outputs"] and not report["checks"]["cache_positions"]
    assert report["errors"]["stepwise_torch"] > 1e-3 and report["errors"]["stepwise_reference"] < 1e-12
    if model == "group_transformer":  # each step returned a one-token past, not the whole sequence's
        assert report["shapes_differ"] == ["stepwise_torch:cache.past"]


@pytest.mark.parametrize("model", MODELS)
def test_a_parameter_left_without_a_gradient_fails_the_gradient_check(model, monkeypatch):
    config = SMALL[model]
    adapter = harness.adapter_for(config)

    def frozen_first_parameter(*args, **kwargs):
        built = adapter.torch(*args, **kwargs)
        next(built.parameters()).requires_grad_(False)
        return built

    monkeypatch.setitem(harness.ADAPTERS, type(config), dataclasses.replace(adapter, torch=frozen_first_parameter))
    report = harness.parity(config, length=3)
    assert not report["checks"]["gradients"] and not report["pass"]
    assert report["gradient_keys"]["missing_in_torch"] == [next(iter(adapter.reference(config).param_spec()))]


def test_a_config_without_an_adapter_is_refused():
    with pytest.raises(TypeError, match="no parity adapter for dict"):
        harness.parity({"vocab_size": 5})
