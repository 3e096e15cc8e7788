"""The exact construction: an input-driven SO(n) group RNN with hand-set weights
tracks S5, A5 and S3 words at any length.

Weights. Token v (a permutation σ_v, ids as in ``experiments.tasks.words``) embeds as the algebra
coordinates vee(L_v) of a real logarithm L_v of ρ(σ_v) = sgn(σ_v)·P_σv ∈ SO(n); the input map is the
identity (F = dim so(n), b = 0), so exp(A_t) = ρ(x_t) and H_t = ρ(x_1)⋯ρ(x_t) = ρ(g_t), the
representation of the left-to-right running product the task labels. Prototypes P_v = ρ(σ_v):
Re tr(H_tᵀ P_v) = sgn(π)·#fix(π) with π = g_t⁻¹σ_v, which is n at v = g_t. Elsewhere it is at most
n − 3: a transposition fixes n − 2 points but is odd (−(n − 2)), a 3-cycle fixes n − 3 and is even.
So the argmax is the running product with a margin of 3·τ (τ = 1 here), for S3, A5 and S5 alike.

The targets come from ``words.word_batch`` (composition of one-line tuples, tested there against
plain Python), independent of the model's matrices.
"""

import numpy as np
import pytest
import torch

from experiments.tasks.words import permutation_group, rotation_logarithm, word_batch
from manifold_impl.group_rnn import GroupRNN as TorchGroupRNN
from reference.config import GroupRNNConfig
from reference.group_rnn import GroupRNN as ReferenceGroupRNN
from reference.groups import get_group


def exact_config(group):
    n = group.degree
    return GroupRNNConfig(vocab_size=group.order, group="SO", n=n, embedding_dim=n * (n - 1) // 2,
                          readout="prototype", recurrent=False)


def exact_parameters(group):
    """The hand-set parameter dict (keys and shapes of the torch state_dict), float64."""
    config = exact_config(group)
    so_n = get_group("SO", group.degree)
    rep = group.representation()  # [|G|, n, n]
    coordinates = np.stack([so_n.vee(rotation_logarithm(r)) for r in rep])  # [|G|, dim]
    params = {
        "embedding.weight": coordinates,
        "cell.initial_state": np.eye(group.degree),
        "cell.input_map.weight": np.eye(so_n.dim),
        "cell.input_map.bias": np.zeros(so_n.dim),
        "readout.prototypes": rep,
        "readout.temperature": np.array(1.0),
    }
    ReferenceGroupRNN(config).check_params(params)
    return params


def torch_model(group, dtype):
    model = TorchGroupRNN(exact_config(group), dtype=dtype, generator=torch.Generator().manual_seed(0))
    model.load_state_dict({k: torch.from_numpy(v).to(dtype) for k, v in exact_parameters(group).items()})
    return model


def margins(logits, targets):
    """Correct logit minus the best other logit, per position: ``[B, T]``."""
    logits = np.asarray(logits, dtype=np.float64)
    correct = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    np.put_along_axis(logits, targets[..., None], -np.inf, axis=-1)
    return correct - logits.max(axis=-1)


def torch_margins(name, dtype, batch, length, seed):
    group = permutation_group(name)
    inputs, targets = word_batch(group, np.random.default_rng(seed), batch, length)
    with torch.no_grad():
        logits, cache = torch_model(group, dtype)(torch.from_numpy(inputs))
    states = cache.states  # [B, T, n, n]
    drift = (states.mT @ states - torch.eye(group.degree, dtype=dtype)).abs().max().item()
    return margins(logits.numpy(), targets), drift


def test_exponentials_of_the_embeddings_are_the_representation():
    """exp(hat(W e_v + b)) = ρ(σ_v) for all 120 tokens of S5, through the library's own exp."""
    group = permutation_group("S5")
    params, so5 = exact_parameters(group), get_group("SO", 5)
    drive = params["embedding.weight"] @ params["cell.input_map.weight"].T + params["cell.input_map.bias"]
    np.testing.assert_allclose(so5.exp(so5.hat(drive)), group.representation(), atol=1e-13)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_torch_group_rnn_tracks_s5_at_length_10000(dtype):
    margin, drift = torch_margins("S5", dtype, batch=4, length=10_000, seed=0)
    assert np.all(margin > 0), f"{np.sum(margin <= 0)} of {margin.size} positions wrong"
    assert margin.min() > 2.9, f"margin {margin.min()} (exact: 3); state drift {drift}"


@pytest.mark.parametrize("name", ["S3", "A5"])
def test_torch_group_rnn_tracks_s3_and_a5(name):
    margin, _ = torch_margins(name, torch.float32, batch=4, length=2_000, seed=1)
    assert margin.min() > 2.9


def test_reference_group_rnn_tracks_s5():
    """The NumPy reference expresses the same solution (a shorter run: one scipy expm per step)."""
    group = permutation_group("S5")
    inputs, targets = word_batch(group, np.random.default_rng(2), 2, 2_000)
    logits, _ = ReferenceGroupRNN(exact_config(group)).forward(exact_parameters(group), inputs)
    assert margins(logits, targets).min() > 2.99


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_torch_group_rnn_tracks_s5_at_length_100000(dtype):
    margin, drift = torch_margins("S5", dtype, batch=2, length=100_000, seed=3)
    assert margin.min() > 2.9, f"margin {margin.min()} (exact: 3); state drift {drift}"
