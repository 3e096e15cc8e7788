"""The models as torch users expect them: built from keywords as ``nn.LSTM`` is, or from a config;
cast with ``.double()``/``.float()``/``.to()`` for every group; and never silently off their groups
under a torch optimizer."""

import geoopt
import pytest
import torch

import reference.group_rnn
import reference.group_transformer
import reference.mlstm
from experiments.baselines import GPTConfig, GPTLanguageModel, LSTMConfig, LSTMLanguageModel
from manifold_impl.group_rnn import GroupRNN, GroupRNNLayer
from manifold_impl.group_transformer import GroupTransformer
from manifold_impl.mlstm import MLSTM
from manifold_impl.optim import RiemannianAdam
from reference.config import GROUP_NAMES, GroupRNNConfig, GroupTransformerConfig, MLSTMConfig

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
    fields_listed = rf"unknown option 'sizes'; the options are the fields of {config_class.__name__}: vocab_size"
    with pytest.raises(TypeError, match=fields_listed):
        model_class(sizes=3, **fields)
    with pytest.raises(TypeError, match="missing option 'vocab_size'"):
        model_class(**{key: value for key, value in fields.items() if key != "vocab_size"})
    with pytest.raises(TypeError, match="either"):
        model_class(config_class(**fields), vocab_size=9)
    with pytest.raises(TypeError, match=f"config must be a {config_class.__name__}"):
        model_class({"vocab_size": 7})


GROUP_MODELS = {  # builds a small model of each group-state kind from (group, dtype), and runs it
    "layer": (lambda group, **kw: GroupRNNLayer(3, group, 4, **kw),
              lambda model, dtype: model(torch.linspace(-1, 1, 30, dtype=dtype).reshape(5, 2, 3))[0]),
    "group_rnn": (lambda group, **kw: GroupRNN(vocab_size=7, group=group, n=4, embedding_dim=3, **kw),
                  lambda model, dtype: model(torch.arange(10).reshape(2, 5) % 7)[0]),
    "group_transformer": (lambda group, **kw: GroupTransformer(vocab_size=7, group=group, n=4, num_layers=1,
                                                               readout="prototype", **kw),
                          lambda model, dtype: model(torch.arange(10).reshape(2, 5) % 7)[0]),
}
TO_FLOAT64 = {
    "double": lambda model: model.double(),
    "to(float64)": lambda model: model.to(torch.float64),
    "to(cpu, dtype=float64)": lambda model: model.to("cpu", dtype=torch.float64),
    "type(float64)": lambda model: model.type(torch.float64),
}


@pytest.mark.parametrize("cast", list(TO_FLOAT64))
@pytest.mark.parametrize("kind", list(GROUP_MODELS))
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_casting_keeps_complex_parameters_complex_and_the_model_usable(group, kind, cast):
    build, run = GROUP_MODELS[kind]
    model = build(group, generator=torch.Generator().manual_seed(0))
    before = {key: value.clone() for key, value in model.state_dict().items()}
    expected = run(model, torch.float32)
    TO_FLOAT64[cast](model)
    for key, value in model.state_dict().items():
        assert value.is_complex() == before[key].is_complex(), key
        assert value.dtype == (torch.complex128 if value.is_complex() else torch.float64), key
        torch.testing.assert_close(value, before[key].to(value.dtype), rtol=0, atol=1e-6)  # nearest in float64
    assert all(model.group.is_member(param.detach()) for _, param in group_parameters(model))  # at float64's atol
    output = run(model, torch.float64)
    assert output.dtype == torch.float64
    torch.testing.assert_close(output, expected.double(), rtol=1e-4, atol=1e-4)
    model.float()
    for key, value in model.state_dict().items():
        assert value.dtype == before[key].dtype, key
        torch.testing.assert_close(value, before[key])
    torch.testing.assert_close(run(model, torch.float32), expected)


@pytest.mark.parametrize("cast, match", [
    (lambda model: model.half(), "got torch.float16; for mixed precision run it under torch.autocast"),
    (lambda model: model.bfloat16(), "got torch.bfloat16; for mixed precision"),
    pytest.param(lambda model: model.to(torch.complex128), r"with its real precision \(e.g. .to\(torch.float64\)\)",
                 marks=pytest.mark.filterwarnings("ignore:Complex modules")),  # torch's own note on complex dtypes
])
@pytest.mark.parametrize("kind", list(GROUP_MODELS))
def test_unsupported_precisions_are_refused_before_anything_changes(kind, cast, match):
    build, _ = GROUP_MODELS[kind]
    model = build("U")
    dtypes = {key: value.dtype for key, value in model.state_dict().items()}
    with pytest.raises(TypeError, match=match):
        cast(model)
    assert {key: value.dtype for key, value in model.state_dict().items()} == dtypes
    with pytest.raises(TypeError, match="computes in torch.float32 or torch.float64"):
        build("U", dtype=torch.bfloat16)


def group_parameters(model):
    return [(name, param) for name, param in model.named_parameters() if isinstance(param, geoopt.ManifoldParameter)]


def train(model, optimizer, steps=3, after_step=None):
    for _ in range(steps):
        optimizer.zero_grad()
        GROUP_MODELS[model.kind][1](model, torch.float32).pow(2).mean().backward()
        optimizer.step()
        if after_step is not None:
            after_step()


OPTIMIZERS = {"AdamW": lambda params: torch.optim.AdamW(params, lr=1e-2),
              "SGD": lambda params: torch.optim.SGD(params, lr=1.0, momentum=0.9)}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("kind", list(GROUP_MODELS))
@pytest.mark.parametrize("group", ["SO", "U"])
def test_a_torch_optimizer_that_leaves_the_group_fails_the_next_forward_naming_the_parameter(group, kind, optimizer):
    build, run = GROUP_MODELS[kind]
    model = build(group, generator=torch.Generator().manual_seed(0))
    model.kind = kind
    train(model, OPTIMIZERS[optimizer](model.parameters()), steps=1)
    names = [name for name, param in group_parameters(model) if not model.group.is_member(param.detach())]
    assert names, "the optimizer did not leave the group: the test shows nothing"
    with pytest.raises(ValueError, match=rf"parameter '{names[0]}' is off .*manifold_impl.optim.RiemannianAdam.*"
                                         r"param\.copy_\(param\.manifold\.group\.nearest\(param\)\)"):
        run(model, torch.float32)

    def reproject():  # the remedy the message gives, which needs nothing of the object holding the parameter
        with torch.no_grad():
            for _, param in group_parameters(model):
                param.copy_(param.manifold.group.nearest(param))
    reproject()
    train(model, OPTIMIZERS[optimizer](model.parameters()), after_step=reproject)
    assert torch.isfinite(run(model, torch.float32)).all()


@pytest.mark.parametrize("kind", list(GROUP_MODELS))
def test_riemannian_adam_keeps_every_group_parameter_on_its_group(kind):
    build, run = GROUP_MODELS[kind]
    model = build("U", generator=torch.Generator().manual_seed(0))
    model.kind = kind
    train(model, RiemannianAdam(model.parameters(), lr=1e-2), steps=5)
    assert all(model.group.is_member(param.detach()) for _, param in group_parameters(model))
    assert torch.isfinite(run(model, torch.float32)).all()
