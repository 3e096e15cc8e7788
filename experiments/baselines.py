"""Baselines for the group-state models (torch only): an LSTM, a GPT-style Transformer and the
published orthogonal RNN expRNN as language models.

``LSTMConfig``/``LSTMLanguageModel``, ``GPTConfig``/``GPTLanguageModel`` and
``ExpRNNConfig``/``ExpRNNLanguageModel`` share one interface with the group models
(``experiments.models``); their initialisation, caches and position schemes: ``_BaselineLM``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from experiments.positions import POSITIONS, alibi_mask, rotate
from manifold_impl.linalg import expm
from manifold_impl.precision import full_precision, to_real
from manifold_impl.validation import check_tokens
from reference.checks import check_cache
from reference.config import model_config

GPT_INIT_STD = 0.02
GPT_MLP_RATIO = 4


def _require_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


def _require_dropout(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"dropout must be a number, got {type(value).__name__}")
    if not 0 <= value < 1:
        raise ValueError(f"dropout must lie in [0, 1), got {value}")


def _check_dtype(dtype):
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a real floating torch.dtype (or None), got {dtype!r}")


@dataclass(frozen=True)
class LSTMConfig:
    """LSTM language model.

    Attributes:
        vocab_size: number of token ids V; inputs must lie in [0, V).
        hidden_size: LSTM hidden width H (the free size when matching parameter budgets).
        num_layers: stacked LSTM layers.
        embedding_dim: token embedding width E; None means E = H.
        dropout: dropout probability (0 disables it).
    """

    vocab_size: int
    hidden_size: int
    num_layers: int = 1
    embedding_dim: int | None = None
    dropout: float = 0.0

    def __post_init__(self):
        _require_int("vocab_size", self.vocab_size, 1)
        _require_int("hidden_size", self.hidden_size, 1)
        _require_int("num_layers", self.num_layers, 1)
        if self.embedding_dim is not None:
            _require_int("embedding_dim", self.embedding_dim, 1)
        _require_dropout(self.dropout)

    @property
    def embedding_width(self):
        """E: ``embedding_dim``, or the hidden size when that is None."""
        return self.hidden_size if self.embedding_dim is None else self.embedding_dim


EXPRNN_INITS = ("henaff", "cayley")


@dataclass(frozen=True)
class ExpRNNConfig:
    """expRNN language model (Lezcano-Casado & Martínez-Rubio 2019): a vector state with an
    orthogonal transition W = exp(A), A skew-symmetric.

    Attributes:
        vocab_size: number of token ids V; inputs must lie in [0, V).
        hidden_size: state width H (the free size when matching parameter budgets).
        embedding_dim: token embedding width E; None means E = H.
        init: the initial A (``EXPRNN_INITS``), block-diagonal 2×2 rotations by θ_i: ``henaff``
            θ_i ~ U(−π, π) (Henaff et al. 2016), ``cayley`` θ_i = −√((1 − cos u)/(1 + cos u)),
            u ~ U(0, π/2), the two initialisations of expRNN.
        dropout: dropout probability on the embedding output and the states (0 disables it).
    """

    vocab_size: int
    hidden_size: int
    embedding_dim: int | None = None
    init: str = dataclasses.field(default="henaff", metadata={"choices": EXPRNN_INITS})
    dropout: float = 0.0

    def __post_init__(self):
        _require_int("vocab_size", self.vocab_size, 1)
        _require_int("hidden_size", self.hidden_size, 1)
        if self.embedding_dim is not None:
            _require_int("embedding_dim", self.embedding_dim, 1)
        if self.init not in EXPRNN_INITS:
            raise ValueError(f"unknown init {self.init!r}; choose one of {list(EXPRNN_INITS)}")
        _require_dropout(self.dropout)

    @property
    def embedding_width(self):
        """E: ``embedding_dim``, or the hidden size when that is None."""
        return self.hidden_size if self.embedding_dim is None else self.embedding_dim


@dataclass(frozen=True)
class GPTConfig:
    """GPT-style causal Transformer language model.

    Attributes:
        vocab_size: number of token ids V; inputs must lie in [0, V).
        width: model width d (the free size when matching parameter budgets); a multiple of
            ``num_heads``.
        num_layers: Transformer blocks.
        num_heads: attention heads, each of width d / num_heads.
        max_length: number of learned positions; with ``positions="learned"`` longer inputs are
            refused. Rotary and ALiBi positions do not use it (no limit).
        mlp_width: hidden width of the MLP; None means ``GPT_MLP_RATIO`` · d.
        dropout: dropout probability (0 disables it).
        positions: the position scheme, one of ``POSITIONS``: ``"learned"`` (absolute embeddings
            added to the tokens), ``"rotary"`` (queries and keys rotated per head; needs an even
            head width) or ``"alibi"`` (linear attention biases per head); see
            ``experiments.positions``.
    """

    vocab_size: int
    width: int
    num_layers: int = 2
    num_heads: int = 4
    max_length: int = 256
    mlp_width: int | None = None
    dropout: float = 0.0
    positions: str = "learned"

    def __post_init__(self):
        _require_int("vocab_size", self.vocab_size, 1)
        _require_int("width", self.width, 1)
        _require_int("num_layers", self.num_layers, 1)
        _require_int("num_heads", self.num_heads, 1)
        if self.width % self.num_heads:
            raise ValueError(f"num_heads={self.num_heads} does not divide width={self.width}")
        _require_int("max_length", self.max_length, 1)
        if self.mlp_width is not None:
            _require_int("mlp_width", self.mlp_width, 1)
        _require_dropout(self.dropout)
        if not isinstance(self.positions, str):
            raise TypeError(f"positions must be a str, got {type(self.positions).__name__}")
        if self.positions not in POSITIONS:
            raise ValueError(f"unknown positions {self.positions!r}; choose one of {POSITIONS}")
        if self.positions == "rotary" and self.head_dim % 2:
            raise ValueError(f"rotary positions need an even head width; width / num_heads = {self.head_dim}")

    @property
    def mlp_hidden(self):
        """The MLP's hidden width: ``mlp_width``, or ``GPT_MLP_RATIO`` · width when that is None."""
        return GPT_MLP_RATIO * self.width if self.mlp_width is None else self.mlp_width

    @property
    def head_dim(self):
        return self.width // self.num_heads


@torch.no_grad()
def _draw(tensor, sample, generator):
    """Fill ``tensor`` in place with ``sample(t, generator=...)``, drawn on the generator's device.

    Nothing is drawn on the meta device (used to count parameters without allocating them).
    """
    if tensor.device.type == "meta":
        return
    if generator is None or generator.device == tensor.device:
        sample(tensor, generator=generator)
        return
    scratch = torch.empty(tensor.shape, dtype=tensor.dtype, device=generator.device)
    sample(scratch, generator=generator)
    tensor.copy_(scratch)


def _normal(std):
    return lambda t, generator: nn.init.normal_(t, std=std, generator=generator)


def _uniform(bound):
    return lambda t, generator: nn.init.uniform_(t, -bound, bound, generator=generator)


class LSTMCache(NamedTuple):
    """``torch.nn.LSTM``'s state after the tokens so far and the global index of the next token.

    Attributes:
        hidden, cell: [num_layers, B, H] h_t and c_t of every layer.
        position: the global index of the next token.
    """

    hidden: torch.Tensor
    cell: torch.Tensor
    position: int


class ExpRNNCache(NamedTuple):
    """The expRNN's state after the tokens so far and the global index of the next token.

    Attributes:
        hidden: [B, H] h_t.
        position: the global index of the next token.
    """

    hidden: torch.Tensor
    position: int


class GPTCache(NamedTuple):
    """Keys and values of the tokens so far, one pair per block, and the next position.

    Attributes:
        keys, values: tuples of ``num_layers`` tensors [B, h, P, d/h] (with rotary positions the
            keys as rotated at their positions).
        position: P, the global index of the next token (absolute positions: always the number
            of cached tokens).
    """

    keys: tuple
    values: tuple
    position: int


class _BaselineLM(nn.Module):
    """A language model of this module, built from its config.

    Args:
        config: an instance of the subclass's ``config_class``, or none and its fields as keywords
            (``LSTMLanguageModel(vocab_size=65, hidden_size=128)``).
        device, dtype: where and in which real floating dtype to keep the parameters.
        generator: ``torch.Generator`` for the initialization (default: torch's global RNG).

    The subclass's ``_build(config, factory)`` makes the layers (``factory``: the device and dtype
    keywords of their constructors); ``reset_parameters(generator)`` then initializes them.

    Both share the group models' interface, so training and evaluation code treats them alike:
    ``model(tokens, cache=None)`` with ``tokens: [B, T]`` int ids returns ``(logits [B, T, V], cache)``,
    the cache (``LSTMCache``, ``GPTCache``) holding what a next call needs to continue the sequence and
    the global index of the next token; bad token ids raise through
    ``manifold_impl.validation.check_tokens`` before any work; ``device``, ``dtype`` and a seeded
    ``generator`` for the initialization are constructor arguments, as for
    ``manifold_impl.group_rnn.GroupRNN``. Initial values are drawn on the generator's device and
    copied, so one seed gives the same model on every device.

    The third baseline, the unconstrained counterpart of each group model, is that model with group
    ``GL`` (``GroupRNNConfig(group="GL", ...)``): nothing to write here. Matching parameter counts is
    ``experiments.params_budget``.

    Decisions:
    - ``LSTMLanguageModel``: embedding (width ``embedding_dim``, default the hidden size) →
      ``torch.nn.LSTM`` (``num_layers``, batch first, both bias vectors) → linear head with bias.
      Init: embedding N(0, 1) (as the group RNN), LSTM weights and biases U(±1/√H) (torch's default),
      head weight U(±1/√H), head bias 0. ``dropout`` acts on the embedding output, between LSTM
      layers and on the last LSTM output.
    - ``GPTLanguageModel``: token embedding (+ learned absolute position embeddings of ``max_length``
      positions when ``positions="learned"``) → ``num_layers`` pre-norm blocks x + attn(LN(x)),
      x + MLP(LN(x)) → final LayerNorm → linear head with bias (untied from the embedding, like the
      group models' readouts). Attention: one fused q/k/v map with bias, ``num_heads`` heads of
      width ``width / num_heads``, ``scaled_dot_product_attention(is_causal=True)`` (with cached keys
      and values: a mask that lets query i see keys j ≤ P + i), output projection with bias. With
      ``positions="rotary"`` each head's queries and keys are rotated (Su et al. 2021; the cache holds
      rotated keys); with ``positions="alibi"`` each head adds a linear distance bias to its scores
      (Press et al. 2022): neither has parameters nor a length limit (``experiments.positions``).
      MLP: Linear → GELU (exact) → Linear, hidden width ``mlp_width`` (default 4·width). Init as
      GPT-2: weights and embeddings N(0, 0.02), the two residual output projections
      N(0, 0.02/√(2·num_layers)), biases 0, LayerNorm (1, 0). ``dropout`` on the embedding sum, the
      attention weights, and each residual branch.
    """

    config_class = None

    def __init__(self, config=None, device=None, dtype=None, generator=None, **fields):
        super().__init__()
        self.config = config = model_config(self.config_class, config, fields)
        _check_dtype(dtype)
        self._build(config, {"device": device, "dtype": dtype})
        self.reset_parameters(generator)


class LSTMLanguageModel(_BaselineLM):
    """Embedding → ``torch.nn.LSTM`` → linear head; ``config`` an ``LSTMConfig`` (see ``_BaselineLM``)."""

    config_class = LSTMConfig

    def _build(self, config, factory):
        hidden = config.hidden_size
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_width, **factory)
        self.lstm = nn.LSTM(config.embedding_width, hidden, num_layers=config.num_layers, batch_first=True,
                            dropout=config.dropout if config.num_layers > 1 else 0.0, **factory)
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(hidden, config.vocab_size, **factory)

    def reset_parameters(self, generator=None):
        bound = 1.0 / math.sqrt(self.config.hidden_size)
        _draw(self.embedding.weight, _normal(1.0), generator)
        for parameter in self.lstm.parameters():
            _draw(parameter, _uniform(bound), generator)
        _draw(self.head.weight, _uniform(bound), generator)
        nn.init.zeros_(self.head.bias)

    def forward(self, tokens, cache=None):
        """``tokens: [B, T]`` ids -> (logits ``[B, T, V]``, ``LSTMCache``); ``cache``: that of an
        earlier call, to continue its sequences (None: zero state, position 0)."""
        tokens = check_tokens(tokens, self.config.vocab_size, next(self.parameters()).device)
        state, position = None, 0
        if cache is not None:
            cache = check_cache(cache, LSTMCache)
            shape = (self.config.num_layers, tokens.shape[0], self.config.hidden_size)
            for name in ("hidden", "cell"):
                if tuple(getattr(cache, name).shape) != shape:
                    raise ValueError(f"cache.{name} must have shape {shape}, got {tuple(getattr(cache, name).shape)}")
            state, position = (cache.hidden, cache.cell), cache.position
        embedded = self.dropout(self.embedding(tokens))  # [B, T, E]
        hidden, (last_hidden, last_cell) = self.lstm(embedded, state)  # [B, T, H]
        return self.head(self.dropout(hidden)), LSTMCache(last_hidden, last_cell, position + tokens.shape[1])


class ExpRNNLanguageModel(_BaselineLM):
    """Embedding → h_t = modReLU(W h_{t−1} + V e_t + b) with W = exp(A) → linear head; ``config`` an
    ``ExpRNNConfig`` (see ``_BaselineLM``).

    A = skew(a) is stored as its H(H−1)/2 entries above the diagonal (``log_transition``), and
    W = ``manifold_impl.linalg.expm``(A) is built once per call, so W is orthogonal whatever the
    optimizer does (AdamW on ``a``; expRNN's own trick, not a Riemannian optimizer).
    modReLU(z) = sign(z)·max(|z| + b, 0) per unit, b ~ U(±0.01) (``modrelu_bias``). Init: A as
    ``config.init``; the input map V Kaiming normal for a ReLU, its bias 0, as expRNN's; the embedding
    N(0, 1/E), tokens of unit norm like the one-hot inputs expRNN was made for (an N(0, 1) embedding
    makes the drive √E times larger, and the undamped state, a random walk at init, gives logits of
    several bits at T = 128); head U(±1/√H) as the LSTM's; head bias 0. ``dropout`` acts on the
    embedding output and the states.
    """

    config_class = ExpRNNConfig

    def _build(self, config, factory):
        hidden = config.hidden_size
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_width, **factory)
        self.input_map = nn.Linear(config.embedding_width, hidden, **factory)
        self.log_transition = nn.Parameter(torch.empty(hidden * (hidden - 1) // 2, **factory))
        self.modrelu_bias = nn.Parameter(torch.empty(hidden, **factory))
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(hidden, config.vocab_size, **factory)

    def reset_parameters(self, generator=None):
        hidden = self.config.hidden_size
        _draw(self.embedding.weight, _normal(1.0 / math.sqrt(self.config.embedding_width)), generator)
        _draw(self.input_map.weight, lambda t, generator: nn.init.kaiming_normal_(
            t, nonlinearity="relu", generator=generator), generator)
        nn.init.zeros_(self.input_map.bias)
        _draw(self.modrelu_bias, _uniform(0.01), generator)
        _draw(self.head.weight, _uniform(1.0 / math.sqrt(hidden)), generator)
        nn.init.zeros_(self.head.bias)
        if self.log_transition.device.type == "meta":
            return
        angles = torch.empty(hidden // 2, dtype=self.log_transition.dtype, device=self.log_transition.device)
        if self.config.init == "henaff":
            _draw(angles, _uniform(math.pi), generator)
        else:
            _draw(angles, lambda t, generator: nn.init.uniform_(t, 0.0, math.pi / 2, generator=generator), generator)
            angles = -torch.sqrt((1 - torch.cos(angles)) / (1 + torch.cos(angles)))
        skew = torch.zeros(hidden, hidden, dtype=angles.dtype, device=angles.device)
        index = torch.arange(hidden // 2, device=angles.device)
        skew[2 * index, 2 * index + 1] = angles
        rows, columns = torch.triu_indices(hidden, hidden, offset=1, device=angles.device)
        with torch.no_grad():
            self.log_transition.copy_(skew[rows, columns])

    def transition(self):
        """W = exp(A) ``[H, H]``, A = a − aᵀ from the entries above the diagonal: orthogonal."""
        hidden = self.config.hidden_size
        rows, columns = torch.triu_indices(hidden, hidden, offset=1, device=self.log_transition.device)
        upper = torch.zeros(hidden, hidden, dtype=self.log_transition.dtype, device=self.log_transition.device)
        upper = upper.index_put((rows, columns), self.log_transition)
        with full_precision(upper.device):  # under autocast too: W stays orthogonal
            return expm(upper - upper.T)

    def forward(self, tokens, cache=None):
        """``tokens: [B, T]`` ids -> (logits ``[B, T, V]``, ``ExpRNNCache``); ``cache``: that of an
        earlier call, to continue its sequences (None: zero state, position 0)."""
        tokens = check_tokens(tokens, self.config.vocab_size, next(self.parameters()).device)
        hidden = torch.zeros(tokens.shape[0], self.config.hidden_size, dtype=self.head.weight.dtype,
                             device=self.head.weight.device)
        position = 0
        if cache is not None:
            cache = check_cache(cache, ExpRNNCache)
            if tuple(cache.hidden.shape) != tuple(hidden.shape):
                raise ValueError(f"cache.hidden must have shape {tuple(hidden.shape)}, got {tuple(cache.hidden.shape)}")
            hidden, position = cache.hidden, cache.position
        drive = self.input_map(self.dropout(self.embedding(tokens)))  # V e_t + b, [B, T, H]
        transition = self.transition()
        states = []
        with full_precision(drive.device):  # under autocast too: h_t float32
            for step in to_real(drive, hidden).unbind(dim=1):
                z = hidden @ transition.T + step
                hidden = torch.sign(z) * torch.relu(z.abs() + self.modrelu_bias)
                states.append(hidden)
        return self.head(self.dropout(torch.stack(states, dim=1))), ExpRNNCache(hidden, position + tokens.shape[1])


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: ``x: [B, T, d]`` (and cached keys and values of P
    earlier tokens) -> (``[B, T, d]``, keys and values ``[B, h, P + T, d/h]``), with rotary or ALiBi
    positions when the config asks for them."""

    def __init__(self, config, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.num_heads, self.dropout, self.positions = config.num_heads, config.dropout, config.positions
        self.qkv = nn.Linear(config.width, 3 * config.width, **factory)
        self.proj = nn.Linear(config.width, config.width, **factory)

    def forward(self, x, past_keys=None, past_values=None):
        batch, length, width = x.shape
        heads = self.num_heads
        q, k, v = self.qkv(x).view(batch, length, 3, heads, width // heads).permute(2, 0, 3, 1, 4)  # [B, h, T, d/h]
        past = 0 if past_keys is None else past_keys.shape[2]  # P
        if self.positions == "rotary":
            q, k = rotate(q, past), rotate(k, past)  # at positions P … P + T − 1
        if past_keys is not None:
            k, v = torch.cat([past_keys, k], dim=2), torch.cat([past_values, v], dim=2)  # [B, h, P + T, d/h]
        mask = None
        if self.positions == "alibi":
            mask = alibi_mask(heads, length, past + length, q.dtype, q.device)  # [h, T, P + T]
        elif past_keys is not None:
            mask = torch.ones(length, past + length, dtype=torch.bool, device=x.device).tril(past)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=mask is None)  # [B, h, T, d/h]
        return self.proj(y.transpose(1, 2).reshape(batch, length, width)), k, v


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, config, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.attention_norm = nn.LayerNorm(config.width, **factory)
        self.attention = CausalSelfAttention(config, **factory)
        self.mlp_norm = nn.LayerNorm(config.width, **factory)
        self.mlp = nn.Sequential(nn.Linear(config.width, config.mlp_hidden, **factory), nn.GELU(),
                                 nn.Linear(config.mlp_hidden, config.width, **factory))
        self.dropout = nn.Dropout(config.dropout)

    checkpoint_activations = False  # recompute the block in the backward pass (train --checkpoint-activations)

    def forward(self, x, past_keys=None, past_values=None):
        """-> (x, the attention's keys and values, see ``CausalSelfAttention``); with
        ``checkpoint_activations``, what the block computes is recomputed in the backward pass
        instead of kept (``torch.utils.checkpoint``, dropout's draws replayed)."""
        if self.checkpoint_activations and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(self._forward, x, past_keys, past_values, use_reentrant=False)
        return self._forward(x, past_keys, past_values)

    def _forward(self, x, past_keys, past_values):
        attended, keys, values = self.attention(self.attention_norm(x), past_keys, past_values)
        x = x + self.dropout(attended)
        return x + self.dropout(self.mlp(self.mlp_norm(x))), keys, values


class GPTLanguageModel(_BaselineLM):
    """GPT-style causal Transformer LM (pre-norm; learned, rotary or ALiBi positions); ``config`` a
    ``GPTConfig`` (see ``_BaselineLM``)."""

    config_class = GPTConfig

    def _build(self, config, factory):
        self.token_embedding = nn.Embedding(config.vocab_size, config.width, **factory)
        if config.positions == "learned":
            self.position_embedding = nn.Embedding(config.max_length, config.width, **factory)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(TransformerBlock(config, **factory) for _ in range(config.num_layers))
        self.final_norm = nn.LayerNorm(config.width, **factory)
        self.head = nn.Linear(config.width, config.vocab_size, **factory)

    def reset_parameters(self, generator=None):
        """GPT-2's initialization (see the module docstring)."""
        residual = _normal(GPT_INIT_STD / math.sqrt(2 * self.config.num_layers))
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                _draw(module.weight, _normal(GPT_INIT_STD), generator)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        for block in self.blocks:
            _draw(block.attention.proj.weight, residual, generator)
            _draw(block.mlp[2].weight, residual, generator)

    def _embed(self, tokens, start=0):
        """Token embeddings of ``tokens: [B, T]`` at global positions ``start`` … ``start + T − 1``
        plus, for learned positions, their position embeddings (refusing positions past
        ``max_length``): ``[B, T, d]``."""
        embedded = self.token_embedding(tokens)  # [B, T, d]
        if self.config.positions != "learned":
            return embedded
        end = start + tokens.shape[1]
        if end > self.config.max_length:
            raise ValueError(f"sequence length {end} exceeds max_length={self.config.max_length} "
                             "(the model has no positions beyond it)")
        return embedded + self.position_embedding(torch.arange(start, end, device=tokens.device))

    def forward(self, tokens, cache=None):
        """``tokens: [B, T]`` ids -> (logits ``[B, T, V]``, ``GPTCache``); ``cache``: that of an
        earlier call, to continue its sequences (None: position 0). With learned positions,
        positions past ``max_length`` are refused."""
        tokens = check_tokens(tokens, self.config.vocab_size, next(self.parameters()).device)
        past_keys, past_values, position = (None,) * self.config.num_layers, (None,) * self.config.num_layers, 0
        if cache is not None:
            past_keys, past_values, position = self._check_cache(cache, tokens.shape[0])
        x = self.dropout(self._embed(tokens, position))  # [B, T, d]
        keys, values = [], []
        for block, block_keys, block_values in zip(self.blocks, past_keys, past_values):
            x, block_keys, block_values = block(x, block_keys, block_values)
            keys.append(block_keys)
            values.append(block_values)
        return self.head(self.final_norm(x)), GPTCache(tuple(keys), tuple(values), position + tokens.shape[1])

    def _check_cache(self, cache, batch):
        """The cache's keys, values and position, after checking their count and shapes."""
        cache = check_cache(cache, GPTCache)
        config = self.config
        shape = (batch, config.num_heads, cache.position, config.head_dim)
        for name in ("keys", "values"):
            tensors = getattr(cache, name)
            if len(tensors) != config.num_layers or any(tuple(t.shape) != shape for t in tensors):
                raise ValueError(f"cache.{name} must be {config.num_layers} tensors of shape {shape} "
                                 "(one per block; P = cache.position)")
        return cache


__all__ = ["GPTCache", "GPTConfig", "GPTLanguageModel", "LSTMCache", "LSTMConfig", "LSTMLanguageModel"]
