"""The acceptance sweeps of the parity CLI's harness (slow: ``make test-slow``).

Group RNN: every group, n = 2..8, float64 and float32, random options and seeds. Transformer:
every group and both attention variants, n = 2..6, 1-3 layers, 1-4 heads. mLSTM: every read,
both dtypes, several seeds.
"""

import json

import numpy as np
import pytest

from parity_tests.harness import parity
from reference.config import GROUP_NAMES, MLSTM_READS, GroupRNNConfig, GroupTransformerConfig, MLSTMConfig

pytestmark = pytest.mark.slow
DTYPES = ["float64", "float32"]


def sizes(largest):
    """(group, n) pairs with n = 2..largest; BO (block 2) at even n only (odd n is refused, tested)."""
    return [(g, n) for g in GROUP_NAMES for n in range(2, largest + 1) if g != "BO" or n % 2 == 0]


def options(seed):
    rng = np.random.default_rng(seed)
    mixing = str(rng.choice(["none", "scalar", "lowrank"]))
    return rng, {"readout": str(rng.choice(["linear", "prototype"])), "mixing": mixing,
                 "mixing_rank": int(rng.integers(1, 4)) if mixing == "lowrank" else None}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group, n", sizes(8))
def test_group_rnn_sweep(group, n, dtype):
    rng, extra = options(1000 * n + GROUP_NAMES.index(group))
    config = GroupRNNConfig(vocab_size=13, group=group, n=n, embedding_dim=16, recurrent=bool(rng.integers(2)),
                            reproject_every=[None, 1, 3][int(rng.integers(3))], **extra)
    report = parity(config, seed=int(rng.integers(10**6)), dtype=dtype)
    assert report["pass"], json.dumps(report, indent=1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("attention", ["algebra", "similarity"])
@pytest.mark.parametrize("group, n", sizes(6))
def test_group_transformer_sweep(group, n, attention, dtype):
    rng, extra = options(7 * n + GROUP_NAMES.index(group) + (100 if attention == "algebra" else 0))
    config = GroupTransformerConfig(vocab_size=11, group=group, n=n, attention=attention,
                                    num_layers=int(rng.integers(1, 4)), num_heads=int(rng.integers(1, 5)), **extra)
    report = parity(config, seed=int(rng.integers(10**6)), dtype=dtype)
    assert report["pass"], json.dumps(report, indent=1)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("read", MLSTM_READS)
def test_mlstm_sweep(read, dtype, seed):
    report = parity(MLSTMConfig(vocab_size=80, read=read), seed=seed, dtype=dtype, length=8)
    assert report["pass"], json.dumps(report, indent=1)
