"""The long-range memory and state-tracking tasks (docs/design.md, Tasks and data): copy, bit counts, group words.

Every generator is checked against hand-worked examples and against an independent plain-Python
construction of the same sequences (loops over tuples, matrix products of permutation matrices,
scipy's expm), never against itself.
"""

import doctest
import itertools
import math

import numpy as np
import pytest
import scipy.linalg

from experiments.tasks import copy as copy_task
from experiments.tasks import count, sequences, words
from experiments.tasks.count import count_batch, count_example, mod3_batch, parity_batch
from experiments.tasks.copy import baseline_loss, copy_batch, copy_example
from experiments.tasks.sequences import curriculum_length
from experiments.tasks.words import permutation_group, rotation_logarithm, word_batch, word_example

GROUP_NAMES = list(words.GROUPS)


@pytest.mark.parametrize("module", [sequences, copy_task, count, words], ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# --- lengths -------------------------------------------------------------------------------------

def test_curriculum_length_hand_values():
    assert [curriculum_length(s, 2, 10, 4) for s in range(6)] == [2, 4, 6, 8, 10, 10]
    assert curriculum_length(0, 5, 64, 0) == 64


@pytest.mark.parametrize("call, error", [
    (lambda: curriculum_length(0, 10, 5, 3), ValueError),
    (lambda: curriculum_length(True, 1, 5, 3), TypeError),
    (lambda: curriculum_length(0, 1, 5, -1), ValueError),
    (lambda: curriculum_length(0, 1.0, 5, 3), TypeError),
], ids=["end-below-start", "bool-step", "negative-ramp", "float-start"])
def test_curriculum_refuses_bad_input(call, error):
    with pytest.raises(error):
        call()


# --- copy -----------------------------------------------------------------------------------------

def copy_by_hand(symbols, delay):
    """One sequence of the copy task, built position by position."""
    count = len(symbols)
    inputs = list(symbols) + [0] * delay + [9] + [0] * (count - 1)
    targets = [0] * (delay + count) + list(symbols)
    return inputs, targets


def test_copy_hand_example():
    inputs, targets = copy_example([[1, 2, 3, 4, 5, 6, 7, 8, 1, 2]], delay=0)
    assert inputs.tolist() == [[1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0]]
    assert targets.tolist() == [[0] * 10 + [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]]


@pytest.mark.parametrize("delay", copy_task.COPY_DELAYS)
def test_copy_batch_matches_construction_by_hand(delay):
    inputs, targets = copy_batch(np.random.default_rng(delay), 16, delay)
    assert inputs.shape == targets.shape == (16, delay + 20) and inputs.dtype == targets.dtype == np.int64
    for row_in, row_out in zip(inputs, targets):
        symbols = row_in[:10]
        assert set(symbols.tolist()) <= set(range(1, 9))
        assert (row_in.tolist(), row_out.tolist()) == copy_by_hand(symbols.tolist(), delay)


def test_copy_symbols_are_uniform():
    inputs, _ = copy_batch(np.random.default_rng(0), 4000, 0)
    counts = np.bincount(inputs[:, :10].ravel(), minlength=9)[1:]
    assert counts.sum() == 40_000 and np.all(np.abs(counts / 5000 - 1) < 0.05)


@pytest.mark.parametrize("delay, expected", [(100, 0.1732867951), (500, 0.0399892604), (1000, 0.0203866818),
                                             (2000, 0.0102942651)])
def test_copy_baseline_hand_values(delay, expected):
    """10·ln 8/(T + 20), worked out by hand (ln 8 = 2.0794415417)."""
    assert baseline_loss(delay) == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize("delay, copy_length", [(0, 10), (7, 10), (100, 10), (5, 1), (3, 4)])
def test_copy_baseline_is_the_memoryless_predictor_loss(delay, copy_length):
    """The best memoryless predictor: blank where blanks are due, uniform over 8 symbols elsewhere."""
    _, targets = copy_batch(np.random.default_rng(1), 32, delay, copy_length)
    probabilities = np.zeros(targets.shape + (copy_task.VOCAB_SIZE,))
    probabilities[:, :delay + copy_length, 0] = 1.0
    probabilities[:, delay + copy_length:, 1:9] = 1 / 8
    picked = np.take_along_axis(probabilities, targets[..., None], axis=-1)[..., 0]
    assert -np.log(picked).mean() == pytest.approx(baseline_loss(delay, copy_length), rel=1e-12)


@pytest.mark.parametrize("delay, copy_length", [(0, 1), (6, 3)])
def test_shorter_copies_match_construction_by_hand(delay, copy_length):
    inputs, targets = copy_batch(np.random.default_rng(2), 4, delay, copy_length)
    assert inputs.shape == (4, delay + 2 * copy_length)
    for row_in, row_out in zip(inputs, targets):
        assert (row_in.tolist(), row_out.tolist()) == copy_by_hand(row_in[:copy_length].tolist(), delay)


def test_copy_hand_example_with_two_symbols():
    inputs, targets = copy_example([[3, 8]], delay=2)
    assert inputs.tolist() == [[3, 8, 0, 0, 9, 0]] and targets.tolist() == [[0, 0, 0, 0, 3, 8]]


@pytest.mark.parametrize("call, error", [
    (lambda: copy_example(np.ones((2, 0), dtype=int), 5), ValueError),
    (lambda: copy_example([[0] + [1] * 9], 5), ValueError),
    (lambda: copy_example([[9] + [1] * 9], 5), ValueError),
    (lambda: copy_example([[1.0] * 10], 5), TypeError),
    (lambda: copy_example([[1] * 10], -1), ValueError),
    (lambda: copy_batch(0, 4, 10), TypeError),
    (lambda: copy_batch(np.random.default_rng(0), 0, 10), ValueError),
    (lambda: copy_batch(np.random.default_rng(0), 2, 10, 0), ValueError),
], ids=["no-symbols", "blank-symbol", "marker-symbol", "float-symbols", "negative-delay", "seed-not-generator",
        "empty-batch", "copy-length-0"])
def test_copy_refuses_bad_input(call, error):
    with pytest.raises(error):
        call()


# --- bit counts -----------------------------------------------------------------------------------

def running_count_by_hand(row, modulus):
    count, out = 0, []
    for bit in row:
        count = (count + bit) % modulus
        out.append(count)
    return out


def test_parity_and_mod3_hand_examples():
    assert count_example([[0, 0, 1, 1, 1, 0, 1]], 2)[1].tolist() == [[0, 0, 1, 0, 1, 1, 0]]
    assert count_example([[1, 1, 1, 1, 0, 1, 1]], 3)[1].tolist() == [[1, 2, 0, 1, 1, 2, 0]]


@pytest.mark.parametrize("batch_fn, modulus", [(parity_batch, 2), (mod3_batch, 3)], ids=["parity", "mod3"])
@pytest.mark.parametrize("length", [1, 64, 1024])
def test_count_batch_matches_loop(batch_fn, modulus, length):
    inputs, targets = batch_fn(np.random.default_rng(length), 8, length)
    assert inputs.shape == targets.shape == (8, length) and inputs.dtype == targets.dtype == np.int64
    assert set(np.unique(inputs)) <= {0, 1}
    for row_in, row_out in zip(inputs.tolist(), targets.tolist()):
        assert row_out == running_count_by_hand(row_in, modulus)
    assert targets.max() < count.vocab_size(modulus) and inputs.max() < count.vocab_size(modulus)


def test_bits_are_fair():
    inputs, _ = count_batch(np.random.default_rng(0), 100, 100, 3)
    assert abs(inputs.mean() - 0.5) < 0.02


@pytest.mark.parametrize("call, error", [
    (lambda: count_example([[0, 2]], 2), ValueError),
    (lambda: count_example([0, 1], 2), ValueError),
    (lambda: count_example([[0, 1]], 1), ValueError),
    (lambda: count_example([[0.0, 1.0]], 2), TypeError),
    (lambda: parity_batch(np.random.default_rng(0), 4, 0), ValueError),
], ids=["bit-2", "rank-1", "modulus-1", "float-bits", "length-0"])
def test_bits_refuse_bad_input(call, error):
    with pytest.raises(error):
        call()


# --- group words ----------------------------------------------------------------------------------

def compose(a, b):
    """(a·b)(i) = a(b(i)) on one-line tuples."""
    return tuple(a[i] for i in b)


def test_group_ids_hand_values():
    s3, a5, s5 = (permutation_group(name) for name in ("S3", "A5", "S5"))
    assert [tuple(p) for p in s3.elements] == [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]
    assert s3.signs.tolist() == [1, -1, -1, 1, 1, -1]
    assert (s3.order, a5.order, s5.order) == (6, 60, 120)
    assert tuple(s5.elements[1]) == (0, 1, 2, 4, 3) and tuple(a5.elements[1]) == (0, 1, 3, 4, 2)
    assert tuple(a5.elements[-1]) == tuple(s5.elements[-1]) == (4, 3, 2, 1, 0)
    assert s3.table[2, 1] == 3 and s3.table[1, 2] == 4 and s3.table[3, 4] == 0


def test_a5_is_the_even_part_of_s5():
    s5, a5 = permutation_group("S5"), permutation_group("A5")
    even = [tuple(p) for p, s in zip(s5.elements, s5.signs) if s == 1]
    assert [tuple(p) for p in a5.elements] == even  # same lexicographic order
    assert np.all(a5.signs == 1)


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_table_is_composition_and_matrix_product(name):
    group = permutation_group(name)
    tuples = [tuple(p) for p in group.elements]
    matrices = group.permutation_matrices()
    for a, b in itertools.product(range(group.order), repeat=2):
        assert tuples[group.table[a, b]] == compose(tuples[a], tuples[b])
    np.testing.assert_array_equal(matrices[group.table], matrices[:, None] @ matrices[None, :])
    assert tuples[0] == tuple(range(group.degree))


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_running_products_match_loop(name):
    group = permutation_group(name)
    inputs, targets = word_batch(group, np.random.default_rng(5), 6, 200)
    assert inputs.shape == targets.shape == (6, 200) and inputs.dtype == targets.dtype == np.int64
    tuples = [tuple(p) for p in group.elements]
    for row_in, row_out in zip(inputs.tolist(), targets.tolist()):
        product, expected = tuple(range(group.degree)), []
        for token in row_in:
            product = compose(product, tuples[token])
            expected.append(tuples.index(product))
        assert row_out == expected


def test_s3_running_product_is_left_to_right():
    """x_1·x_2 = 2·1 = 3, not 1·2 = 4: the convention H_t = H_{t−1} ρ(x_t)."""
    assert word_example(permutation_group("S3"), [[2, 1]])[1].tolist() == [[2, 3]]


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_words_are_uniform(name):
    group = permutation_group(name)
    inputs, targets = word_batch(group, np.random.default_rng(0), 200, 300)
    for ids in (inputs, targets):
        counts = np.bincount(ids.ravel(), minlength=group.order)
        assert counts.size == group.order and np.all(np.abs(counts / (60_000 / group.order) - 1) < 0.25)


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_representation_is_faithful_in_so_n(name):
    group = permutation_group(name)
    rep = group.representation()
    np.testing.assert_allclose(rep[group.table], rep[:, None] @ rep[None, :], atol=0)
    np.testing.assert_allclose(np.linalg.det(rep), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.swapaxes(rep, -1, -2) @ rep, np.broadcast_to(np.eye(group.degree), rep.shape), atol=0)
    assert len({r.tobytes() for r in rep}) == group.order


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_minus_one_eigenspace_of_representation_is_even(name):
    """A real logarithm of an orthogonal matrix exists iff its −1 eigenspace has even dimension."""
    for r in permutation_group(name).representation():
        eigenvalues = np.linalg.eigvals(r)
        assert np.sum(np.abs(eigenvalues + 1) < 1e-8) % 2 == 0


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_rotation_logarithm_inverts_expm(name):
    for r in permutation_group(name).representation():
        log = rotation_logarithm(r)
        np.testing.assert_array_equal(log, -log.T)
        np.testing.assert_allclose(scipy.linalg.expm(log), r, atol=1e-13)


@pytest.mark.parametrize("angle", [0.3, -2.0, math.pi - 1e-6])
def test_rotation_logarithm_of_a_plane_rotation(angle):
    """The principal logarithm of a 2-D rotation by θ ∈ (−π, π) is θ·[[0, −1], [1, 0]]."""
    r = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    np.testing.assert_allclose(rotation_logarithm(r), angle * np.array([[0.0, -1.0], [1.0, 0.0]]), atol=1e-9)


def test_rotation_logarithm_of_minus_identity():
    """−I₄ pairs its four −1 eigenvalues into two rotations by π."""
    log = rotation_logarithm(-np.eye(4))
    np.testing.assert_allclose(scipy.linalg.expm(log), -np.eye(4), atol=1e-14)
    np.testing.assert_allclose(np.sort(np.abs(np.linalg.eigvals(log))), [math.pi] * 4, atol=1e-12)


@pytest.mark.parametrize("call, error", [
    (lambda: permutation_group("S4"), ValueError),
    (lambda: word_example(permutation_group("S3"), [[0, 6]]), ValueError),
    (lambda: word_example(permutation_group("S3"), [[-1]]), ValueError),
    (lambda: word_example(permutation_group("S3"), [0, 1]), ValueError),
    (lambda: word_example("S3", [[0, 1]]), TypeError),
    (lambda: word_batch(permutation_group("A5"), None, 2, 3), TypeError),
    (lambda: rotation_logarithm(np.diag([1.0, 1.0, -1.0])), ValueError),
    (lambda: rotation_logarithm(2 * np.eye(3)), ValueError),
    (lambda: rotation_logarithm(np.eye(3)[:2]), ValueError),
], ids=["unknown-group", "id-too-large", "negative-id", "rank-1", "name-not-group", "no-generator", "det-minus-one",
        "not-orthogonal", "not-square"])
def test_words_refuse_bad_input(call, error):
    with pytest.raises(error):
        call()
