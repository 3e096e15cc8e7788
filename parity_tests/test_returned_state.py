"""A layer accepts the state it returned, however long the float32 sequence that produced it.

The general exponential's orthogonality error per factor grows with the rotation (about 4e-6 at
‖c‖ ≈ 30), so the last state of a long call can drift past the membership tolerance;
``Group.settle`` moves such a returned state back onto the group and leaves the others alone.
"""

import numpy as np
import pytest
import scipy.linalg
import torch

from manifold_impl.group_rnn import GroupRNN, GroupRNNLayer
from manifold_impl.groups import get_group
from parity_tests.oracles import group_violation
from parity_tests.tolerances import SETTLED_ATOL
from reference.config import GroupRNNConfig
from reference.groups import GROUPS, get_group as reference_group
from reference.linalg import default_atol

COMPACT = [name for name, group in GROUPS.items() if group.is_compact]


def _drifted(group, drift, seed=0):
    """Five float64 elements x·(I + drift·S) with S Hermitian of unit max-entry (SU: and a
    determinant phase e^{i·drift}), on the group's support."""
    g = get_group(group, 4)
    x = g.random((5,), generator=torch.Generator().manual_seed(seed), dtype=torch.float64).numpy()
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((5, 4, 4)) + (1j * rng.standard_normal((5, 4, 4)) if g.is_complex else 0)
    s = s + np.conj(np.swapaxes(s, -1, -2))
    s = s / np.abs(s).max(axis=(-2, -1), keepdims=True)
    support = np.abs(x).sum(axis=0) > 0  # T: the diagonal; BO: the blocks
    m = x @ (np.eye(4) + drift * s * support)
    if group == "SU":
        m = m * np.exp(1j * drift)
    return m


def _polar(m):
    return np.stack([scipy.linalg.polar(a)[0] for a in m])


@pytest.mark.parametrize("group", COMPACT)
def test_settle_moves_a_drifted_element_to_its_polar_factor(group):
    m = _drifted(group, 1e-3)
    settled = get_group(group, 4).settle(torch.from_numpy(m)).numpy()
    assert group_violation(group, m, 2 if group == "BO" else None) > 1e-4
    assert group_violation(group, settled, 2 if group == "BO" else None) < 1e-13
    if group == "SU":  # the polar factor's phase divided out: the closest SU element to second order
        closest = reference_group("SU", 4).nearest(m)
        np.testing.assert_allclose(settled, closest, rtol=0, atol=10 * 1e-3 ** 2)
    else:
        np.testing.assert_allclose(settled, _polar(m), rtol=0, atol=SETTLED_ATOL)
    np.testing.assert_allclose(reference_group(group, 4).settle(m), settled, rtol=0, atol=SETTLED_ATOL)


@pytest.mark.parametrize("group", COMPACT)
def test_settle_leaves_elements_inside_half_the_tolerance_bit_for_bit(group):
    m = _drifted(group, 1e-6).astype(np.complex64 if GROUPS[group].is_complex else np.float32)
    for out in (get_group(group, 4).settle(torch.from_numpy(m)).numpy(), reference_group(group, 4).settle(m)):
        assert out.dtype == m.dtype
        np.testing.assert_array_equal(out, m)


def test_the_settled_state_passes_the_gradient_through():
    layer = GroupRNNLayer(3, "O", 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    state = torch.from_numpy(_drifted("O", 1e-3)).requires_grad_()
    weight = torch.randn(5, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (layer.cell.settle(state) * weight).sum().backward()
    torch.testing.assert_close(state.grad, weight, rtol=0, atol=0)


def _scaled_layer(group, n, norm, features=16):
    """A float32 layer whose drive W x has norm about ``norm`` for x ~ N(0, I)."""
    layer = GroupRNNLayer(features, group, n, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        layer.cell.input_map.weight.mul_(norm / layer.cell.input_map.weight.norm())
    return layer


@pytest.mark.parametrize("group, n, norm, steps", [("O", 8, 50.0, 2000), ("SU", 6, 6.0, 8000),
                                                   ("U", 6, 6.0, 16000)])
def test_a_float32_layer_accepts_the_state_it_returned_after_a_long_sequence(group, n, norm, steps):
    """The settings at which the unsettled state was refused (O: ‖HᴴH − I‖ 1.2e-4, SU: |det − 1|
    1.0e-4 on an AMD EPYC, against tolerances 9.5e-5 and 7.2e-5)."""
    layer = _scaled_layer(group, n, norm)
    inputs = torch.randn(steps, 2, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _, state = layer(inputs)
        layer(inputs[:3], state)  # refused (ValueError) if the state were off the group
    assert group_violation(group, state.numpy()) <= default_atol(np.float32, n) / 2


def test_a_float32_language_model_accepts_the_cache_it_returned_after_a_long_sequence():
    config = GroupRNNConfig(vocab_size=11, group="O", n=8, embedding_dim=16)
    model = GroupRNN(config, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.cell.input_map.weight.mul_(50.0 / model.cell.input_map.weight.norm())
        model.embedding.weight.div_(model.embedding.weight.norm(dim=1, keepdim=True) / 4.0)  # ‖e‖ = 4 ≈ √16
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 11, size=(2, 2000)))
    with torch.no_grad():
        _, cache = model(tokens)
        model(tokens[:, :3], cache)  # refused (ValueError) if the cache's state were off the group
    assert group_violation("O", cache.state.numpy()) <= default_atol(np.float32, 8) / 2


@pytest.mark.parametrize("name, n, block", [("T", 4, None), ("BO", 4, 2), ("BO", 6, 3), ("O", 4, None)])
@pytest.mark.parametrize("drift", [1e-15, 1e-3])  # within half the float64 tolerance (≈ 1e-13), far off
def test_the_packed_settle_is_the_settle_of_the_matrix(name, n, block, drift):
    """On the packed form (T's diagonal, BO's blocks) ``packed_settle`` settles as ``settle`` does on
    the n×n matrix: the element far off moved, the one within half the tolerance left as it is."""
    group = get_group(name, n, **({"block": block} if block else {}))
    x = group.random((3,), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    packed = group.pack(x)
    noise = torch.randn(packed.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    packed = packed * (1 + drift * noise)
    settled = group.packed_settle(packed)
    torch.testing.assert_close(settled, group.pack(group.settle(group.unpack(packed))), rtol=0, atol=1e-15)
    assert torch.equal(settled, packed) == (drift < 1e-6)


class MatrixProducts(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the shapes of the matrix products that run."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.bmm.default, torch.ops.aten.mm.default):
            self.shapes.append(tuple(args[0].shape))
        return func(*args, **kwargs or {})


@pytest.mark.parametrize("name, fields", [("T", {}), ("BO", {"block": 2})])
def test_a_torus_or_block_model_settles_its_returned_state_without_n_by_n_products(name, fields):
    """None on the batch of states (the parameters' group check takes one of the n×n H_0)."""
    model = GroupRNN(vocab_size=5, group=name, n=32, embedding_dim=3, **fields,
                     generator=torch.Generator().manual_seed(0))
    with MatrixProducts() as products:
        _, cache = model(torch.zeros(2, 3, dtype=torch.long))
    assert cache.state.shape == (2, 32, 32)
    assert (2, 32, 32) not in products.shapes, products.shapes
