"""The models as torch users expect them: built from keywords as ``nn.LSTM`` is, or from a config."""

import pytest
import torch

import reference.group_rnn
import reference.group_transformer
import reference.mlstm
from experiments.baselines import GPTConfig, GPTLanguageModel, LSTMConfig, LSTMLanguageModel
from manifold_impl.group_rnn import GroupRNN
from manifold_impl.group_transformer import GroupTransformer
from manifold_impl.mlstm import MLSTM
from reference.config import GroupRNNConfig, GroupTransformerConfig, MLSTMConfig

MODELS = {  # torch model, its reference twin (or None), config class, fields
    "group_rnn": (GroupRNN, reference.group_rnn.GroupRNN, GroupRNNConfig,
                  {"vocab_size": 7, "group": "SO", "n": 4, "embedding_dim": 5}),
    "group_transformer": (GroupTransformer, reference.group_transformer.GroupTransformer, GroupTransformerConfig,
                          {"vocab_size": 7, "group": "U", "n": 3, "num_layers": 1}),
    "mlstm": (MLSTM, reference.mlstm.MLSTM, MLSTMConfig, {"vocab_size": 7, "embedding_dim": 16, "num_heads": 2}),
    "lstm": (LSTMLanguageModel, None, LSTMConfig, {"vocab_size": 7, "hidden_size": 8}),
    "gpt": (GPTLanguageModel, None, GPTConfig, {"vocab_size": 7, "width": 8, "num_heads": 2, "num_layers": 1,
                                                "max_length": 16}),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_keywords_build_the_model_the_config_builds(name):
    model_class, reference_class, config_class, fields = MODELS[name]
    config = config_class(**fields)
    by_keywords = model_class(generator=torch.Generator().manual_seed(0), **fields)
    by_config = model_class(config, generator=torch.Generator().manual_seed(0))
    assert by_keywords.config == config
    for (key, value), (other, expected) in zip(by_keywords.state_dict().items(), by_config.state_dict().items()):
        assert key == other
        torch.testing.assert_close(value, expected, rtol=0, atol=0)
    if reference_class is not None:
        assert reference_class(**fields).config == config == reference_class(config).config


@pytest.mark.parametrize("name", list(MODELS))
def test_bad_keywords_are_refused_naming_the_option(name):
    model_class, _, config_class, fields = MODELS[name]
    with pytest.raises(TypeError, match=rf"unknown option 'sizes'; the options are the fields of {config_class.__name__}: vocab_size"):
        model_class(sizes=3, **fields)
    with pytest.raises(TypeError, match="missing option 'vocab_size'"):
        model_class(**{key: value for key, value in fields.items() if key != "vocab_size"})
    with pytest.raises(TypeError, match="either"):
        model_class(config_class(**fields), vocab_size=9)
    with pytest.raises(TypeError, match=f"config must be a {config_class.__name__}"):
        model_class({"vocab_size": 7})
