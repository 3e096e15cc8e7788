"""Registry of the token-stream datasets the experiments train on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenDataset:
    """Vocabulary and int64 id streams for the splits ``train``, ``valid`` (model selection) and
    ``test`` (Tiny Shakespeare: the first 90%, next 5% and last 5% of the file; Penn Treebank:
    Mikolov's three files)."""

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
    from experiments.data.shakespeare import tiny_shakespeare

    vocabulary, streams = tiny_shakespeare()
    return TokenDataset("tinyshakespeare", tuple(vocabulary), streams)


DATASETS = {"ptb_char": _ptb_char, "ptb_word": _ptb_word, "tinyshakespeare": _tinyshakespeare}


def load_dataset(name):
    """The dataset called ``name`` (one of DATASETS)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(DATASETS)}")
    return DATASETS[name]()
