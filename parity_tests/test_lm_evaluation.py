"""The language-modelling task's evaluations: the state carried across a split equals one pass."""

import math

import numpy as np
import pytest
import torch

from experiments.baselines import GPTConfig, LSTMConfig
from experiments.models import build_model, is_recurrent
from experiments.tasks.lm import LanguageModelling, carried_bits
from reference.config import GroupRNNConfig, GroupTransformerConfig, MLSTMConfig

VOCAB = 11
RECURRENT = {"group_rnn": GroupRNNConfig(vocab_size=VOCAB, group="U", n=3, embedding_dim=4),
             "lstm": LSTMConfig(vocab_size=VOCAB, hidden_size=6),
             "mlstm": MLSTMConfig(vocab_size=VOCAB, embedding_dim=8)}


def _bits_of_one_pass(model, piece):
    """Mean −log₂ p(next token) over ``piece`` ([N] ids) from ONE forward pass over all of it."""
    tokens = torch.from_numpy(piece)[None]
    logits, _ = model(tokens[:, :-1])
    log_probabilities = torch.log_softmax(logits.double(), dim=-1)[0]
    return -log_probabilities[torch.arange(len(piece) - 1), tokens[0, 1:]].detach().numpy() / math.log(2)


@pytest.mark.parametrize("name", sorted(RECURRENT))
@pytest.mark.parametrize("length, streams", [(5, 1), (4, 3)])
def test_carried_state_bits_equal_one_full_length_pass(name, length, streams):
    model = build_model(RECURRENT[name], dtype=torch.float64, generator=torch.Generator().manual_seed(0)).eval()
    stream = np.random.default_rng(1).integers(0, VOCAB, size=38)
    per_piece = (len(stream) - 1) // streams  # 37 // 3 = 12: the last token does not fill a piece
    expected = np.concatenate([_bits_of_one_pass(model, stream[i * per_piece:(i + 1) * per_piece + 1])
                               for i in range(streams)]).mean()
    assert carried_bits(model, stream, length, streams) == (pytest.approx(expected, rel=1e-10), 0)
    # and the state does carry: restarting it at every window gives other bits
    restarted = np.concatenate([_bits_of_one_pass(model, stream[s:s + length + 1])
                                for s in range(0, len(stream) - length, length)]).mean()
    assert restarted != pytest.approx(expected, rel=1e-6)


def test_recurrent_models_are_the_group_rnn_lstm_and_mlstm():
    generator = torch.Generator().manual_seed(0)
    assert all(is_recurrent(build_model(config, generator=generator)) for config in RECURRENT.values())
    for config in (GPTConfig(vocab_size=VOCAB, width=4, num_layers=1, num_heads=1, max_length=8),
                   GroupTransformerConfig(vocab_size=VOCAB, group="O", n=2, num_layers=1, num_heads=1)):
        assert not is_recurrent(build_model(config, generator=generator))


def test_the_test_evaluation_adds_carried_bits_for_recurrent_models_only():
    config = LanguageModelling.Config(dataset="ptb_char", length=16, eval_tokens=64, carried_streams=400)
    task = LanguageModelling(config, seed=0)
    generator = torch.Generator().manual_seed(0)
    lstm = build_model(LSTMConfig(vocab_size=task.vocab_size, hidden_size=4), generator=generator).eval()
    gpt = build_model(GPTConfig(vocab_size=task.vocab_size, width=4, num_layers=1, num_heads=1, max_length=16),
                      generator=generator).eval()
    with torch.no_grad():
        recurrent, attention = task.evaluate(lstm, "test"), task.evaluate(gpt, "test")
    expected = carried_bits(lstm, task.data.streams["test"], 16, 400)
    assert recurrent["test_carried_bits_per_token"] == expected.bits
    assert recurrent["test_carried_reprojections"] == expected.reprojections == 0
    assert "test_carried_bits_per_token" not in attention and "test_carried_reprojections" not in attention
    with pytest.raises(ValueError, match="carried_streams"):
        LanguageModelling.Config(dataset="ptb_char", carried_streams=-1)


def test_a_carried_state_that_leaves_its_group_scores_nan_not_an_error():
    config = GroupRNNConfig(vocab_size=VOCAB, group="GL", n=3, embedding_dim=4)
    model = build_model(config, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).eval()
    stream = np.random.default_rng(1).integers(0, VOCAB, size=38)
    assert math.isfinite(carried_bits(model, stream, 5).bits)
    rank_one = torch.diag(torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))  # a product that has lost rank
    assert math.isnan(carried_bits(_Drifting(model, move=lambda state: state @ rank_one), stream, 5).bits)


class _Drifting(torch.nn.Module):
    """A group RNN whose returned state is moved ``offset`` off its group after every call (or
    through ``move``), as float32 round-off does over a long stream; it records the states it was
    given and returned."""

    def __init__(self, model, offset=0.0, move=None):
        super().__init__()
        self.model, self.group, self.given, self.returned = model, model.group, [], []
        self.move = (lambda state: state + offset) if move is None else move

    def forward(self, tokens, cache=None):
        self.given.append(None if cache is None else cache.state)
        logits, cache = self.model(tokens, cache)
        self.returned.append(self.move(cache.state))
        return logits, cache._replace(state=self.returned[-1])


def test_a_compact_state_off_its_group_is_put_back_on_it_before_the_next_chunk():
    model = build_model(GroupRNNConfig(vocab_size=VOCAB, group="O", n=3, embedding_dim=4), dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0)).eval()
    stream = np.random.default_rng(1).integers(0, VOCAB, size=38)
    drifting = _Drifting(model, 1e-3)  # far beyond O(3)'s float64 tolerance
    bits, reprojections = carried_bits(drifting, stream, 5)
    assert math.isfinite(bits) and len(drifting.given) == 8 and reprojections == 7  # every chunk after the first
    for returned, given in zip(drifting.returned, drifting.given[1:]):
        left, _, right = torch.linalg.svd(returned)  # the nearest orthogonal matrix: U Vᵀ of M = U Σ Vᵀ
        torch.testing.assert_close(given, left @ right, rtol=0, atol=1e-12)
    undisturbed = carried_bits(model, stream, 5)
    assert undisturbed.reprojections == 0
    assert bits != pytest.approx(undisturbed.bits, rel=1e-9)  # the drift did move the state
    assert carried_bits(_Drifting(model, 1e-20), stream, 5) == undisturbed  # within it: untouched, not counted
    assert math.isnan(carried_bits(_Drifting(model, float("nan")), stream, 5).bits)
