"""Baselines (LSTM, GPT with learned, rotary and ALiBi positions) and matched parameter budgets:
shapes, causality, stepping with the cache, refused input, the position schemes against closed
forms and hand-computed examples, parameter counts against independent formulas, and sizing to
±2% of 100k / 500k / 2M parameters."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from experiments.baselines import (
    ExpRNNCache, ExpRNNConfig, ExpRNNLanguageModel, GPTCache, GPTConfig, GPTLanguageModel, LSTMCache, LSTMConfig,
    LSTMLanguageModel,
)
from experiments.models import build_model
from experiments.params_budget import (
    TOLERANCE,
    count_parameters,
    parameter_count,
    size_to_budget,
)
from experiments.positions import alibi_mask, alibi_slopes, rotate
from manifold_impl.group_rnn import GroupRNN
from parity_tests.harness import relative_error, run_stepped
from parity_tests.tolerances import PARITY
from reference.config import GroupRNNConfig

VOCAB = 65  # Tiny Shakespeare's characters

SMALL = {
    "lstm": LSTMConfig(VOCAB, hidden_size=16, num_layers=2, embedding_dim=8),
    "gpt": GPTConfig(VOCAB, width=16, num_layers=2, num_heads=4, max_length=12),
    "gpt_rotary": GPTConfig(VOCAB, width=16, num_layers=2, num_heads=4, max_length=12, positions="rotary"),
    "gpt_alibi": GPTConfig(VOCAB, width=16, num_layers=2, num_heads=4, max_length=12, positions="alibi"),
    "exprnn": ExpRNNConfig(VOCAB, hidden_size=9, embedding_dim=6),
}
MODELS = {"lstm": LSTMLanguageModel, "gpt": GPTLanguageModel, "gpt_rotary": GPTLanguageModel,
          "gpt_alibi": GPTLanguageModel, "exprnn": ExpRNNLanguageModel}
CACHES = {"lstm": LSTMCache, "gpt": GPTCache, "gpt_rotary": GPTCache, "gpt_alibi": GPTCache, "exprnn": ExpRNNCache}
POSITION_FREE = ["gpt_rotary", "gpt_alibi"]
KINDS = list(SMALL)


def make(kind, seed=0, dtype=None, config=None):
    return MODELS[kind](config or SMALL[kind], dtype=dtype, generator=torch.Generator().manual_seed(seed))


def random_tokens(batch, length, seed=0):
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


# --- models --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("kind", KINDS, ids=KINDS)
def test_forward_shapes(kind, dtype):
    logits, cache = make(kind, dtype=dtype)(random_tokens(3, 7))
    assert logits.shape == (3, 7, VOCAB) and logits.dtype == dtype
    assert isinstance(cache, CACHES[kind]) and cache.position == 7
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("kind", KINDS, ids=KINDS)
def test_backward_reaches_every_parameter(kind):
    model = make(kind)
    logits, _ = model(random_tokens(2, 5))
    torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), random_tokens(2, 5, seed=1).reshape(-1)).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("kind", KINDS, ids=KINDS)
def test_seeded_initialization(kind):
    same = [make(kind, seed=3).state_dict(), make(kind, seed=3).state_dict()]
    other = make(kind, seed=4).state_dict()
    assert all(torch.equal(same[0][key], same[1][key]) for key in same[0])
    assert any(not torch.equal(same[0][key], other[key]) for key in other)


@pytest.mark.parametrize("position", [0, 5, 11], ids=["first", "middle", "last"])
@pytest.mark.parametrize("kind", KINDS, ids=KINDS)
def test_causal(kind, position):
    """Changing token j changes no logit before j (and does change the logits at j)."""
    model = make(kind, dtype=torch.float64)
    tokens = random_tokens(2, 12)
    changed = tokens.clone()
    changed[:, position] = (changed[:, position] + 1) % VOCAB
    before, _ = model(tokens)
    after, _ = model(changed)
    assert torch.equal(before[:, :position], after[:, :position])
    assert not torch.allclose(before[:, position], after[:, position])


@pytest.mark.parametrize("kind", KINDS, ids=KINDS)
def test_dropout_only_in_training(kind):
    model = make(kind, config=dataclasses.replace(SMALL[kind], dropout=0.5))
    tokens = random_tokens(2, 6)
    model.eval()
    assert torch.equal(model(tokens)[0], model(tokens)[0])
    model.train()
    assert not torch.equal(model(tokens)[0], model(tokens)[0])


@pytest.mark.parametrize("split", [None, (5, 7), (1, 10, 1)], ids=["token-by-token", "5+7", "1+10+1"])
@pytest.mark.parametrize("kind", KINDS, ids=KINDS)
def test_continuing_from_the_cache_equals_the_full_sequence(kind, split):
    """docs/design.md's (Parity and tolerances) stepping check: the sequence fed in pieces, each call given the previous cache."""
    model = make(kind, dtype=torch.float64)
    tokens = random_tokens(2, 12)
    with torch.no_grad():
        full, full_cache = model(tokens)
        if split is None:
            pieces, cache = run_stepped(model, tokens, torch.cat)
        else:
            cache, pieces, start = None, [], 0
            for size in split:
                piece, cache = model(tokens[:, start:start + size], cache)
                pieces.append(piece)
                start += size
            pieces = torch.cat(pieces, dim=1)
    assert relative_error(pieces, full) <= PARITY["float64"]["output"]
    assert cache.position == full_cache.position == 12
    for got, want in zip(cache_tensors(cache), cache_tensors(full_cache), strict=True):
        assert relative_error(got, want) <= PARITY["float64"]["output"]


def cache_tensors(cache):
    """Every tensor of a baseline cache (the GPT's keys and values are tuples of them)."""
    return [t for field in cache[:-1] for t in (field if isinstance(field, tuple) else (field,))]


BAD_CACHES = {
    "lstm": {
        "not_a_cache": (lambda c: (c.hidden, c.cell), TypeError, "cache must be a LSTMCache"),
        "wrong_batch": (lambda c: c._replace(hidden=c.hidden[:, :1]), ValueError, "cache.hidden must have shape"),
        "negative_position": (lambda c: c._replace(position=-1), ValueError, "position must be at least 0"),
    },
    "gpt": {
        "not_a_cache": (lambda c: tuple(c), TypeError, "cache must be a GPTCache"),
        "one_block_missing": (lambda c: c._replace(keys=c.keys[:1]), ValueError, "cache.keys must be 2 tensors"),
        "position_not_the_cached_length": (lambda c: c._replace(position=4), ValueError, "P = cache.position"),
        "float_position": (lambda c: c._replace(position=3.0), TypeError, "position must be an int"),
    },
}


@pytest.mark.parametrize("kind, case", [(k, c) for k in BAD_CACHES for c in BAD_CACHES[k]])
def test_bad_cache_refused(kind, case):
    corrupt, error, message = BAD_CACHES[kind][case]
    model = make(kind)
    _, cache = model(random_tokens(2, 3))
    with pytest.raises(error, match=message):
        model(random_tokens(2, 1), corrupt(cache))


def test_gpt_refuses_to_continue_beyond_max_length():
    model = make("gpt")
    _, cache = model(random_tokens(1, 12))
    with pytest.raises(ValueError, match="sequence length 13 exceeds max_length=12"):
        model(random_tokens(1, 1), cache)


BAD_TOKENS = {
    "above_vocabulary": (torch.tensor([[0, VOCAB]]), ValueError, "out of range"),
    "negative": (torch.tensor([[-1, 2]]), ValueError, "out of range"),
    "float": (torch.zeros(1, 3), TypeError, "integers"),
    "rank_1": (torch.zeros(3, dtype=torch.long), ValueError, r"shape \[batch, length\]"),
    "empty": (torch.zeros(1, 0, dtype=torch.long), ValueError, "empty"),
    "not_a_tensor": ([[1, 2]], TypeError, "torch.Tensor"),
}


@pytest.mark.parametrize("case", list(BAD_TOKENS.values()), ids=list(BAD_TOKENS))
@pytest.mark.parametrize("kind", KINDS, ids=KINDS)
def test_bad_tokens_refused(kind, case):
    tokens, error, message = case
    with pytest.raises(error, match=message):
        make(kind)(tokens)


def test_gpt_refuses_sequences_beyond_max_length():
    with pytest.raises(ValueError, match="max_length=12"):
        make("gpt")(random_tokens(1, 13))


@pytest.mark.parametrize("kind", POSITION_FREE, ids=POSITION_FREE)
def test_rotary_and_alibi_continue_from_the_cache_beyond_max_length(kind):
    """40 tokens (max_length = 12) as 30 + 10 and then token by token: the full sequence's logits."""
    model = make(kind, dtype=torch.float64)
    tokens = random_tokens(2, 40)
    with torch.no_grad():
        full, _ = model(tokens)
        head, cache = model(tokens[:, :30])
        tail, cache = model(tokens[:, 30:], cache)
        stepped, _ = run_stepped(model, tokens, torch.cat)
    assert cache.position == 40
    assert relative_error(torch.cat([head, tail], dim=1), full) <= PARITY["float64"]["output"]
    assert relative_error(stepped, full) <= PARITY["float64"]["output"]


@pytest.mark.parametrize("kind", POSITION_FREE, ids=POSITION_FREE)
def test_rotary_and_alibi_run_beyond_max_length_and_stay_causal(kind):
    """Length 40 > max_length = 12; changing token 30 leaves every earlier logit unchanged."""
    model = make(kind, dtype=torch.float64)
    tokens = random_tokens(2, 40)
    changed = tokens.clone()
    changed[:, 30] = (changed[:, 30] + 1) % VOCAB
    before, _ = model(tokens)
    after, _ = model(changed)
    assert before.shape == (2, 40, VOCAB) and torch.isfinite(before).all()
    assert torch.equal(before[:, :30], after[:, :30])
    assert not torch.allclose(before[:, 30], after[:, 30])


BAD_CONFIGS = {
    "lstm_hidden_zero": (lambda: LSTMConfig(VOCAB, 0), ValueError, "hidden_size"),
    "lstm_hidden_str": (lambda: LSTMConfig(VOCAB, "8"), TypeError, "hidden_size"),
    "lstm_dropout_one": (lambda: LSTMConfig(VOCAB, 8, dropout=1.0), ValueError, "dropout"),
    "gpt_heads_do_not_divide": (lambda: GPTConfig(VOCAB, 10, num_heads=4), ValueError, "divide"),
    "gpt_layers_zero": (lambda: GPTConfig(VOCAB, 8, num_layers=0), ValueError, "num_layers"),
    "gpt_bool_vocab": (lambda: GPTConfig(True, 8), TypeError, "vocab_size"),
    "lstm_wrong_config": (lambda: LSTMLanguageModel(SMALL["gpt"]), TypeError, "LSTMConfig"),
    "gpt_integer_dtype": (lambda: GPTLanguageModel(SMALL["gpt"], dtype=torch.int64), TypeError, "dtype"),
    "gpt_unknown_positions": (lambda: GPTConfig(VOCAB, 8, positions="sinusoidal"), ValueError, "unknown positions"),
    "gpt_positions_not_str": (lambda: GPTConfig(VOCAB, 8, positions=None), TypeError, "positions"),
    "gpt_rotary_odd_head": (lambda: GPTConfig(VOCAB, 12, num_heads=4, positions="rotary"), ValueError, "even"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS.values()), ids=list(BAD_CONFIGS))
def test_bad_config_refused(case):
    build, error, message = case
    with pytest.raises(error, match=message):
        build()


# --- parameter counts -----------------------------------------------------------------------------

def real_numel(model):
    """Independent count: every parameter viewed as real numbers."""
    return sum((torch.view_as_real(p) if p.is_complex() else p).numel() for p in model.parameters())


COUNTED = {
    "lstm_1layer": LSTMConfig(VOCAB, 20),
    "lstm_3layer_emb7": LSTMConfig(VOCAB, 12, num_layers=3, embedding_dim=7),
    "gpt_default": GPTConfig(VOCAB, 16),
    "gpt_mlp30_3layer": GPTConfig(VOCAB, 12, num_layers=3, num_heads=3, max_length=9, mlp_width=30),
    "gpt_rotary": GPTConfig(VOCAB, 16, positions="rotary"),
    "gpt_alibi_3head": GPTConfig(VOCAB, 12, num_heads=3, positions="alibi"),
    "exprnn_henaff": ExpRNNConfig(VOCAB, 9),
    "exprnn_cayley_emb5": ExpRNNConfig(VOCAB, 8, embedding_dim=5, init="cayley"),
    **{f"rnn_{g}": GroupRNNConfig(VOCAB, group=g, n=4, embedding_dim=6) for g in ("O", "SO", "U", "SU", "T", "GL")},
    "rnn_BO6b3": GroupRNNConfig(VOCAB, group="BO", n=6, block=3),
    "rnn_U_prototype": GroupRNNConfig(VOCAB, group="U", n=3, readout="prototype"),
    "rnn_O_nonrecurrent": GroupRNNConfig(VOCAB, group="O", n=5, recurrent=False),
    "rnn_SU_scalar": GroupRNNConfig(VOCAB, group="SU", n=3, mixing="scalar"),
    "rnn_GL_lowrank": GroupRNNConfig(VOCAB, group="GL", n=3, mixing="lowrank", mixing_rank=2),
}


@pytest.mark.parametrize("config", list(COUNTED.values()), ids=list(COUNTED))
def test_count_matches_built_model(config):
    model = build_model(config, generator=torch.Generator().manual_seed(0))
    assert count_parameters(model) == real_numel(model) == parameter_count(config)


def test_complex_parameters_count_twice():
    model = GroupRNN(GroupRNNConfig(VOCAB, group="U", n=3, readout="prototype"))
    complex_entries = sum(p.numel() for p in model.parameters() if p.is_complex())
    real_entries = sum(p.numel() for p in model.parameters() if not p.is_complex())
    assert complex_entries == 3 * 3 * (1 + VOCAB)  # H_0 and the prototypes
    assert count_parameters(model) == real_entries + 2 * complex_entries


@pytest.mark.parametrize("config", [COUNTED["lstm_1layer"], COUNTED["lstm_3layer_emb7"]], ids=["1layer", "3layer"])
def test_lstm_closed_form(config):
    """V·E + 4H(E + H + 2) + (L − 1)·4H(2H + 2) + (H + 1)·V: embedding, LSTM layers, head."""
    v, h, e, layers = config.vocab_size, config.hidden_size, config.embedding_width, config.num_layers
    closed = v * e + 4 * h * (e + h + 2) + (layers - 1) * 4 * h * (2 * h + 2) + (h + 1) * v
    assert parameter_count(config) == closed == count_parameters(LSTMLanguageModel(config))


@pytest.mark.parametrize("positions", ["rotary", "alibi"])
def test_rotary_and_alibi_have_no_position_parameters(positions):
    """The same model less the learned table: max_length · width = 256 · 16 fewer parameters."""
    learned = GPTLanguageModel(GPTConfig(VOCAB, 16, max_length=256))
    model = GPTLanguageModel(GPTConfig(VOCAB, 16, max_length=256, positions=positions))
    assert real_numel(learned) - real_numel(model) == 256 * 16
    missing = set(dict(learned.named_parameters())) - set(dict(model.named_parameters()))
    assert missing == {"position_embedding.weight"}


# --- position schemes against closed forms --------------------------------------------------------

def rotation_matrix(position, dim, base=10_000.0):
    """R_m of RoFormer (Su et al. 2021, eq. 15): block diagonal, block i = rotation by m·base^(−2i/dim)."""
    matrix = np.zeros((dim, dim))
    for i in range(dim // 2):
        angle = position * base ** (-2.0 * i / dim)
        matrix[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[math.cos(angle), -math.sin(angle)],
                                                     [math.sin(angle), math.cos(angle)]]
    return matrix


@pytest.mark.parametrize("start", [0, 5, 3000])
def test_rotary_is_the_block_rotation(start):
    x = torch.randn(2, 3, 7, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(start))
    expected = np.stack([x[..., t, :].numpy() @ rotation_matrix(start + t, 6).T for t in range(7)], axis=-2)
    np.testing.assert_allclose(rotate(x, start).numpy(), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("shift", [1, 17, 10_000])
def test_rotary_scores_depend_only_on_relative_position(shift):
    """q_m·k_n after rotation, for all m, n < 12 and for both shifted by ``shift``, against the
    closed form Σ_i Re(q̃_i conj(k̃_i) e^{i(m − n)θ_i}) with q̃_i = q_{2i} + i q_{2i+1}."""
    generator = torch.Generator().manual_seed(shift)
    queries, keys = (torch.randn(12, 8, dtype=torch.float64, generator=generator) for _ in range(2))
    theta = 10_000.0 ** (-np.arange(0, 8, 2) / 8)  # [4]
    q_complex = queries.numpy()[:, 0::2] + 1j * queries.numpy()[:, 1::2]  # [12, 4]
    k_complex = keys.numpy()[:, 0::2] + 1j * keys.numpy()[:, 1::2]
    offset = np.arange(12)[:, None] - np.arange(12)[None, :]  # m − n
    closed = np.einsum("mi,ni,mni->mn", q_complex, k_complex.conj(), np.exp(1j * offset[..., None] * theta)).real
    for start in (0, shift):
        scores = rotate(queries, start) @ rotate(keys, start).T  # [12, 12]
        np.testing.assert_allclose(scores.numpy(), closed, rtol=0, atol=1e-9)


# Press et al. 2022, §3: 2^(−8h/H) for H a power of two; else the K = 2^⌊log2 H⌋ slopes, then odd ones of 2K
SLOPES = {
    1: [1 / 256],
    3: [1 / 16, 1 / 256, 1 / 4],
    6: [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8],
    8: [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256],
    16: [2 ** -(h / 2) for h in range(1, 17)],
}


@pytest.mark.parametrize("heads", list(SLOPES), ids=[f"{h}heads" for h in SLOPES])
def test_alibi_slopes(heads):
    np.testing.assert_allclose(alibi_slopes(heads).numpy(), SLOPES[heads], rtol=1e-15)


INF = float("inf")


def test_alibi_bias_matrix_by_hand():
    """2 heads (slopes 1/16, 1/256), 3 tokens: −slope · (m − n) on and below the diagonal."""
    expected = [[[0, -INF, -INF], [-1 / 16, 0, -INF], [-2 / 16, -1 / 16, 0]],
                [[0, -INF, -INF], [-1 / 256, 0, -INF], [-2 / 256, -1 / 256, 0]]]
    assert torch.equal(alibi_mask(2, 3, 3, torch.float64), torch.tensor(expected, dtype=torch.float64))


def test_alibi_bias_of_the_last_queries_by_hand():
    """2 queries at positions 2, 3 after 4 keys (a continued sequence), 1 head (slope 1/256)."""
    expected = [[[-2 / 256, -1 / 256, 0, -INF], [-3 / 256, -2 / 256, -1 / 256, 0]]]
    assert torch.equal(alibi_mask(1, 2, 4, torch.float64), torch.tensor(expected, dtype=torch.float64))


def numpy_attention(attention, x, positions):
    """The attention sublayer written out per head in NumPy: scores (R_m q)·(R_n k)/√d_h for rotary,
    q·k/√d_h − s_h (m − n) for ALiBi (slopes from ``SLOPES``), softmax over n ≤ m, weighted values."""
    length, width = x.shape
    heads = attention.num_heads
    dim = width // heads
    qkv = x @ attention.qkv.weight.detach().numpy().T + attention.qkv.bias.detach().numpy()  # [T, 3d]
    q, k, v = (qkv[:, i * width:(i + 1) * width].reshape(length, heads, dim) for i in range(3))
    offset = np.arange(length)[:, None] - np.arange(length)[None, :]  # m − n
    out = np.zeros((length, heads, dim))
    for h in range(heads):
        qh, kh = q[:, h], k[:, h]
        if positions == "rotary":
            qh = np.stack([rotation_matrix(m, dim) @ qh[m] for m in range(length)])
            kh = np.stack([rotation_matrix(n, dim) @ kh[n] for n in range(length)])
        scores = qh @ kh.T / math.sqrt(dim)
        if positions == "alibi":
            scores = scores - SLOPES[heads][h] * offset
        scores = np.where(offset >= 0, scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[:, h] = (weights / weights.sum(axis=1, keepdims=True)) @ v[:, h]
    return out.reshape(length, width) @ attention.proj.weight.detach().numpy().T + attention.proj.bias.detach().numpy()


@pytest.mark.parametrize("positions", ["learned", "rotary", "alibi"])
def test_attention_sublayer_against_numpy(positions):
    """The model's attention (8 heads of width 2, non-zero biases) at 20 > max_length tokens."""
    config = GPTConfig(VOCAB, 16, num_heads=8, max_length=12, positions=positions)
    model = GPTLanguageModel(config, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    attention = model.blocks[0].attention
    with torch.no_grad():
        attention.qkv.bias.normal_(generator=torch.Generator().manual_seed(1))
        attention.qkv.weight.mul_(20)  # scores of order one, so positions matter
    x = torch.randn(1, 20, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = attention(x)[0][0].numpy()  # (output, keys, values); output [1, T, d]
    np.testing.assert_allclose(got, numpy_attention(attention, x[0].numpy(), positions), rtol=0, atol=1e-12)


# --- sizing to a budget ---------------------------------------------------------------------------

TEMPLATES = {
    "lstm": LSTMConfig(VOCAB, 1),
    "exprnn": ExpRNNConfig(VOCAB, 1),
    "gpt": GPTConfig(VOCAB, 4, num_layers=2, num_heads=4, max_length=256),
    "gpt_rotary": GPTConfig(VOCAB, 8, num_layers=2, num_heads=4, max_length=256, positions="rotary"),
    "gpt_alibi": GPTConfig(VOCAB, 4, num_layers=2, num_heads=4, max_length=256, positions="alibi"),
    "rnn_O": GroupRNNConfig(VOCAB, group="O"),
    "rnn_U": GroupRNNConfig(VOCAB, group="U"),
    "rnn_GL": GroupRNNConfig(VOCAB, group="GL"),
    "rnn_T": GroupRNNConfig(VOCAB, group="T"),
    "rnn_BO": GroupRNNConfig(VOCAB, group="BO"),
}
BUDGETS = [100_000, 500_000, 2_000_000]


@pytest.mark.parametrize("target", BUDGETS, ids=["100k", "500k", "2M"])
@pytest.mark.parametrize("template", list(TEMPLATES.values()), ids=list(TEMPLATES))
def test_sizing_hits_budget(template, target):
    config = size_to_budget(template, target)
    count = count_parameters(build_model(config, device="meta", generator=torch.Generator()))
    assert count == parameter_count(config)
    assert abs(count - target) <= TOLERANCE * target
    kept = {"vocab_size", "num_layers", "num_heads", "max_length", "positions", "group", "readout", "recurrent",
            "mixing"}
    assert all(getattr(config, f) == getattr(template, f) for f in kept if hasattr(template, f))


def test_sizing_keeps_default_shape_when_coarse_size_hits():
    config = size_to_budget(TEMPLATES["gpt"], 100_000)
    assert (config.width, config.mlp_width) == (56, None)  # 98,513 parameters with the 4x MLP


def test_sizing_fine_field_when_coarse_misses():
    """At V=50 no GPT width with a 4x MLP lands within 2% of 100k (96,818 / 109,490): the MLP adjusts."""
    config = size_to_budget(dataclasses.replace(TEMPLATES["gpt"], vocab_size=50), 100_000)
    assert config.width == 56 and 2 * 56 <= config.mlp_width <= 6 * 56
    assert abs(parameter_count(config) - 100_000) <= 0.02 * 100_000


def test_sizing_group_rnn_example():
    config = size_to_budget(TEMPLATES["rnn_O"], 100_000)
    assert (config.n, config.embedding_dim, parameter_count(config)) == (19, 60, 99_953)


def test_sizing_embedding_only_keeps_n():
    config = size_to_budget(GroupRNNConfig(VOCAB, group="U", n=8), 100_000, free="embedding_dim")
    assert config.n == 8 and abs(parameter_count(config) - 100_000) <= 0.02 * 100_000


SIZING_ERRORS = {
    "n_alone_misses": (TEMPLATES["rnn_O"], 100_000, {"free": "n"}, ValueError, "within ±2%"),
    "budget_below_smallest": (TEMPLATES["gpt"], 1_000, {}, ValueError, "within ±2%"),
    "large_vocabulary_gpt": (GPTConfig(10_000, 4), 100_000, {}, ValueError, "nearest counts"),
    "unknown_field": (TEMPLATES["lstm"], 100_000, {"free": "width"}, ValueError, "not a searchable size"),
    "negative_target": (TEMPLATES["lstm"], -5, {}, ValueError, "positive"),
    "zero_tolerance": (TEMPLATES["lstm"], 100_000, {"tolerance": 0}, ValueError, "tolerance"),
    "repeated_field": (TEMPLATES["rnn_U"], 100_000, {"free": ("n", "n")}, ValueError, "two different"),
    "not_a_config": ("lstm", 100_000, {}, TypeError, "cannot size"),
}


@pytest.mark.parametrize("case", list(SIZING_ERRORS.values()), ids=list(SIZING_ERRORS))
def test_sizing_errors(case):
    template, target, options, error, message = case
    with pytest.raises(error, match=message):
        size_to_budget(template, target, **options)


@pytest.mark.parametrize("attention", ["algebra", "similarity"])
def test_group_transformer_is_sized_by_counting_the_built_model(attention):
    from reference.config import GroupTransformerConfig

    config = size_to_budget(GroupTransformerConfig(vocab_size=50, group="U", num_layers=2, num_heads=2,
                                                   attention=attention), 100_000)
    count = count_parameters(build_model(config, generator=torch.Generator().manual_seed(0)))
    assert count == parameter_count(config)
    assert abs(count - 100_000) <= TOLERANCE * 100_000


def test_a_seeded_model_for_another_device_is_drawn_on_the_generators_device_then_moved():
    """A CPU seed for a model elsewhere (here the meta device, standing in for CUDA): built, not refused."""
    import torch

    from experiments.models import build_model
    from reference.config import GroupRNNConfig, MLSTMConfig

    for config in (GroupRNNConfig(vocab_size=5, group="U", n=3, embedding_dim=4), MLSTMConfig(vocab_size=5)):
        model = build_model(config, device="meta", generator=torch.Generator().manual_seed(0))
        assert {p.device.type for p in model.parameters()} == {"meta"}


# --- expRNN -----------------------------------------------------------------------------------------

def test_exprnn_gradients_match_finite_differences():
    """torch.autograd.gradcheck (central differences, float64) of the loss in every parameter, A's
    entries through manifold_impl.linalg.expm included."""
    model = make("exprnn", dtype=torch.float64)
    names, values = zip(*[(name, p.detach().clone().requires_grad_()) for name, p in model.named_parameters()])
    tokens, targets = random_tokens(2, 5), random_tokens(2, 5, seed=1)

    def loss(*params):
        logits, _ = torch.func.functional_call(model, dict(zip(names, params)), (tokens,))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))

    assert torch.autograd.gradcheck(loss, values, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("init", ["henaff", "cayley"])
def test_exprnn_transition_is_orthogonal_at_init_and_after_adamw_steps(init):
    model = make("exprnn", config=ExpRNNConfig(VOCAB, 10, init=init))
    transition = model.transition().detach()
    angles = torch.angle(torch.linalg.eigvals(transition.double()))
    assert (angles.abs() <= (math.pi if init == "henaff" else math.pi / 2) + 1e-6).all()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    for step in range(3):
        logits, _ = model(random_tokens(2, 6, seed=step))
        torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), random_tokens(2, 6, seed=9).reshape(-1)).backward()
        optimizer.step()
        optimizer.zero_grad()
    trained = model.transition().detach()
    assert (trained - transition).abs().max() > 1e-3  # the steps moved W ...
    assert (trained @ trained.T - torch.eye(10)).abs().max() < 1e-5  # ... and it stayed orthogonal


def test_exprnn_cayley_init_rotates_by_at_most_a_quarter_turn_and_henaff_by_up_to_a_half():
    cayley = make("exprnn", config=ExpRNNConfig(VOCAB, 40, init="cayley")).log_transition.detach()
    henaff = make("exprnn", config=ExpRNNConfig(VOCAB, 40)).log_transition.detach()
    assert (cayley <= 0).all() and cayley.min() >= -1.0 - 1e-6  # θ = −tan(u/2), u ∈ [0, π/2]
    assert henaff.abs().max() > 1.0 and henaff.abs().max() <= math.pi
    assert (cayley != 0).sum() == (henaff != 0).sum() == 20  # one rotation per pair of units
