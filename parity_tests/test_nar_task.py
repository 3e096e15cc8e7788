"""The noisy in-context recall task (docs/design.md, Tasks and data): token ranges, slot structure, targets, accuracy.

Structural properties are checked by an independent scan of the generated sequences (plain Python
over slots); the expected number of scored positions by an exact sum over the binomial law of the
number of pairs.
"""

import doctest
import math

import numpy as np
import pytest

from experiments.tasks import recall
from experiments.tasks.recall import (
    IGNORE_INDEX,
    NoisyRecallConfig,
    NoisyRecallTask,
    accuracy,
    evaluation_example,
    sample,
    training_example,
)

CONFIGS = [
    NoisyRecallConfig(vocab_size=80, length=512, frac_noise=0.8),
    NoisyRecallConfig(vocab_size=96, length=256, frac_noise=0.8),
    NoisyRecallConfig(vocab_size=81, length=64, frac_noise=0.5),  # odd split: 32 keys, 33 values
    NoisyRecallConfig(vocab_size=18, length=32, frac_noise=0.3),  # one key, one value
    NoisyRecallConfig(vocab_size=80, length=64, frac_noise=0.0),  # no noise
    NoisyRecallConfig(vocab_size=80, length=64, frac_noise=0.999),  # almost only the forced pair
    NoisyRecallConfig(vocab_size=80, length=4, frac_noise=0.8),  # shortest: forced pair + probe
    NoisyRecallConfig(vocab_size=12, length=16, frac_noise=0.0, num_noise_tokens=0),
]
CONFIG_IDS = [f"V{c.vocab_size}-L{c.length}-f{c.frac_noise}-N{c.num_noise_tokens}" for c in CONFIGS]
BATCH = 64


def draw(config, batch=BATCH, seed=0):
    return sample(config, batch, np.random.default_rng(seed))


def slots_of(seq):
    """[(first, second)] token pairs of one sequence, as Python ints."""
    return [(int(seq[i]), int(seq[i + 1])) for i in range(0, len(seq), 2)]


def expected_eval_targets(seq, num_keys):
    """Evaluation targets by a forward scan with a set of keys seen so far."""
    targets = [IGNORE_INDEX] * (len(seq) - 1)
    seen = set()
    for position in range(0, len(seq), 2):
        token = int(seq[position])
        if token < num_keys:
            if token in seen:
                targets[position] = int(seq[position + 1])
            seen.add(token)
    return targets


# --- token ranges, shapes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "vocab_size, keys, values, noise",
    [
        (80, range(0, 32), range(32, 64), range(64, 80)),
        (96, range(0, 40), range(40, 80), range(80, 96)),
        (81, range(0, 32), range(32, 65), range(65, 81)),  # the odd token goes to the values
        (18, range(0, 1), range(1, 2), range(2, 18)),
        (19, range(0, 1), range(1, 3), range(3, 19)),
    ],
    ids=["V80", "V96", "V81-odd", "V18-min", "V19-min-odd"],
)
def test_token_ranges(vocab_size, keys, values, noise):
    config = NoisyRecallConfig(vocab_size=vocab_size)
    assert (config.key_range, config.value_range, config.noise_range) == (keys, values, noise)
    assert (config.num_keys, config.num_values) == (len(keys), len(values))


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_sample_shape_dtype_and_token_range(config):
    seqs = draw(config)
    assert seqs.shape == (BATCH, config.length)
    assert seqs.dtype == np.int64
    assert seqs.min() >= 0 and seqs.max() < config.vocab_size


def test_numpy_integer_sizes_are_accepted_as_int():
    config = NoisyRecallConfig(vocab_size=np.int64(80), length=np.int32(64), frac_noise=0)
    assert type(config.vocab_size) is int and type(config.length) is int
    assert type(config.frac_noise) is float
    assert config == NoisyRecallConfig(vocab_size=80, length=64, frac_noise=0.0)


# --- slot structure, by an independent scan ----------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_slots_are_noise_pairs_or_key_value_pairs(config):
    keys, values, noise = config.key_range, config.value_range, config.noise_range
    for seq in draw(config):
        for first, second in slots_of(seq):
            is_pair = first in keys and second in values
            is_noise = first in noise and second in noise
            assert is_pair or is_noise, (first, second)


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_value_is_fixed_per_key_within_a_sequence(config):
    for seq in draw(config):
        value_of = {}
        for first, second in slots_of(seq):
            if first in config.key_range:
                assert value_of.setdefault(first, second) == second


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_last_slot_probes_a_key_shown_earlier_with_its_value(config):
    for seq in draw(config):
        slots = slots_of(seq)
        shown = {first: second for first, second in slots[:-1] if first in config.key_range}
        assert shown, "no pair before the probe"
        probe_key, probe_value = slots[-1]
        assert probe_key in shown and shown[probe_key] == probe_value


def test_forced_pair_is_uniform_over_non_final_slots():
    """At frac_noise → 1 only the forced slot is a pair; it lands on each of 3 slots ~1/3."""
    config = NoisyRecallConfig(vocab_size=80, length=8, frac_noise=1 - 1e-12)
    seqs = draw(config, batch=3000)
    is_pair = seqs[:, 0:6:2] < config.num_keys  # [B, 3]
    assert (is_pair.sum(axis=1) == 1).all()
    counts = is_pair.sum(axis=0)
    np.testing.assert_allclose(counts, 1000, atol=150)  # binomial sd ≈ 26


def test_probe_is_uniform_over_distinct_shown_keys():
    """Two shown keys, one shown twice: the probe is each with probability 1/2 (not 2/3, 1/3)."""
    config = NoisyRecallConfig(vocab_size=20, length=8, frac_noise=0.0)  # 2 keys, 3 pairs + probe
    seqs = draw(config, batch=6000)
    slots = seqs.reshape(len(seqs), -1, 2)
    shown = slots[:, :3, 0]  # [B, 3]
    both = (shown == 0).any(axis=1) & (shown == 1).any(axis=1)
    once_zero = both & ((shown == 0).sum(axis=1) == 1)  # key 0 once, key 1 twice
    probe_is_zero = slots[once_zero, -1, 0] == 0
    assert once_zero.sum() > 2000
    assert abs(probe_is_zero.mean() - 0.5) < 0.05  # sd ≈ 0.01


@pytest.mark.parametrize("frac_noise", [0.0, 0.3, 0.8, 0.95], ids=lambda f: f"f{f}")
def test_fraction_of_noise_slots_matches_frac_noise(frac_noise):
    config = NoisyRecallConfig(vocab_size=80, length=512, frac_noise=frac_noise)
    seqs = draw(config, batch=256)
    shown_slots = seqs[:, 0:-2:2]  # first token of every non-final slot, [B, 255]
    measured = (shown_slots >= config.noise_range.start).mean()
    # One of the 255 non-final slots is forced to be a pair.
    expected = frac_noise * (config.num_slots - 2) / (config.num_slots - 1)
    assert abs(measured - expected) < 0.02  # sd < 0.002 over 65k slots


# --- seeds --------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS[:3], ids=CONFIG_IDS[:3])
def test_same_seed_repeats_exactly(config):
    np.testing.assert_array_equal(draw(config, seed=7), draw(config, seed=7))


@pytest.mark.parametrize("config", CONFIGS[:3], ids=CONFIG_IDS[:3])
def test_different_seeds_differ(config):
    assert not np.array_equal(draw(config, seed=0), draw(config, seed=1))


def test_task_interface_matches_the_functions():
    config = CONFIGS[0]
    task = NoisyRecallTask(config)
    inputs, targets = task.sample_batch(np.random.default_rng(3), 4, evaluation=True)
    expected_inputs, expected_targets = evaluation_example(draw(config, 4, seed=3), config)
    np.testing.assert_array_equal(inputs, expected_inputs)
    np.testing.assert_array_equal(targets, expected_targets)
    inputs, targets = task.sample_batch(np.random.default_rng(3), 4)
    assert inputs.shape == targets.shape == (4, task.input_length)
    np.testing.assert_array_equal(inputs[:, 1:], targets[:, :-1])


# --- targets ------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_training_targets_are_the_shifted_sequence(config):
    seqs = draw(config)
    inputs, targets = training_example(seqs)
    np.testing.assert_array_equal(inputs, seqs[:, :-1])
    np.testing.assert_array_equal(targets, seqs[:, 1:])
    assert (targets != IGNORE_INDEX).all()


@pytest.mark.parametrize("config", CONFIGS, ids=CONFIG_IDS)
def test_evaluation_targets_score_repeated_keys_and_the_probe(config):
    seqs = draw(config)
    inputs, targets = evaluation_example(seqs, config)
    assert inputs.shape == targets.shape == (BATCH, config.length - 1)
    np.testing.assert_array_equal(inputs, seqs[:, :-1])
    expected = [expected_eval_targets(seq, config.num_keys) for seq in seqs]
    np.testing.assert_array_equal(targets, expected)
    # Each scored target is the value after a key at an even input position; the probe is scored.
    rows, positions = np.nonzero(targets != IGNORE_INDEX)
    assert (positions % 2 == 0).all()
    assert (seqs[rows, positions] < config.num_keys).all()
    np.testing.assert_array_equal(targets[rows, positions], seqs[rows, positions + 1])
    np.testing.assert_array_equal(targets[:, -1], seqs[:, -1])


def test_evaluation_targets_of_the_worked_example():
    config = NoisyRecallConfig(vocab_size=12, length=12, frac_noise=0.5, num_noise_tokens=4)
    seqs = np.array([[2, 5, 9, 8, 0, 7, 2, 5, 11, 11, 0, 7]])
    inputs, targets = evaluation_example(seqs, config)
    expected = np.full((1, 11), IGNORE_INDEX)
    expected[0, 6] = 5  # repeated key 2 at input position 6, its value at position 7
    expected[0, 10] = 7  # probe key 0 at position 10, its value at position 11
    np.testing.assert_array_equal(inputs, seqs[:, :-1])
    np.testing.assert_array_equal(targets, expected)


def test_module_docstring_example_runs():
    result = doctest.testmod(recall, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def exact_expected_scored(config):
    """E[repeated keys] + 1 (the probe), summed over the law of the number of pairs.

    The non-final slots hold M = 1 + Binomial(S - 2, 1 - frac_noise) pairs (one forced); given M,
    the keys are M uniform draws from K, of which K (1 - (1 - 1/K)^M) are distinct on average.
    """
    trials, p, num_keys = config.num_slots - 2, 1 - config.frac_noise, config.num_keys
    total = 0.0
    for successes in range(trials + 1):
        weight = math.comb(trials, successes) * p**successes * (1 - p) ** (trials - successes)
        pairs = 1 + successes
        distinct = num_keys * (1 - (1 - 1 / num_keys) ** pairs)
        total += weight * (pairs - distinct)
    return total + 1


@pytest.mark.parametrize(
    "length, exact, spec_about",
    [(512, 27.106, 27), (1024, 73.267, 72)],
    ids=["V80-L512", "V80-L1024"],
)
def test_average_scored_positions_per_sequence(length, exact, spec_about):
    config = NoisyRecallConfig(vocab_size=80, length=length, frac_noise=0.8)
    expectation = exact_expected_scored(config)
    assert expectation == pytest.approx(exact, abs=1e-3)
    _, targets = evaluation_example(draw(config, batch=2000, seed=11), config)
    measured = (targets != IGNORE_INDEX).sum(axis=1).mean()
    # Per-sequence sd ≈ 5 (L=512), 9 (L=1024): the mean of 2000 has sd ≤ 0.2; 0.6 is ≥ 3 sd.
    assert abs(measured - expectation) < 0.6
    # docs/design.md (Tasks and data) rounds these to "about 27" and "about 72"; the exact value at L=1024 is 73.3
    # (72.3 repeated keys plus the probe), hence the loose bound.
    assert abs(expectation - spec_about) < 1.5


# --- accuracy -----------------------------------------------------------------------------------

ACC_TARGETS = np.array([[IGNORE_INDEX, 5, IGNORE_INDEX, 7], [3, IGNORE_INDEX, IGNORE_INDEX, 1]])
ACC_PREDICTIONS = np.array([[0, 5, 1, 6], [3, 0, 0, 1]])  # right 5, wrong 7, right 3, right 1


def one_hot_logits(predictions, vocab=10):
    return np.eye(vocab)[predictions] * 3.0 - 1.0  # [B, T, V], argmax = predictions


@pytest.mark.parametrize(
    "outputs",
    [ACC_PREDICTIONS, one_hot_logits(ACC_PREDICTIONS)],
    ids=["predictions", "logits"],
)
def test_accuracy_on_a_known_input(outputs):
    assert accuracy(outputs, ACC_TARGETS) == pytest.approx(3 / 4)  # 3 of 4 scored positions
    targets = ACC_TARGETS.copy()
    targets[1, 3] = IGNORE_INDEX  # now row 0: 1 of 2, row 1: 1 of 1
    assert accuracy(outputs, targets) == pytest.approx(2 / 3)  # not (1/2 + 1) / 2


def test_accuracy_of_perfect_and_of_wrong_predictions():
    config = CONFIGS[0]
    _, targets = evaluation_example(draw(config, batch=8), config)
    perfect = np.where(targets != IGNORE_INDEX, targets, 0)  # unscored positions do not count
    assert accuracy(perfect, targets) == 1.0
    assert accuracy(one_hot_logits(perfect, config.vocab_size), targets) == 1.0
    assert accuracy(np.full_like(targets, config.vocab_size - 1), targets) == 0.0  # a noise id


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"length": 511}, ValueError, "length must be even"),
        ({"length": 3}, ValueError, "length must be even"),
        ({"length": 2}, ValueError, "length must be at least 4"),
        ({"vocab_size": 17}, ValueError, "vocab_size=17 leaves 1"),
        ({"vocab_size": 16}, ValueError, "vocab_size=16 leaves 0"),
        ({"frac_noise": -0.1}, ValueError, "frac_noise must lie in"),
        ({"frac_noise": 1.0}, ValueError, "frac_noise must lie in"),
        ({"frac_noise": float("nan")}, ValueError, "frac_noise must lie in"),
        ({"num_noise_tokens": 0}, ValueError, "num_noise_tokens must be at least 1"),
        ({"num_noise_tokens": -1}, ValueError, "num_noise_tokens must be at least 0"),
        ({"vocab_size": 80.0}, TypeError, "vocab_size must be an int"),
        ({"length": "512"}, TypeError, "length must be an int"),
        ({"length": True}, TypeError, "length must be an int"),
        ({"num_noise_tokens": 16.0}, TypeError, "num_noise_tokens must be an int"),
        ({"frac_noise": "0.8"}, TypeError, "frac_noise must be a real number"),
    ],
    ids=[
        "odd-length",
        "odd-length-3",
        "length-2",
        "one-non-noise-token",
        "no-non-noise-token",
        "frac-negative",
        "frac-one",
        "frac-nan",
        "noise-needs-tokens",
        "negative-noise-tokens",
        "float-vocab",
        "str-length",
        "bool-length",
        "float-noise-tokens",
        "str-frac",
    ],
)
def test_bad_config_raises_naming_the_field(kwargs, error, match):
    with pytest.raises(error, match=match):
        NoisyRecallConfig(**kwargs)


@pytest.mark.parametrize(
    "batch, generator, error, match",
    [
        (4, np.random.RandomState(0), TypeError, "numpy.random.Generator"),
        (4, 0, TypeError, "numpy.random.Generator"),
        (0, np.random.default_rng(0), ValueError, "batch must be at least 1"),
        (2.0, np.random.default_rng(0), TypeError, "batch must be an int"),
    ],
    ids=["legacy-random-state", "int-seed", "zero-batch", "float-batch"],
)
def test_bad_sample_arguments_raise(batch, generator, error, match):
    with pytest.raises(error, match=match):
        sample(CONFIGS[0], batch, generator)


def _bad_sequences():
    good = np.array([[2, 5, 9, 8, 0, 7, 2, 5, 11, 11, 0, 7]])
    cases = {}
    cases["wrong-length"] = (good[:, :10], ValueError, "length 12")
    cases["1d"] = (good[0], ValueError, r"\[batch, length\]")
    cases["float"] = (good.astype(float), TypeError, "integer token ids")
    cases["out-of-range"] = (np.where(good == 9, 12, good), ValueError, "must lie in")
    bad = good.copy()
    bad[0, 2:4] = [9, 5]  # noise then value
    cases["mixed-slot"] = (bad, ValueError, "slot 1")
    bad = good.copy()
    bad[0, 10:12] = [8, 8]  # last slot is noise
    cases["noise-probe"] = (bad, ValueError, "slot 5")
    return cases


BAD_SEQUENCES = _bad_sequences()


@pytest.mark.parametrize(
    "seqs, error, match", BAD_SEQUENCES.values(), ids=list(BAD_SEQUENCES.keys())
)
def test_bad_sequences_raise_in_evaluation(seqs, error, match):
    config = NoisyRecallConfig(vocab_size=12, length=12, frac_noise=0.5, num_noise_tokens=4)
    with pytest.raises(error, match=match):
        evaluation_example(seqs, config)


@pytest.mark.parametrize(
    "outputs, targets, error, match",
    [
        (ACC_PREDICTIONS[:, :3], ACC_TARGETS, ValueError, "does not match"),
        (one_hot_logits(ACC_PREDICTIONS)[:1], ACC_TARGETS, ValueError, "does not match"),
        (ACC_PREDICTIONS[0], ACC_TARGETS, ValueError, "expected logits"),
        (ACC_PREDICTIONS, ACC_TARGETS[0], ValueError, "targets must be"),
        (ACC_PREDICTIONS.astype(float), ACC_TARGETS, TypeError, "must be integers"),
        (ACC_PREDICTIONS, ACC_TARGETS.astype(float), TypeError, "targets must be integers"),
        (ACC_PREDICTIONS, np.full_like(ACC_TARGETS, IGNORE_INDEX), ValueError, "no scored"),
    ],
    ids=[
        "predictions-shape",
        "logits-shape",
        "predictions-1d",
        "targets-1d",
        "float-predictions",
        "float-targets",
        "nothing-scored",
    ],
)
def test_bad_accuracy_input_raises(outputs, targets, error, match):
    with pytest.raises(error, match=match):
        accuracy(outputs, targets)
