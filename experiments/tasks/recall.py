"""The ``recall`` task: noisy in-context recall, MAD's generator re-implemented in NumPy.

``NoisyRecallConfig``, ``training_example``/``evaluation_example`` and ``accuracy`` define the
sequences and the score; ``NoisyRecallTask`` draws them from a seeded generator; ``Recall`` is the
task behind ``experiments.train``. The contract, a worked example and the decisions where the
post is silent: ``Recall``.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np
import torch

from experiments.tasks.base import SPLIT_SEED_OFFSETS, Task, model_device, split_generator
from experiments.tasks.sequences import require_generator, require_int

IGNORE_INDEX = -100
SLOT_SIZE = 2  # tokens per slot: (key, value) or (noise, noise)


@dataclass(frozen=True)
class NoisyRecallConfig:
    """Configuration of the noisy in-context recall task.

    Attributes:
        vocab_size: total number of token ids ``V`` (keys, values and noise).
        length: sequence length ``L`` before the next-token shift; even, at least 4 (one shown pair
            and the probe). Model inputs have ``L - 1`` tokens.
        frac_noise: probability that a non-final, non-forced slot is noise; in ``[0, 1)``.
        num_noise_tokens: number of noise token ids (the top ids of the vocabulary).

    Raises:
        TypeError: a size is not an int, or ``frac_noise`` is not a real number.
        ValueError: a value is out of range (see each message).
    """

    vocab_size: int = 80
    length: int = 512
    frac_noise: float = 0.8
    num_noise_tokens: int = 16

    def __post_init__(self):
        object.__setattr__(self, "vocab_size", require_int("vocab_size", self.vocab_size, 1))
        object.__setattr__(self, "length", require_int("length", self.length, 1))
        object.__setattr__(
            self, "num_noise_tokens", require_int("num_noise_tokens", self.num_noise_tokens, 0)
        )
        if isinstance(self.frac_noise, bool) or not isinstance(self.frac_noise, numbers.Real):
            raise TypeError(
                f"frac_noise must be a real number, got {type(self.frac_noise).__name__}"
            )
        object.__setattr__(self, "frac_noise", float(self.frac_noise))
        if not 0.0 <= self.frac_noise < 1.0:
            raise ValueError(f"frac_noise must lie in [0, 1), got {self.frac_noise}")
        if self.length % SLOT_SIZE:
            raise ValueError(f"length must be even (two-token slots), got {self.length}")
        if self.length < 2 * SLOT_SIZE:
            raise ValueError(
                f"length must be at least 4 (one shown pair and the probe), got {self.length}"
            )
        if self.frac_noise > 0 and self.num_noise_tokens == 0:
            raise ValueError("num_noise_tokens must be at least 1 when frac_noise > 0")
        if self.vocab_size - self.num_noise_tokens < 2:
            raise ValueError(
                f"vocab_size={self.vocab_size} leaves {self.vocab_size - self.num_noise_tokens} "
                f"tokens after num_noise_tokens={self.num_noise_tokens}; need at least 2 "
                f"(one key and one value)"
            )

    @property
    def num_slots(self):
        """Two-token slots per sequence, the probe included: ``L / 2``."""
        return self.length // SLOT_SIZE

    @property
    def num_keys(self):
        """``(V - num_noise_tokens) // 2``."""
        return (self.vocab_size - self.num_noise_tokens) // 2

    @property
    def num_values(self):
        """``V - num_noise_tokens - num_keys`` (takes the odd token, if any)."""
        return self.vocab_size - self.num_noise_tokens - self.num_keys

    @property
    def key_range(self):
        """Key token ids, ``range(0, num_keys)``."""
        return range(0, self.num_keys)

    @property
    def value_range(self):
        """Value token ids, ``range(num_keys, V - num_noise_tokens)``."""
        return range(self.num_keys, self.num_keys + self.num_values)

    @property
    def noise_range(self):
        """Noise token ids, ``range(V - num_noise_tokens, V)``."""
        return range(self.vocab_size - self.num_noise_tokens, self.vocab_size)

    @property
    def input_length(self):
        """Tokens a model sees per sequence after the next-token shift: ``L - 1``."""
        return self.length - 1


def sample(config, batch, generator):
    """Draws ``batch`` independent sequences.

    Args:
        config: a ``NoisyRecallConfig``.
        batch: number of sequences, a positive int.
        generator: the ``numpy.random.Generator`` all randomness comes from; the same seed gives
            the same sequences.

    Returns:
        seqs: ``[batch, L]`` int64 token ids, slot ``s`` at positions ``2s, 2s + 1``.
    """
    require_generator(generator)
    batch = require_int("batch", batch, 1)
    num_keys = config.num_keys
    shown_slots = config.num_slots - 1  # every slot but the probe
    rows = np.arange(batch)

    # Slot kinds: noise with probability frac_noise; one uniform non-final slot forced to a pair.
    is_pair = generator.random((batch, shown_slots)) >= config.frac_noise  # [B, S-1]
    forced = generator.integers(0, shown_slots, size=batch)  # [B]
    is_pair[rows, forced] = True

    # Slot contents, drawn for every slot and selected by kind.
    keys = generator.integers(0, num_keys, size=(batch, shown_slots))  # [B, S-1]
    value_of_key = generator.integers(  # [B, K]: the value of each key in each sequence
        config.value_range.start, config.value_range.stop, size=(batch, num_keys)
    )
    if config.num_noise_tokens:
        noise = generator.integers(  # [B, S-1, 2]
            config.noise_range.start, config.noise_range.stop, size=(batch, shown_slots, SLOT_SIZE)
        )
    else:  # frac_noise == 0: no slot is noise
        noise = np.zeros((batch, shown_slots, SLOT_SIZE), dtype=np.int64)
    pairs = np.stack([keys, value_of_key[rows[:, None], keys]], axis=-1)  # [B, S-1, 2]
    slots = np.where(is_pair[..., None], pairs, noise)  # [B, S-1, 2]

    # Probe: uniform over the distinct keys shown (random priorities, -1 for keys never shown).
    shown = np.zeros((batch, num_keys), dtype=bool)  # [B, K]
    shown[np.broadcast_to(rows[:, None], keys.shape)[is_pair], keys[is_pair]] = True
    priority = np.where(shown, generator.random((batch, num_keys)), -1.0)  # [B, K]
    probe = priority.argmax(axis=1)  # [B]
    probe_slot = np.stack([probe, value_of_key[rows, probe]], axis=-1)[:, None, :]  # [B, 1, 2]

    seqs = np.concatenate([slots, probe_slot], axis=1)  # [B, S, 2]
    return seqs.reshape(batch, config.length).astype(np.int64)


def _require_token_matrix(name, seqs, min_length):
    seqs = np.asarray(seqs)
    if seqs.ndim != 2:
        raise ValueError(f"{name} must be [batch, length], got shape {seqs.shape}")
    if not np.issubdtype(seqs.dtype, np.integer):
        raise TypeError(f"{name} must hold integer token ids, got dtype {seqs.dtype}")
    if seqs.shape[1] < min_length:
        raise ValueError(f"{name} must have at least {min_length} tokens, got {seqs.shape[1]}")
    return seqs


def _check_structure(seqs, config):
    """Raises ``ValueError`` unless each slot is (key, value) or (noise, noise), the last a pair."""
    if seqs.shape[1] != config.length:
        raise ValueError(f"seqs must have length {config.length}, got {seqs.shape[1]}")
    if seqs.size and (seqs.min() < 0 or seqs.max() >= config.vocab_size):
        raise ValueError(
            f"token ids must lie in [0, {config.vocab_size}), got range "
            f"[{seqs.min()}, {seqs.max()}]"
        )
    first, second = seqs[:, 0::2], seqs[:, 1::2]  # [B, S] each
    noise_start = config.noise_range.start
    is_pair = (first < config.num_keys) & (second >= config.num_keys) & (second < noise_start)
    is_noise = (first >= noise_start) & (second >= noise_start)
    bad = ~(is_pair | is_noise)
    bad[:, -1] |= ~is_pair[:, -1]
    if bad.any():
        row, slot = np.argwhere(bad)[0]
        raise ValueError(
            f"sequence {row}, slot {slot} (positions {2 * slot}, {2 * slot + 1}) holds "
            f"{tuple(seqs[row, 2 * slot : 2 * slot + 2].tolist())}: expected (key, value) or "
            f"(noise, noise), and the last slot must be a (key, value) probe"
        )


def training_example(seqs):
    """Next-token inputs and targets; nothing is masked.

    Args:
        seqs: ``[B, L]`` integer token ids.

    Returns:
        (inputs, targets): ``[B, L-1]`` each, ``inputs = seqs[:, :-1]``, ``targets = seqs[:, 1:]``.
    """
    seqs = _require_token_matrix("seqs", seqs, 2)
    return seqs[:, :-1], seqs[:, 1:]


def evaluation_example(seqs, config):
    """Inputs and targets that score only repeated keys and the probe.

    The target at input position ``p`` is the token at ``p + 1``. It is kept exactly where
    position ``p`` holds a key (``p = 2s``, slot ``s``) shown in an earlier slot, or the probe key
    (``s = L/2 - 1``); the target there is the key's value. Every other target is ``IGNORE_INDEX``.

    Args:
        seqs: ``[B, L]`` integer token ids of the task (as ``sample`` returns).
        config: the ``NoisyRecallConfig`` the sequences follow.

    Returns:
        (inputs, targets): ``[B, L-1]`` int64 each; ``inputs = seqs[:, :-1]``.

    Raises:
        ValueError: the shape or a token does not fit the config.
    """
    seqs = _require_token_matrix("seqs", seqs, 2)
    _check_structure(seqs, config)
    batch, num_slots = seqs.shape[0], config.num_slots
    num_keys = config.num_keys
    first_tokens = seqs[:, 0::2]  # [B, S]: the key (or first noise token) of every slot
    slot_index = np.arange(num_slots)

    # First slot in which each key appears; noise slots are parked in a spare column num_keys.
    key_id = np.where(first_tokens < num_keys, first_tokens, num_keys)  # [B, S]
    first_slot = np.full((batch, num_keys + 1), num_slots)  # [B, K+1]
    np.minimum.at(first_slot, (np.arange(batch)[:, None], key_id), slot_index)
    is_repeat = (key_id < num_keys) & (
        slot_index > np.take_along_axis(first_slot, key_id, axis=1)
    )  # [B, S]
    is_repeat[:, -1] = True  # the probe (a repeated key by construction)

    targets = np.full((batch, config.length - 1), IGNORE_INDEX, dtype=np.int64)
    # Key positions 2s are the even input positions; their targets are the values at 2s + 1.
    targets[:, 0::2][is_repeat] = seqs[:, 1::2][is_repeat]
    return seqs[:, :-1].astype(np.int64), targets


def accuracy(logits_or_predictions, targets):
    """Fraction of scored positions predicted correctly, micro-averaged over all sequences.

    Args:
        logits_or_predictions: ``[B, T, V]`` floating logits (argmax over ``V``) or ``[B, T]``
            integer predictions.
        targets: ``[B, T]`` integer targets, ``IGNORE_INDEX`` where not scored.

    Returns:
        A Python float in ``[0, 1]``: correct scored positions / all scored positions.

    Raises:
        ValueError: shapes disagree, or no position is scored.
        TypeError: predictions are not integers, logits not floating, or targets not integers.
    """
    targets = np.asarray(targets)
    outputs = np.asarray(logits_or_predictions)
    if targets.ndim != 2:
        raise ValueError(f"targets must be [batch, time], got shape {targets.shape}")
    if not np.issubdtype(targets.dtype, np.integer):
        raise TypeError(f"targets must be integers, got dtype {targets.dtype}")
    if outputs.ndim == 3:
        if not np.issubdtype(outputs.dtype, np.floating):
            raise TypeError(f"logits [B, T, V] must be floating, got dtype {outputs.dtype}")
        if outputs.shape[:2] != targets.shape:
            raise ValueError(
                f"logits shape {outputs.shape} does not match targets shape {targets.shape}"
            )
        predictions = outputs.argmax(axis=-1)  # [B, T]
    elif outputs.ndim == 2:
        if not np.issubdtype(outputs.dtype, np.integer):
            raise TypeError(
                f"predictions [B, T] must be integers, got dtype {outputs.dtype} "
                f"(pass logits with a trailing vocabulary axis)"
            )
        if outputs.shape != targets.shape:
            raise ValueError(
                f"predictions shape {outputs.shape} does not match targets shape {targets.shape}"
            )
        predictions = outputs
    else:
        raise ValueError(
            f"expected logits [B, T, V] or predictions [B, T], got shape {outputs.shape}"
        )
    scored = targets != IGNORE_INDEX
    if not scored.any():
        raise ValueError("no scored positions: every target is IGNORE_INDEX")
    return float(np.mean(predictions[scored] == targets[scored]))


@dataclass(frozen=True)
class NoisyRecallTask:
    """The task behind one interface: ``sample_batch(generator, batch)`` -> (inputs, targets).

    Attributes:
        config: the ``NoisyRecallConfig``.
    """

    config: NoisyRecallConfig = field(default_factory=NoisyRecallConfig)

    def __post_init__(self):
        if not isinstance(self.config, NoisyRecallConfig):
            raise TypeError(f"config must be a NoisyRecallConfig, got {type(self.config).__name__}")

    @property
    def vocab_size(self):
        return self.config.vocab_size

    @property
    def input_length(self):
        return self.config.input_length

    def sample_batch(self, generator, batch, *, evaluation=False):
        """Fresh sequences as ``[batch, L-1]`` int64 (inputs, targets).

        Args:
            generator: ``numpy.random.Generator``.
            batch: number of sequences.
            evaluation: ``False`` for next-token training targets, ``True`` for the scored
                evaluation targets (``IGNORE_INDEX`` except repeated keys and the probe).
        """
        seqs = sample(self.config, batch, generator)
        if evaluation:
            return evaluation_example(seqs, self.config)
        return training_example(seqs)


EVAL_BATCH = 64  # sequences per forward pass in evaluation (the result does not depend on it)
# The post's optimization, as experiments.train options: AdamW with weight decay, no clipping, no
# warm-up, cosine decay; the defaults of the noisy-recall study's runs.
RECIPE = {"steps": 2000, "batch": 64, "lr": 1e-3, "schedule": "cosine", "weight_decay": 0.01, "clip": None,
          "eval_every": 100}


@dataclass(frozen=True)
class RecallConfig(NoisyRecallConfig):
    """The generator's configuration and the size of each evaluation set.

    Attributes:
        valid_sequences: sequences of each evaluation set.
    """

    valid_sequences: int = 256

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.valid_sequences, bool) or not isinstance(self.valid_sequences, int) \
                or self.valid_sequences < 1:
            raise ValueError(f"valid_sequences must be a positive int, got {self.valid_sequences!r}")


class Recall(Task):
    """Noisy recall: ``train_loss`` (nats) in training, ``{split}_accuracy`` in evaluation.

    Noisy in-context recall (``nar``, docs/design.md (Tasks and data)): MAD's generator, re-implemented in NumPy.

    Vocabulary of ``V`` tokens: the top ``num_noise_tokens`` ids are noise; the rest is split into keys
    then values. For ``V=80`` with 16 noise tokens: keys 0–31, values 32–63, noise 64–79.

    A sequence of even length ``L`` is ``L/2`` two-token *slots*:

    * each slot but the last is, with probability ``frac_noise``, two noise tokens (uniform, with
      replacement), otherwise a ``(key, value)`` pair: the key is uniform over the keys (keys repeat)
      and the value is fixed per key within the sequence;
    * one non-final slot, uniform over them, is forced to be a pair, so a key is always shown;
    * the last slot is the probe: a key already shown, followed by its value.

    Training is plain next-token prediction (``inputs = seq[:, :-1]``, ``targets = seq[:, 1:]``).
    Evaluation scores only the input positions holding a *repeated* key (a key shown in an earlier
    slot; the probe is one), whose target is the value that follows; every other target is
    ``IGNORE_INDEX = -100``. ``accuracy`` is the micro-averaged fraction of scored positions right.

    Worked example (``V=12`` with 4 noise tokens: keys 0–3, values 4–7, noise 8–11; ``L=12``, six
    slots): key 2 is shown at slot 0 and again at slot 3, key 0 at slot 2 and again as the probe::

        slots      (2, 5) (9, 8) (0, 7) (2, 5) (11, 11) (0, 7)
        position    0  1   2  3   4  5   6  7   8   9   10 11

    >>> config = NoisyRecallConfig(vocab_size=12, length=12, frac_noise=0.5, num_noise_tokens=4)
    >>> seqs = np.array([[2, 5, 9, 8, 0, 7, 2, 5, 11, 11, 0, 7]])
    >>> inputs, targets = training_example(seqs)
    >>> targets.tolist()
    [[5, 9, 8, 0, 7, 2, 5, 11, 11, 0, 7]]
    >>> inputs, targets = evaluation_example(seqs, config)
    >>> inputs.tolist()
    [[2, 5, 9, 8, 0, 7, 2, 5, 11, 11, 0]]
    >>> targets.tolist()
    [[-100, -100, -100, -100, -100, -100, 5, -100, -100, -100, 7]]

    Input position 6 holds the repeated key 2 (target: its value 5, the token at position 7); input
    position 10 holds the probe key 0 (target: 7). The first occurrences (positions 0 and 4) are not
    scored: their value cannot be known yet.

    Decisions where docs/design.md (Tasks and data) is silent (MAD's ``multi_query=True`` generator is the reading used):

    * An odd number ``V - num_noise_tokens`` of non-noise tokens gives the extra token to the values
      (``num_keys = (V - N) // 2``, ``num_values = (V - N) - num_keys``), so every id below ``V`` is
      used and noise stays at the top (``V=81``: keys 0–31, values 32–64, noise 65–80).
    * The forced pair is uniform over the ``L/2 - 1`` non-final slots (MAD draws it over all ``L/2``
      slots, so once in ``L/2`` sequences its forcing is a no-op).
    * The probe key is uniform over the *distinct* keys shown (not weighted by occurrences), as in MAD.
    * "Fresh uniform value at a key's first appearance" is implemented by drawing one uniform value per
      key per sequence up front and using it at every occurrence: the same distribution, vectorized.
    * The expected number of scored positions has a closed form: with ``S = L/2`` slots, ``K`` keys,
      ``p = 1 - frac_noise`` and ``M = 1 + Binomial(S - 2, p)`` pairs before the probe, the distinct
      keys number ``K (1 - q^M)`` in expectation (``q = 1 - 1/K``), so
      ``E[scored] = E[M] - K + K q (1 - p/K)^(S-2) + 1``: 27.11 for ``(V, L) = (80, 512)`` and 73.27
      for ``(80, 1024)`` at ``frac_noise = 0.8`` (the specification: "about 27" and "about 72").
    """

    Config = RecallConfig

    def __init__(self, config, seed):
        super().__init__(config, seed)
        self.generator = NoisyRecallTask(config)
        self.evaluation_sets = {
            split: tuple(torch.from_numpy(a) for a in self.generator.sample_batch(
                split_generator(seed, split), config.valid_sequences, evaluation=True))
            for split in SPLIT_SEED_OFFSETS}

    @property
    def vocab_size(self):
        return self.config.vocab_size

    def train_batch(self, generator, batch, step):
        return tuple(torch.from_numpy(a) for a in self.generator.sample_batch(generator, batch))

    @torch.no_grad()
    def evaluate(self, model, split):
        if split not in self.evaluation_sets:
            raise ValueError(f"split must be 'valid' or 'test', got {split!r}")
        inputs, targets = self.evaluation_sets[split]
        predictions = []
        for start in range(0, len(inputs), EVAL_BATCH):
            logits, _ = model(inputs[start:start + EVAL_BATCH].to(model_device(model)))
            predictions.append(logits.argmax(dim=-1).cpu())
        return {f"{split}_accuracy": accuracy(torch.cat(predictions).numpy(), targets.numpy())}


TASKS = {"recall": Recall}
