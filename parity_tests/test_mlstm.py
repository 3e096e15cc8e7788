"""mLSTM with an orthogonalized read (docs/design.md, Models): both trees against independent computations.

Oracles: the ``xlstm`` package's ``mLSTMLayer`` (and its LayerNorm) for the architecture and the
plain read; closed forms from an SVD for the Newton–Schulz and polar reads; the NumPy reference
for the torch tree (parity, docs/design.md (Parity and tolerances), via ``parity_tests.harness``).
"""

from __future__ import annotations

import inspect

import autograd
import numpy as np
import pytest
import torch

import manifold_impl.mlstm
import reference.mlstm
from manifold_impl.losses import cross_entropy as torch_cross_entropy
from parity_tests.harness import DTYPES, parity, relative_error, to_torch
from parity_tests.tolerances import PARITY, READ_CLOSED_FORM_ATOL, XLSTM_ORACLE
from reference.config import NS_COEFFICIENTS, MLSTMConfig
from reference.losses import cross_entropy as reference_cross_entropy
from reference.params import random_params

LENGTH = 8
BATCH = 2


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """The tensors here are tiny: a second intra-op thread gains nothing, and when another process
    holds a core, OpenMP's waiting threads slow this module down about tenfold (measured)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _generic_params(config, seed):
    """Generic (not freshly initialized) parameters, keys and shapes of the torch state_dict."""
    return random_params(reference.mlstm.MLSTM(config).param_spec(), np.random.default_rng(seed))


def _torch_model(config, params, dtype, **kwargs):
    model = manifold_impl.mlstm.MLSTM(config, dtype=DTYPES[dtype], **kwargs)
    model.load_state_dict(to_torch(params, DTYPES[dtype], "cpu"))
    return model


def _xlstm_layer(config, dtype, length):
    """xlstm 2.0.0's mLSTMLayer with ``config``'s architecture (CPU: its parallel torch kernel)."""
    from xlstm.blocks.mlstm.layer import mLSTMLayer, mLSTMLayerConfig

    layer = mLSTMLayer(mLSTMLayerConfig(
        embedding_dim=config.embedding_dim, num_heads=config.num_heads, proj_factor=config.proj_factor,
        round_proj_up_to_multiple_of=config.round_proj_up_to_multiple_of,
        conv1d_kernel_size=config.conv1d_kernel_size, qkv_proj_blocksize=config.qkv_proj_blocksize,
        bias=False, context_length=length))
    return layer.to(DTYPES[dtype])


# --- architecture -----------------------------------------------------------------------------


@pytest.mark.parametrize(("vocab", "count"), [(80, 77_716), (96, 80_740)], ids=["V80", "V96"])
def test_parameter_count(vocab, count):
    config = MLSTMConfig(vocab)
    spec = reference.mlstm.MLSTM(config).param_spec()
    assert sum(int(np.prod(s.shape)) for s in spec.values()) == count
    model = manifold_impl.mlstm.MLSTM(config)
    assert sum(p.numel() for p in model.parameters()) == count


def test_state_dict_is_the_reference_param_dict_and_the_layer_is_xlstms():
    config = MLSTMConfig(80)
    spec = reference.mlstm.MLSTM(config).param_spec()
    state = manifold_impl.mlstm.MLSTM(config).state_dict()
    assert {k: tuple(v.shape) for k, v in state.items()} == {k: tuple(s.shape) for k, s in spec.items()}
    xlstm_state = _xlstm_layer(config, "float32", LENGTH).state_dict()
    ours = {k[len("layer."):]: tuple(v.shape) for k, v in state.items() if k.startswith("layer.")}
    assert ours == {k: tuple(v.shape) for k, v in xlstm_state.items()}


def test_deterministic_init_matches_xlstm():
    """Gate weights 0, forget bias linspace(3, 6), norm weights 0, skip 1 — in both trees and xlstm."""
    config = MLSTMConfig(80)
    xlstm_state = _xlstm_layer(config, "float64", LENGTH).state_dict()
    torch_state = manifold_impl.mlstm.MLSTM(config, dtype=torch.float64).state_dict()
    ref_params = reference.mlstm.MLSTM(config).init_params(np.random.default_rng(0))
    for key in ("mlstm_cell.igate.weight", "mlstm_cell.fgate.weight", "mlstm_cell.fgate.bias",
                "mlstm_cell.outnorm.weight", "learnable_skip"):
        expected = xlstm_state[key].numpy()
        np.testing.assert_array_equal(torch_state["layer." + key].numpy(), expected, err_msg=key)
        np.testing.assert_allclose(ref_params["layer." + key], expected, rtol=1e-15, err_msg=key)


def test_public_names_mirror():
    def public(module):
        return {name for name, obj in vars(module).items()
                if not name.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
                and obj.__module__ == module.__name__}

    assert public(reference.mlstm) == public(manifold_impl.mlstm)


# --- oracle: the xlstm package --------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [None, 3], ids=["one_chunk", "chunk3"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_plain_layer_matches_xlstm(dtype, chunk_size):
    """Our layer's weights loaded into xlstm's mLSTMLayer: same outputs and parameter gradients."""
    config = MLSTMConfig(80)
    length = 10
    model = _torch_model(config, _generic_params(config, seed=1), dtype, chunk_size=chunk_size)
    oracle = _xlstm_layer(config, dtype, length)
    oracle.load_state_dict(model.layer.state_dict())
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.standard_normal((BATCH, length, config.embedding_dim))).to(DTYPES[dtype])
    cotangent = torch.from_numpy(rng.standard_normal((BATCH, length, config.embedding_dim))).to(DTYPES[dtype])

    expected = oracle(x)
    (expected * cotangent).sum().backward()
    actual, _ = model.layer(x)
    (actual * cotangent).sum().backward()

    tol = XLSTM_ORACLE[dtype]
    assert relative_error(actual, expected.detach().double().numpy()) <= tol
    oracle_grads = dict(oracle.named_parameters())
    for key, param in model.layer.named_parameters():
        err = relative_error(param.grad, oracle_grads[key].grad.double().numpy())
        assert err <= tol, f"gradient of {key}: relative error {err:.2e}"


def test_language_model_matches_xlstm_components():
    """embedding → x + layer(LN(x)) → LN → head, built from xlstm's LayerNorm and mLSTMLayer."""
    from xlstm.components.ln import LayerNorm

    config = MLSTMConfig(80)
    params = _generic_params(config, seed=3)
    model = _torch_model(config, params, "float64")
    state = to_torch(params, torch.float64, "cpu")
    layer = _xlstm_layer(config, "float64", LENGTH)
    layer.load_state_dict(model.layer.state_dict())
    norm, post_norm = (LayerNorm(ndim=config.embedding_dim, weight=True, bias=False).double() for _ in range(2))
    norm.load_state_dict({"weight": state["norm.weight"]})
    post_norm.load_state_dict({"weight": state["post_norm.weight"]})
    tokens = torch.from_numpy(np.random.default_rng(4).integers(0, config.vocab_size, (BATCH, LENGTH)))

    with torch.no_grad():
        x = state["embedding.weight"][tokens]
        expected = post_norm(x + layer(norm(x))) @ state["head.weight"].T + state["head.bias"]
        actual, _ = model(tokens)
    assert relative_error(actual, expected.numpy()) <= XLSTM_ORACLE["float64"]


# --- parity: reference vs torch (docs/design.md, Parity and tolerances) ---------------------------

READ_CASES = {
    "plain": {"read": "plain"},
    "ns-cubic": {"read": "ns"},
    "ns-quintic": {"read": "ns", "ns_coeffs": "quintic"},
    "polar": {"read": "polar"},
}
# A small non-default architecture: width 16, 2 heads of 16, blocks of 2, kernel 2, 3 NS steps.
SMALL = {"vocab_size": 11, "embedding_dim": 16, "num_heads": 2, "round_proj_up_to_multiple_of": 8,
         "qkv_proj_blocksize": 2, "conv1d_kernel_size": 2, "ns_steps": 3}


def _assert_passes(report):
    failed = sorted(name for name, ok in report["checks"].items() if not ok)
    worst = max(report["gradient_errors"].items(), key=lambda item: item[1], default=None)
    assert report["pass"], f"failed {failed}; errors {report['errors']}; worst gradient {worst}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("read", list(READ_CASES.values()), ids=list(READ_CASES))
def test_parity(read, dtype):
    report = parity(MLSTMConfig(80, **read), seed=0, dtype=dtype, batch=BATCH, length=LENGTH)
    _assert_passes(report)
    if read["read"] == "polar":
        assert report["skipped"] == ["gradients", "optimizer_step"]
    else:
        assert set(report["gradient_errors"]) == set(reference.mlstm.MLSTM(MLSTMConfig(80)).param_spec())


@pytest.mark.parametrize("read", ["plain", "ns"])
def test_parity_small_architecture(read):
    report = parity(MLSTMConfig(**SMALL, read=read), seed=5, dtype="float64", batch=3, length=7)
    _assert_passes(report)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 6), ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("read", list(READ_CASES.values()), ids=list(READ_CASES))
def test_parity_more_seeds_longer(read, dtype, seed):
    report = parity(MLSTMConfig(80, **read), seed=seed, dtype=dtype, batch=3, length=40, chunk_size=16)
    _assert_passes(report)


@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpoint", "no_checkpoint"])
@pytest.mark.parametrize("chunk_size", [1, 3, LENGTH], ids=["chunk1", "chunk3", "chunkT"])
def test_chunked_ns_read_matches_the_recurrent_reference(chunk_size, checkpoint):
    """The chunked torch NS read (C_t materialized per chunk) = the reference's token loop,
    logits and every gradient."""
    config = MLSTMConfig(80, read="ns")
    params = _generic_params(config, seed=6)
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, config.vocab_size, (BATCH, LENGTH + 1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    ref = reference.mlstm.MLSTM(config)

    def ref_loss(p):
        return reference_cross_entropy(ref.forward(p, inputs)[0], targets)

    ref_grads = autograd.grad(ref_loss)(params)
    ref_logits, _ = ref.forward(params, inputs)

    model = _torch_model(config, params, "float64", chunk_size=chunk_size, checkpoint=checkpoint)
    logits, _ = model(torch.from_numpy(inputs))
    torch_cross_entropy(logits, torch.from_numpy(targets)).backward()

    tol = PARITY["float64"]
    assert relative_error(logits, ref_logits) <= tol["output"]
    for key, param in model.named_parameters():
        err = relative_error(param.grad, ref_grads[key])
        assert err <= tol["gradient"], f"gradient of {key}: relative error {err:.2e}"


# --- reads against closed forms -------------------------------------------------------------------


def _tree(backend):
    return reference.mlstm if backend.name == "reference" else manifold_impl.mlstm


def _svd_case(seed, size=8, rank=5, scale=7.0):
    """A matrix with known SVD: ``c = u diag(sigma) vᵀ`` (rank ``rank``), and its factors."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((size, size)))
    v, _ = np.linalg.qr(rng.standard_normal((size, size)))
    sigma = np.zeros(size)
    sigma[:rank] = scale * np.sort(rng.uniform(0.05, 1.0, rank))[::-1]
    return (u * sigma) @ v.T, u, sigma, v


@pytest.mark.parametrize("rank", [8, 5], ids=["full_rank", "rank5"])
@pytest.mark.parametrize("steps", [1, 3, 5])
@pytest.mark.parametrize("coeffs", list(NS_COEFFICIENTS))
def test_newton_schulz_singular_value_map(backend, coeffs, steps, rank):
    """NS_k(C) = U diag(p(p(..p(σ/‖C‖_F))) Vᵀ with p(s) = a s + b s³ + c s⁵ (cubic: 1.5 s − 0.5 s³).

    On a rank-deficient C, rounding noise in the null space grows by p'(0)ᵏ = aᵏ (quintic:
    3.4445⁵ ≈ 490), so the float32 bound there is scaled by aᵏ.
    """
    c, u, sigma, v = _svd_case(seed=steps + rank, rank=rank)
    a, b, c5 = NS_COEFFICIENTS[coeffs]
    atol = READ_CLOSED_FORM_ATOL[backend.dtype] * (a ** steps if backend.dtype == "float32" and rank < 8 else 1)
    s = sigma / np.linalg.norm(c)
    for _ in range(steps):
        s = a * s + b * s ** 3 + c5 * s ** 5
    expected = (u * s) @ v.T
    actual = backend.numpy(_tree(backend).newton_schulz(backend.array(c), steps, coeffs))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=atol)


def test_newton_schulz_batched_equals_per_matrix(backend):
    cases = np.stack([_svd_case(seed)[0] for seed in range(3)])  # [3, 8, 8]
    tree = _tree(backend)
    batched = backend.numpy(tree.newton_schulz(backend.array(cases), 5, "cubic"))
    for index, case in enumerate(cases):
        single = backend.numpy(tree.newton_schulz(backend.array(case), 5, "cubic"))
        np.testing.assert_allclose(batched[index], single, rtol=0, atol=READ_CLOSED_FORM_ATOL[backend.dtype])


@pytest.mark.parametrize("coeffs", list(NS_COEFFICIENTS))
def test_newton_schulz_gradient_is_finite_at_a_zero_memory(coeffs):
    """Below the floor NS_k is linear, NS_k(C) = aᵏ C / 1e-6 + O(‖C‖³): the gradient of Σ W ⊙ NS_k(C)
    at C = 0 is aᵏ W / 1e-6, which a central difference inside the floor also gives. Both trees,
    on a batch holding a zero and a nonzero memory (once NaN in the reference: sqrt'(0))."""
    steps, a = 5, NS_COEFFICIENTS[coeffs][0]
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((2, 4, 4))
    memory = np.stack([np.zeros((4, 4)), rng.standard_normal((4, 4))])
    reference_grad = autograd.grad(
        lambda m: np.sum(weight * reference.mlstm.newton_schulz(m, steps, coeffs)))(memory)
    tensor = torch.tensor(memory, requires_grad=True)
    (torch.tensor(weight) * manifold_impl.mlstm.newton_schulz(tensor, steps, coeffs)).sum().backward()
    direction, h = rng.standard_normal((4, 4)), 1e-13  # ‖h·direction‖_F ≪ 1e-6: linear inside the floor
    central = (reference.mlstm.newton_schulz(h * direction, steps, coeffs)
               - reference.mlstm.newton_schulz(-h * direction, steps, coeffs)) / (2 * h)
    assert np.all(np.isfinite(reference_grad))
    np.testing.assert_allclose(reference_grad[0], a ** steps * weight[0] / 1e-6, rtol=1e-12)
    np.testing.assert_allclose(np.sum(weight[0] * central), np.sum(reference_grad[0] * direction), rtol=1e-6)
    np.testing.assert_allclose(tensor.grad.numpy(), reference_grad, rtol=1e-10)


@pytest.mark.parametrize("rank", [8, 5, 1], ids=["full_rank", "rank5", "rank1"])
def test_polar_read_closed_form(backend, rank):
    """polar(C) = U_r V_rᵀ over the r nonzero singular values."""
    c, u, _, v = _svd_case(seed=rank, rank=rank)
    expected = u[:, :rank] @ v[:, :rank].T
    actual = backend.numpy(_tree(backend).polar_read(backend.array(c), 1e-5))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=READ_CLOSED_FORM_ATOL[backend.dtype])


def test_cubic_newton_schulz_converges_to_the_polar_factor(backend):
    """Full rank only: on a rank-deficient C, 40 cubic steps also lift the rounding noise in the
    null space (by 1.5⁴⁰ ≈ 1e7), so the iterate leaves the exact limit there."""
    c, u, _, v = _svd_case(seed=8, rank=8)
    limit = backend.numpy(_tree(backend).newton_schulz(backend.array(c), 40, "cubic"))
    np.testing.assert_allclose(limit, u @ v.T, rtol=0, atol=READ_CLOSED_FORM_ATOL[backend.dtype])


def test_polar_read_is_forward_only_in_the_reference():
    c, *_ = _svd_case(seed=0)
    with pytest.raises(NotImplementedError, match="forward-only"):
        autograd.grad(lambda m: reference.mlstm.polar_read(m, 1e-5).sum())(c)


def test_polar_read_is_forward_only_in_torch():
    config = MLSTMConfig(80, read="polar")
    model = manifold_impl.mlstm.MLSTM(config, dtype=torch.float64)
    logits, _ = model(torch.zeros(1, 3, dtype=torch.int64))  # the forward pass works
    with pytest.raises(NotImplementedError, match="forward-only"):
        logits.sum().backward()


# --- bad input ------------------------------------------------------------------------------------

BAD_TOKENS = {
    "out_of_range": (np.array([[0, 80]]), ValueError, "out of range"),
    "negative": (np.array([[-1, 3]]), ValueError, "out of range"),
    "float": (np.array([[0.0, 1.0]]), TypeError, "integers"),
    "rank1": (np.array([0, 1]), ValueError, "shape"),
    "rank3": (np.zeros((1, 2, 1), dtype=np.int64), ValueError, "shape"),
}


@pytest.mark.parametrize("tree", ["reference", "torch"])
@pytest.mark.parametrize("case", list(BAD_TOKENS.values()), ids=list(BAD_TOKENS))
def test_bad_tokens_raise(tree, case):
    tokens, error, message = case
    config = MLSTMConfig(80)
    with pytest.raises(error, match=message):
        if tree == "reference":
            model = reference.mlstm.MLSTM(config)
            model.forward(model.init_params(np.random.default_rng(0)), tokens)
        else:
            manifold_impl.mlstm.MLSTM(config)(torch.from_numpy(tokens))


@pytest.mark.parametrize("tree", ["reference", "torch"])
def test_bad_state_raises(tree):
    config = MLSTMConfig(80)
    tokens = np.zeros((BATCH, 2), dtype=np.int64)
    if tree == "reference":
        model = reference.mlstm.MLSTM(config)
        params = model.init_params(np.random.default_rng(0))
        _, cache = model.forward(params, tokens)
        bad = cache._replace(state=cache.state._replace(memory=cache.state.memory[:1]))
        with pytest.raises(ValueError, match="state.memory"):
            model.forward(params, tokens, bad)
    else:
        model = manifold_impl.mlstm.MLSTM(config)
        with torch.no_grad():
            _, cache = model(torch.from_numpy(tokens))
            bad = cache._replace(state=cache.state._replace(stabilizer=cache.state.stabilizer[..., None]))
            with pytest.raises(ValueError, match="state.stabilizer"):
                model(torch.from_numpy(tokens), bad)
            bad = cache._replace(state=cache.state._replace(normalizer=cache.state.normalizer.numpy()))
            with pytest.raises(TypeError, match="state.normalizer must be a torch.Tensor, got ndarray"):
                model(torch.from_numpy(tokens), bad)
    short = cache._replace(state=tuple(cache.state)[:3])
    with pytest.raises(TypeError, match=r"state must be an MLSTMState \(4 arrays\), got tuple"):
        model.forward(params, tokens, short) if tree == "reference" else model(torch.from_numpy(tokens), short)


BAD_CONFIGS = {
    "head_dim_does_not_divide": ({"num_heads": 5}, ValueError, "num_heads"),
    "blocksize_does_not_divide": ({"qkv_proj_blocksize": 5}, ValueError, "qkv_proj_blocksize"),
    "read": ({"read": "orthogonal"}, ValueError, "read"),
    "ns_coeffs": ({"ns_coeffs": "septic"}, ValueError, "ns_coeffs"),
    "ns_steps_zero": ({"ns_steps": 0}, ValueError, "ns_steps"),
    "ns_steps_float": ({"ns_steps": 2.0}, TypeError, "ns_steps"),
    "vocab_zero": ({"vocab_size": 0}, ValueError, "vocab_size"),
    "proj_factor": ({"proj_factor": -1.0}, ValueError, "proj_factor"),
    "kernel_zero": ({"conv1d_kernel_size": 0}, ValueError, "conv1d_kernel_size"),
    "polar_rtol": ({"polar_rtol": 0.0}, ValueError, "polar_rtol"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS.values()), ids=list(BAD_CONFIGS))
def test_invalid_config_raises(case):
    overrides, error, field = case
    with pytest.raises(error, match=field):
        MLSTMConfig(**{"vocab_size": 80, **overrides})


def test_default_config_is_the_specs_layer():
    config = MLSTMConfig(80)
    assert (config.embedding_dim, config.num_heads, config.inner_dim, config.head_dim) == (94, 4, 192, 48)
    assert (config.read, config.ns_steps, config.ns_coeffs) == ("plain", 5, "cubic")


def test_chunk_size_auto_depends_on_the_read_and_bad_sizes_are_refused():
    from manifold_impl.mlstm import _AUTO_CHUNK_SIZE, MLSTMCell

    for read in ("plain", "ns", "polar"):
        assert MLSTMCell(MLSTMConfig(80, read=read)).chunk_size == _AUTO_CHUNK_SIZE[read]
    for bad in (0, -3, 2.5, True, "big"):
        with pytest.raises(ValueError, match="chunk_size"):
            MLSTMCell(MLSTMConfig(80), chunk_size=bad)
