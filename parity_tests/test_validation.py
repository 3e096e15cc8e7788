"""Bad input raises a clear ValueError/TypeError naming the problem, before any work."""

import importlib

import numpy as np
import pytest
import torch

from manifold_impl.group_rnn import GroupRNN as TorchGroupRNN
from manifold_impl.group_rnn import GroupRNNCache as TorchGroupRNNCache
from reference.config import GroupRNNConfig, GroupTransformerConfig, MLSTMConfig
from reference.group_rnn import GroupRNN, GroupRNNCache

CONFIG = GroupRNNConfig(vocab_size=10, group="SO", n=3)

BAD_TOKENS = {
    "too-large": (np.array([[1, 10]]), ValueError, "token id 10 is out of range"),
    "negative": (np.array([[-1, 2]]), ValueError, "token id -1 is out of range"),
    "rank-1": (np.array([1, 2]), ValueError, r"shape \[batch, length\]"),
    "rank-3": (np.zeros((1, 2, 2), dtype=np.int64), ValueError, r"shape \[batch, length\]"),
    "floats": (np.array([[1.0, 2.0]]), TypeError, "must be integers"),
    "empty": (np.zeros((1, 0), dtype=np.int64), ValueError, "empty"),
}


class Forbidden:
    """Stands in for the cell: any call means work started before validation."""

    def __call__(self, *args, **kwargs):
        raise AssertionError("the cell ran before the input was validated")

    step = __call__


@pytest.mark.parametrize("case", list(BAD_TOKENS))
def test_reference_rejects_bad_tokens_before_any_work(case):
    tokens, error, message = BAD_TOKENS[case]
    model = GroupRNN(CONFIG)
    params = model.init_params(np.random.default_rng(0))
    model.cell = Forbidden()
    with pytest.raises(error, match=message):
        model.forward(params, tokens)


@pytest.mark.parametrize("case", list(BAD_TOKENS))
def test_torch_rejects_bad_tokens_before_any_work(case):
    tokens, error, message = BAD_TOKENS[case]
    model = TorchGroupRNN(CONFIG)
    model.cell.forward = Forbidden()
    with pytest.raises(error, match=message):
        model(torch.from_numpy(tokens))


def test_torch_rejects_non_tensor_tokens():
    with pytest.raises(TypeError, match="torch.Tensor"):
        TorchGroupRNN(CONFIG)([[1, 2]])


def test_both_trees_reject_an_initial_state_off_the_group():
    reflection = np.diag([1.0, 1.0, -1.0])[None]
    tokens = np.array([[1, 2]])
    model = GroupRNN(CONFIG)
    with pytest.raises(ValueError, match="state is not on.*det"):
        model.forward(model.init_params(np.random.default_rng(0)), tokens, GroupRNNCache(reflection, 0))
    with pytest.raises(ValueError, match="state is not on.*det"):
        TorchGroupRNN(CONFIG, dtype=torch.float64)(torch.from_numpy(tokens),
                                                   TorchGroupRNNCache(torch.from_numpy(reflection), 0))
    with pytest.raises(ValueError, match="state must have shape"):
        TorchGroupRNN(CONFIG)(torch.from_numpy(tokens), TorchGroupRNNCache(torch.eye(3), 0))


BAD_CONFIGS = {
    "n-zero": ({"n": 0}, ValueError, "n must be at least 1"),
    "n-float": ({"n": 2.0}, TypeError, "n must be an int"),
    "unknown-group": ({"group": "Sp"}, ValueError, "unknown group 'Sp'"),
    "bo-divisibility": ({"group": "BO", "n": 5}, ValueError, "divisible by the block size"),
    "bo-block-size": ({"group": "BO", "n": 6, "block": 4}, ValueError, "divisible by the block size"),
    "block-not-bo": ({"group": "O", "block": 2}, ValueError, "only applies to group 'BO'"),
    "dim-zero": ({"group": "SU", "n": 1}, ValueError, "0-dimensional Lie algebra"),
    "vocab": ({"vocab_size": 0}, ValueError, "vocab_size must be at least 1"),
    "readout": ({"readout": "softmax"}, ValueError, "unknown readout"),
    "mixing": ({"mixing": "full"}, ValueError, "unknown mixing"),
    "lowrank-no-rank": ({"mixing": "lowrank"}, ValueError, "needs mixing_rank"),
    "rank-without-lowrank": ({"mixing_rank": 2}, ValueError, "only applies to mixing='lowrank'"),
    "reproject-zero": ({"reproject_every": 0}, ValueError, "reproject_every must be at least 1"),
    "recurrent-not-bool": ({"recurrent": 1}, TypeError, "recurrent must be a bool"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_invalid_configs_are_refused(case):
    fields, error, message = BAD_CONFIGS[case]
    with pytest.raises(error, match=message):
        GroupRNNConfig(**{"vocab_size": 10, **fields})


def test_the_config_is_frozen():
    with pytest.raises(AttributeError):
        CONFIG.n = 4



MODELS = {  # module: (class name, config)
    "group_rnn": ("GroupRNN", GroupRNNConfig(vocab_size=10, group="SO", n=3)),
    "group_transformer": ("GroupTransformer", GroupTransformerConfig(vocab_size=10, group="SO", n=3, num_layers=1)),
    "mlstm": ("MLSTM", MLSTMConfig(vocab_size=10)),
}
BAD_CACHES = {
    "plain-tuple": (tuple, TypeError, "cache must be a {name}Cache"),
    "negative-position": (lambda cache: cache._replace(position=-1), ValueError, "position must be at least 0"),
    "float-position": (lambda cache: cache._replace(position=2.0), TypeError, "position must be an int"),
}


@pytest.mark.parametrize("case", list(BAD_CACHES))
@pytest.mark.parametrize("module", list(MODELS))
@pytest.mark.parametrize("tree", ["reference", "manifold_impl"])
def test_every_model_refuses_a_cache_of_another_type_or_a_bad_position(tree, module, case):
    name, config = MODELS[module]
    corrupt, error, message = BAD_CACHES[case]
    model_class = getattr(importlib.import_module(f"{tree}.{module}"), name)
    tokens = np.array([[1, 2]])
    if tree == "reference":
        model = model_class(config)
        params = model.init_params(np.random.default_rng(0))
        _, cache = model.forward(params, tokens)
        with pytest.raises(error, match=message.format(name=name)):
            model.forward(params, tokens, corrupt(cache))
    else:
        model = model_class(config, dtype=torch.float64)
        with torch.no_grad():
            _, cache = model(torch.from_numpy(tokens))
            with pytest.raises(error, match=message.format(name=name)):
                model(torch.from_numpy(tokens), corrupt(cache))


def test_torch_refuses_tokens_an_embedding_cannot_read():
    with pytest.raises(TypeError, match=r"torch.int64 or torch.int32.*got torch.uint8.*tokens.long\(\)"):
        TorchGroupRNN(CONFIG)(torch.tensor([[1, 2]], dtype=torch.uint8))
    logits, _ = TorchGroupRNN(CONFIG)(torch.tensor([[1, 2]], dtype=torch.int32))
    assert logits.shape == (1, 2, 10)


def test_a_state_of_another_dtype_is_refused_naming_the_cast():
    from manifold_impl.group_rnn import GroupRNNLayer

    layer = GroupRNNLayer(3, "SO", 3)
    with pytest.raises(TypeError, match=r"state dtype torch.float32, got torch.float64.*state.to\(torch.float32\)"):
        layer(torch.zeros(2, 1, 3), torch.eye(3, dtype=torch.float64)[None])
    unitary = GroupRNNLayer(3, "U", 3)
    with pytest.raises(TypeError, match=r"torch.complex64, got torch.float32.*state.to\(torch.complex64\)"):
        unitary(torch.zeros(2, 1, 3), torch.eye(3)[None])  # a real orthogonal matrix, not yet complex
    _, state = unitary(torch.zeros(2, 1, 3), torch.eye(3)[None].to(torch.complex64))  # the named cast works
    assert state.dtype == torch.complex64


def test_a_float32_accurate_state_in_a_float64_model_is_named_as_such():
    rotation = torch.linalg.matrix_exp(torch.tensor([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.5], [0.0, -0.5, 0.0]]))[None]
    model = TorchGroupRNN(CONFIG, dtype=torch.float64)
    tokens = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match=r"only to float32 precision.*group.nearest\(state\)"):
        model(tokens, TorchGroupRNNCache(rotation.double(), 0))  # a float32 rotation, cast to float64
    model(tokens, TorchGroupRNNCache(model.group.nearest(rotation.double()), 0))  # the named remedy works
    with pytest.raises(ValueError, match="state is not on.*not unitary"):  # far off: the plain message
        model(tokens, TorchGroupRNNCache(1.01 * rotation.double(), 0))
