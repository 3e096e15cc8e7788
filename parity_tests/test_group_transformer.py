"""Group-state Transformer (docs/design.md): parity of the two trees, closed forms, causality,
relative positions, tangent mixing at init, state_dict layout and bad input."""

import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.linalg
import torch

import manifold_impl.group_transformer
from manifold_impl.group_transformer import GroupTransformer as TorchGroupTransformer
from parity_tests import check
from parity_tests.harness import parity, to_torch
from parity_tests.oracles import state_features
from parity_tests.tolerances import SAMPLING_SIGMAS, group_atol
from reference.config import GROUP_NAMES, MIXINGS, GroupTransformerConfig
from reference.group_transformer import GroupTransformer, GroupTransformerCache
from reference.params import init_params, random_params, sub_params

ATTENTION_NAMES = ["algebra", "similarity"]
COMPACT = [name for name in GROUP_NAMES if name != "GL"]


def small_config(group, **fields):
    """n = 3 (4 for BO, whose blocks of 2 must divide n), 2 layers, 2 heads, V = 7."""
    return GroupTransformerConfig(**{"vocab_size": 7, "group": group, "n": 4 if group == "BO" else 3,
                                     "num_layers": 2, "num_heads": 2, **fields})


def mixing_fields(mixing):
    return {"mixing": mixing, "mixing_rank": 2 if mixing == "lowrank" else None}


def as_numpy(x):
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


class Tree:
    """Runs one config in the reference (float64) or torch (float64) on one NumPy parameter set."""

    def __init__(self, name, config, params):
        self.name, self.config, self.params = name, config, params
        self.reference = GroupTransformer(config)
        if name == "torch":
            self.model = TorchGroupTransformer(config, dtype=torch.float64)
            self.model.load_state_dict(to_torch(params, torch.float64, "cpu"))

    def forward(self, tokens, position=0):
        """(logits, states) as NumPy arrays, the sequence starting at ``position``."""
        if self.name == "reference":
            logits, cache = self.reference.forward(self.params, np.asarray(tokens), GroupTransformerCache(None, position))
            return logits, cache.past
        with torch.no_grad():
            logits, cache = self.model(torch.from_numpy(np.asarray(tokens)),
                                       manifold_impl.group_transformer.GroupTransformerCache(None, position))
        return logits.numpy(), cache.past.numpy()

    def attention_scores(self, layer, states):
        """Scores ``[B, h, T, T]`` of layer ``layer``'s attention on the input ``states: [B, T, n, n]``."""
        if self.name == "reference":
            attention = self.reference.layers[layer].attention
            return attention.scores(sub_params(self.params, f"layers.{layer}.attention."), states)
        with torch.no_grad():
            return self.model.layers[layer].attention.scores(torch.from_numpy(states)).numpy()


TREES = ["reference", "torch"]


def logits_and_states(output):
    """(logits, every state) of a forward's ``(logits, cache)``."""
    logits, cache = output
    return logits, cache.past


# --- parity (docs/design.md, Parity and tolerances) -----------------------------------------------

@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mixing", MIXINGS)
@pytest.mark.parametrize("attention", ATTENTION_NAMES)
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_group_transformer_parity(group, attention, mixing, dtype):
    readout = "prototype" if mixing == "lowrank" else "linear"
    config = small_config(group, attention=attention, readout=readout, **mixing_fields(mixing))
    report = parity(config, seed=7, dtype=dtype, batch=2, length=5)
    assert report["pass"], json.dumps(report, indent=1)
    assert set(report["gradient_errors"]) == set(GroupTransformer(config).param_spec())


VARIANTS = {
    "attention-only": {"feedforward": False, "num_layers": 3},
    "one-layer-one-head": {"num_layers": 1, "num_heads": 1, "feedforward_dim": 5},
    "three-layers-four-heads": {"num_layers": 3, "num_heads": 4, "mixing": "scalar"},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("attention", ATTENTION_NAMES)
@pytest.mark.parametrize("group", ["SO", "SU", "GL"])
def test_group_transformer_parity_variants(group, attention, variant):
    config = small_config(group, attention=attention, **VARIANTS[variant])
    report = parity(config, seed=11, dtype="float64", batch=1, length=4)
    assert report["pass"], json.dumps(report, indent=1)


def test_cli_prints_one_json_object_and_passes():
    result = subprocess.run(
        [sys.executable, "-m", "parity_tests.check", "--model", "group_transformer", "--attention", "similarity",
         "--num-layers", "2", "--num-heads", "3", "--mixing", "lowrank", "--mixing-rank", "2", "--group", "U", "--n", "2",
         "--seed", "4", "--dtype", "float32", "--length", "5"],
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["pass"] is True and report["model"] == "group_transformer" and report["dtype"] == "float32"
    config = GroupTransformerConfig(vocab_size=13, group="U", n=2, num_layers=2, num_heads=3, attention="similarity",
                                    mixing="lowrank", mixing_rank=2)
    assert report["config"] == {key: getattr(config, key) for key in config.__dataclass_fields__}
    assert set(report["gradient_errors"]) == set(GroupTransformer(config).param_spec())


CLI_REFUSALS = {
    "zero-heads": (["--num-heads", "0"], "num_heads must be at least 1"),
    "no-rank": (["--mixing", "lowrank"], "needs mixing_rank"),
    "zero-dim-algebra": (["--n", "1"], "0-dimensional"),
}


@pytest.mark.parametrize("case", list(CLI_REFUSALS))
def test_cli_refuses_invalid_transformer_configs(case, capsys):
    extra, message = CLI_REFUSALS[case]
    arguments = {"--group": "SO", "--n": "3"}
    for flag, value in zip(extra[::2], extra[1::2]):
        arguments[flag] = value
    assert check.main(["--model", "group_transformer", *[x for item in arguments.items() for x in item]]) == 2
    assert message in json.loads(capsys.readouterr().out)["error"]


@pytest.mark.parametrize("model, option, message", [
    ("group_rnn", "--feedforward-dim", "--feedforward-dim is an option of --model group_transformer, not of group_rnn"),
    ("group_transformer", "--embedding-dim", "--embedding-dim is an option of --model group_rnn and mlstm, not of "
                                             "group_transformer")], ids=["transformer-option", "rnn-option"])
def test_cli_refuses_another_models_options_in_one_line_naming_their_model(model, option, message, capsys):
    with pytest.raises(SystemExit) as stop:
        check.main(["--model", model, "--group", "O", "--n", "3", option, "2"])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


# --- closed forms --------------------------------------------------------------------------------

def hat(group, c):
    """Σ_k c_k B_k from the reference group's explicit basis."""
    return np.tensordot(c, group.basis, axes=([-1], [0]))


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_embedding_is_the_token_state_times_a_power_of_the_position_rotation(group, tree):
    """H_i⁰ = E_{x_i} exp(Ω)^i, with exp(Ω) from scipy and its integer powers."""
    config = small_config(group)
    params = random_params(GroupTransformer(config).param_spec(), np.random.default_rng(0))
    tokens = np.array([[3, 0, 6, 3, 1]])
    _, states = Tree(tree, config, params).forward(tokens, position=2)
    rotation = scipy.linalg.expm(hat(GroupTransformer(config).group, params["embedding.position_generator"]))
    expected = np.stack([params["embedding.tokens"][x] @ np.linalg.matrix_power(rotation, 2 + t)
                         for t, x in enumerate(tokens[0])])
    np.testing.assert_allclose(states[0, 0], expected, rtol=0, atol=group_atol("float64", config.n))


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("attention", ATTENTION_NAMES)
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_the_first_token_attends_only_to_itself(group, attention, tree):
    """At position 0 the softmax has one entry (α = 1): algebra attention moves H by
    exp(hat(Σ_h W_v^h features(H))); similarity attention by exp(Σ_h η_h Π(H⁻¹H)) = exp(Σ_h η_h Π(I)),
    the identity on the compact groups and e^{Σ η_h} I on GL (Π = id)."""
    config = small_config(group, attention=attention)
    reference = GroupTransformer(config)
    params = random_params(reference.param_spec(), np.random.default_rng(1))
    _, states = Tree(tree, config, params).forward(np.array([[2, 5, 1]]))
    before, after = states[0, 0, 0], states[0, 1, 0]
    if attention == "algebra":
        features = state_features(group, before, 2 if group == "BO" else None)
        c = params["layers.0.attention.value.weight"] @ features  # [h·d]
        expected = before @ scipy.linalg.expm(hat(reference.group, c.reshape(config.num_heads, -1).sum(0)))
    elif group == "GL":
        expected = before * np.exp(params["layers.0.attention.step"].sum())
    else:
        expected = before
    np.testing.assert_allclose(after, expected, rtol=0, atol=group_atol("float64", config.n))


# --- causality and relative positions ----------------------------------------------------------

@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("attention", ATTENTION_NAMES)
@pytest.mark.parametrize("group", ["SO", "U", "T", "GL"])
def test_changing_token_j_changes_no_logit_before_j(group, attention, tree):
    config = small_config(group, attention=attention, num_layers=3, mixing="scalar")
    params = random_params(GroupTransformer(config).param_spec(), np.random.default_rng(2))
    model = Tree(tree, config, params)
    tokens = np.random.default_rng(3).integers(0, 7, size=(2, 7))
    logits, states = model.forward(tokens)
    for j in (0, 3, 6):
        changed = tokens.copy()
        changed[:, j] = (changed[:, j] + 1) % 7
        other_logits, other_states = model.forward(changed)
        np.testing.assert_array_equal(other_logits[:, :j], logits[:, :j])
        np.testing.assert_array_equal(other_states[:, :, :j], states[:, :, :j])
        assert np.all(np.abs(other_logits[:, j] - logits[:, j]).max(axis=-1) > 1e-6)  # position j does change


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("mixing", ["none", "scalar"])
@pytest.mark.parametrize("group", COMPACT)
def test_similarity_attention_sees_relative_positions_only(group, mixing, tree):
    """Shifting every position by k right-multiplies every state of an attention-only similarity
    stack by R = exp(Ω)^k and leaves every layer's scores unchanged (R unitary: not on GL)."""
    config = small_config(group, attention="similarity", feedforward=False, num_layers=3, **mixing_fields(mixing))
    reference = GroupTransformer(config)
    params = random_params(reference.param_spec(), np.random.default_rng(4))
    if mixing == "scalar":
        params = {**params, **{key: np.asarray(0.7) for key in params if key.endswith("mixing.step_size")}}
    model = Tree(tree, config, params)
    tokens = np.random.default_rng(5).integers(0, 7, size=(2, 6))
    shift = 5
    _, states = model.forward(tokens)
    _, shifted = model.forward(tokens, position=shift)
    rotation = np.linalg.matrix_power(
        scipy.linalg.expm(hat(reference.group, params["embedding.position_generator"])), shift)
    np.testing.assert_allclose(shifted, states @ rotation, rtol=0, atol=group_atol("float64", config.n))
    for layer in range(config.num_layers):
        np.testing.assert_allclose(model.attention_scores(layer, shifted[:, layer]),
                                   model.attention_scores(layer, states[:, layer]),
                                   rtol=0, atol=group_atol("float64", config.n))


@pytest.mark.parametrize("tree", TREES)
def test_with_feedforward_the_relative_shift_holds_through_the_first_attention(tree):
    config = small_config("U", attention="similarity", num_layers=2)
    reference = GroupTransformer(config)
    params = random_params(reference.param_spec(), np.random.default_rng(6))
    model = Tree(tree, config, params)
    tokens = np.random.default_rng(7).integers(0, 7, size=(1, 5))
    _, states = model.forward(tokens)
    _, shifted = model.forward(tokens, position=3)
    rotation = np.linalg.matrix_power(
        scipy.linalg.expm(hat(reference.group, params["embedding.position_generator"])), 3)
    atol = group_atol("float64", config.n)
    np.testing.assert_allclose(shifted[:, :2], states[:, :2] @ rotation, rtol=0, atol=atol)
    assert np.abs(shifted[:, 2] - states[:, 2] @ rotation).max() > 1e-3  # the feed-forward breaks it


# --- tangent mixing at init (docs/design.md, Models) ----------------------------------------------

@pytest.mark.parametrize("attention", ATTENTION_NAMES)
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_mixing_at_init_equals_no_mixing_exactly(group, attention):
    base = small_config(group, attention=attention)
    tokens = np.random.default_rng(0).integers(0, 7, size=(2, 6))
    plain = TorchGroupTransformer(base, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    reference = GroupTransformer(base)
    params = reference.init_params(np.random.default_rng(1))
    expected = logits_and_states(reference.forward(params, tokens))
    for mode in ("scalar", "lowrank"):
        config = small_config(group, attention=attention, **mixing_fields(mode))
        mixed = TorchGroupTransformer(config, dtype=torch.float64)
        mixed.load_state_dict({**mixed.state_dict(), **plain.state_dict()})
        with torch.no_grad():
            for got, want in zip(logits_and_states(mixed(torch.from_numpy(tokens))),
                                 logits_and_states(plain(torch.from_numpy(tokens)))):
                torch.testing.assert_close(got, want, rtol=0, atol=0)
        mixed_reference = GroupTransformer(config)
        mixed_params = {**mixed_reference.init_params(np.random.default_rng(2)), **params}
        for got, want in zip(logits_and_states(mixed_reference.forward(mixed_params, tokens)), expected):
            np.testing.assert_array_equal(got, want)


# --- parameters ---------------------------------------------------------------------------------

STATE_DICT_CASES = {
    "algebra": {},
    "similarity-prototype": {"attention": "similarity", "readout": "prototype"},
    "algebra-lowrank-attention-only": {"feedforward": False, "mixing": "lowrank", "mixing_rank": 3},
    "similarity-scalar-width": {"attention": "similarity", "mixing": "scalar", "feedforward_dim": 9},
}


@pytest.mark.parametrize("case", list(STATE_DICT_CASES))
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_state_dict_has_the_reference_keys_shapes_and_dtypes(group, case):
    config = small_config(group, num_heads=3, **STATE_DICT_CASES[case])
    spec = GroupTransformer(config).param_spec()
    state = TorchGroupTransformer(config, dtype=torch.float64).state_dict()
    assert list(state) == list(spec)
    for key, tensor in state.items():
        assert tuple(tensor.shape) == tuple(spec[key].shape), key
        assert tensor.is_complex() == (spec[key].group is not None and config.is_complex), key


@pytest.mark.parametrize("attention", ATTENTION_NAMES)
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_torch_initialization_follows_the_reference_distributions(group, attention):
    """Same init law in both trees: group-valued parameters on G, constants equal, spreads matching."""
    config = GroupTransformerConfig(vocab_size=50, group=group, n=6, num_heads=4, attention=attention,
                                    readout="prototype", mixing="lowrank", mixing_rank=3)
    reference = GroupTransformer(config)
    spec = reference.param_spec()
    expected = init_params(spec, np.random.default_rng(0))
    actual = TorchGroupTransformer(config, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).state_dict()
    for key, value in expected.items():
        got = actual[key].numpy()
        if spec[key].group is not None:
            assert reference.group.is_member(got), key
        elif spec[key].std == 0:
            np.testing.assert_array_equal(got, value, err_msg=key)
        else:
            spread, sigmas = spec[key].std, SAMPLING_SIGMAS  # two samples of one law
            assert np.mean(got) == pytest.approx(np.mean(value), abs=sigmas * spread * np.sqrt(2 / value.size)), key
            assert np.std(got) == pytest.approx(np.std(value), rel=sigmas * np.sqrt(2 / value.size)), key


def test_loading_an_off_group_embedding_is_refused():
    config = small_config("SO")
    model = TorchGroupTransformer(config, dtype=torch.float64)
    reference = GroupTransformer(config)
    params = reference.init_params(np.random.default_rng(0))
    params["embedding.tokens"] = params["embedding.tokens"].copy()
    params["embedding.tokens"][4] = np.diag([1.0, 1.0, -1.0])  # in O(3), not in SO(3)
    with pytest.raises(ValueError, match="embedding.tokens.*det"):
        model.load_state_dict(to_torch(params, torch.float64, "cpu"))
    with pytest.raises(ValueError, match="embedding.tokens.*det"):
        reference.check_params(params)
    params["embedding.tokens"][4] = 1.01 * np.eye(3)
    with pytest.raises(ValueError, match="embedding.tokens.*not unitary"):
        model.load_state_dict(to_torch(params, torch.float64, "cpu"))


@pytest.mark.parametrize("attention", ATTENTION_NAMES)
def test_gl_does_not_blow_up_at_init(attention):
    """Default init on GL, 3 layers, 64 positions: every state stays well conditioned."""
    config = GroupTransformerConfig(vocab_size=20, group="GL", n=6, num_layers=3, attention=attention)
    model = TorchGroupTransformer(config, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 20, size=(2, 64)))
    with torch.no_grad():
        logits, cache = model(tokens)
    singular = np.linalg.svd(cache.past.numpy(), compute_uv=False)
    assert np.all(np.isfinite(logits.numpy()))
    assert singular.max() < 4 and singular.min() > 0.25, (singular.max(), singular.min())


# --- bad input ------------------------------------------------------------------------------------

BAD_CONFIGS = {
    "heads-zero": ({"num_heads": 0}, ValueError, "num_heads must be at least 1"),
    "heads-float": ({"num_heads": 2.0}, TypeError, "num_heads must be an int"),
    "heads-bool": ({"num_heads": True}, TypeError, "num_heads must be an int"),
    "layers-zero": ({"num_layers": 0}, ValueError, "num_layers must be at least 1"),
    "attention": ({"attention": "dot"}, ValueError, "unknown attention 'dot'"),
    "mixing": ({"mixing": "full"}, ValueError, "unknown mixing 'full'"),
    "lowrank-no-rank": ({"mixing": "lowrank"}, ValueError, "needs mixing_rank"),
    "rank-without-lowrank": ({"mixing_rank": 2}, ValueError, "only applies to mixing='lowrank'"),
    "feedforward-not-bool": ({"feedforward": 1}, TypeError, "feedforward must be a bool"),
    "width-without-feedforward": ({"feedforward": False, "feedforward_dim": 8}, ValueError,
                                  "feedforward_dim only applies"),
    "width-zero": ({"feedforward_dim": 0}, ValueError, "feedforward_dim must be at least 1"),
    "readout": ({"readout": "softmax"}, ValueError, "unknown readout"),
    "unknown-group": ({"group": "Sp"}, ValueError, "unknown group 'Sp'"),
    "bo-divisibility": ({"group": "BO", "n": 5}, ValueError, "divisible by the block size"),
    "dim-zero": ({"group": "SO", "n": 1}, ValueError, "0-dimensional Lie algebra"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_invalid_configs_are_refused(case):
    fields, error, message = BAD_CONFIGS[case]
    with pytest.raises(error, match=message):
        GroupTransformerConfig(**{"vocab_size": 10, **fields})


def test_heads_need_not_divide_anything():
    """Heads are copies: 3 heads on SO(3) (dim g = 3), 4 on T(3), 5 on U(2)."""
    for group, n, heads in (("SO", 3, 3), ("T", 3, 4), ("U", 2, 5)):
        config = GroupTransformerConfig(vocab_size=5, group=group, n=n, num_heads=heads)
        query = GroupTransformer(config).param_spec()["layers.0.attention.query.weight"]
        assert query.shape == (heads * config.algebra_dim, config.state_features)


class Forbidden:
    """Stands in for the embedding: any call means work started before validation."""

    def __call__(self, *args, **kwargs):
        raise AssertionError("the model ran before the input was validated")


BAD_INPUTS = {
    "token-too-large": ({"tokens": np.array([[1, 7]])}, ValueError, "token id 7 is out of range"),
    "token-negative": ({"tokens": np.array([[-1, 2]])}, ValueError, "token id -1 is out of range"),
    "tokens-rank-1": ({"tokens": np.array([1, 2])}, ValueError, r"shape \[batch, length\]"),
    "tokens-float": ({"tokens": np.array([[1.0, 2.0]])}, TypeError, "must be integers"),
    "position-negative": ({"position": -1}, ValueError, "position must be at least 0"),
    "position-float": ({"position": 1.5}, TypeError, "position must be an int"),
    "past-rank": ({"past": np.zeros((1, 5, 3, 3))}, ValueError, r"past must have shape \[1, 5, P, 3, 3\]"),
    "past-sublayers": ({"past": np.zeros((1, 3, 2, 3, 3))}, ValueError, "past must have shape"),
    "past-off-group": ({"past": np.broadcast_to(np.diag([1.0, 1.0, -1.0]), (1, 5, 2, 3, 3)).copy()}, ValueError,
                       "past is not on.*det"),
}


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_refused_before_any_work(case, tree):
    inputs, error, message = BAD_INPUTS[case]
    config = small_config("SO")
    tokens, past, position = inputs.get("tokens", np.array([[1, 2]])), inputs.get("past"), inputs.get("position", 0)
    if tree == "reference":
        model = GroupTransformer(config)
        params = model.init_params(np.random.default_rng(0))
        model.embedding = Forbidden()
        with pytest.raises(error, match=message):
            model.forward(params, tokens, GroupTransformerCache(past, position))
    else:
        model = TorchGroupTransformer(config, dtype=torch.float64)
        model.embedding.forward = Forbidden()
        cache = manifold_impl.group_transformer.GroupTransformerCache(
            None if past is None else torch.from_numpy(past), position)
        with pytest.raises(error, match=message):
            model(torch.from_numpy(tokens), cache)


@pytest.mark.parametrize("tree", TREES)
def test_past_with_rounding_drift_is_accepted_and_a_wrong_tensor_refused(tree):
    """The cache check refuses tensors off G, not the rounding drift of the model's own states."""
    config = small_config("O", num_layers=1)
    params = GroupTransformer(config).init_params(np.random.default_rng(0))
    model = Tree(tree, config, params)
    tokens = np.array([[1, 2, 3]])
    _, states = model.forward(tokens)
    for drift, accepted in ((1e-12, True), (1e-3, False)):
        past = states * (1 + drift)  # |xᴴx − I| ≈ 2·drift
        if tree == "reference":
            run = lambda: model.reference.forward(params, np.array([[4]]), GroupTransformerCache(past, 3))  # noqa: E731
        else:
            run = lambda: model.model(  # noqa: E731
                torch.tensor([[4]]), manifold_impl.group_transformer.GroupTransformerCache(torch.from_numpy(past), 3))
        if accepted:
            run()
        else:
            with pytest.raises(ValueError, match="past is not on.*not unitary"):
                run()


def test_the_config_is_frozen():
    with pytest.raises(AttributeError):
        small_config("O").num_heads = 3
