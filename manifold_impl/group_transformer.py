"""Group-state Transformer language model in torch; mirror of ``reference/group_transformer.py``
(the math, the shapes, the parameter keys and every decision are stated there).

Batched over sequences, heads and positions: the only Python loops run over layers. Runs on any
device and dtype given at construction. Performance notes: the scores of all heads are one
batched matmul with a causal mask; ``similarity`` attention folds the heads into one weight
matrix Σ_h η_h α^h before the single weighted sum of states (Π is linear); the similarity
Re tr(H_iᴴ H_j) is realvec(H_i) · realvec(H_j), one matmul; every sublayer exponentiates all
positions in one call.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from manifold_impl.draws import normal_
from manifold_impl.group_rnn import drive_scale
from manifold_impl.groups import get_group
from manifold_impl.linalg import realvec
from manifold_impl.manifolds import GroupModule, check_group_state_dict, check_precision, group_parameter
from manifold_impl.mixing import TangentMixing
from manifold_impl.precision import full_precision, to_real
from manifold_impl.readouts import READOUTS
from manifold_impl.validation import check_tokens
from reference.checks import check_cache
from reference.config import GroupTransformerConfig, model_config


def position_scale(group):
    """Mirror of reference.group_transformer.position_scale: 1/√dim g on compact groups, 0 on GL."""
    return 1.0 / math.sqrt(group.dim) if group.is_compact else 0.0


def gelu(x):
    """GELU in its exact erf form (mirror of reference.group_transformer.gelu)."""
    return F.gelu(x, approximate="none")


def _future(queries, keys, device):
    """Boolean mask ``[T, P + T]``: True where key j lies in the future of query i (j > P + i)."""
    return torch.ones(queries, keys, dtype=torch.bool, device=device).triu(keys - queries + 1)


def _keys(states, past):
    """``past`` then ``states`` along the positions, ``[B, P + T, n, n]``."""
    return states if past is None else torch.cat([past, states], dim=1)


def _moved(group, states, c):
    """H · exp(hat(c)) for ``states: [..., n, n]`` and coordinates ``c: [..., d]``, in the states'
    precision under autocast too (``full_precision``: the exponential and the group product)."""
    with full_precision(states.device):
        return group.mul(states, group.exp(group.hat(to_real(c, states))))


class GroupEmbedding(GroupModule):
    """H_i⁰ = E_{x_i} · exp(i · hat(ω)). ``tokens: [B, T] -> states [B, T, n, n]``."""

    def __init__(self, config, group, device=None, dtype=None):
        super().__init__()
        self.config, self.group = config, group
        self.tokens = group_parameter(group.identity((config.vocab_size,), dtype=dtype, device=device), group)
        self.position_generator = nn.Parameter(torch.empty(group.dim, device=device, dtype=dtype))

    def reset_parameters(self, generator=None):
        """Haar token states (drawn on the CPU from ``generator``, default torch's global one)."""
        generator = torch.default_generator if generator is None else generator
        with torch.no_grad():
            self.tokens.copy_(self.group.random((self.config.vocab_size,), generator=generator,
                                                dtype=self.position_generator.dtype, device=generator.device))
        normal_(self.position_generator, std=position_scale(self.group), generator=generator)

    def forward(self, tokens, position=0):
        generator = self.position_generator
        positions = position + torch.arange(tokens.shape[1], dtype=generator.dtype, device=generator.device)
        with full_precision(generator.device):  # under autocast too: the states stay on G
            rotations = self.group.exp(self.group.hat(positions[:, None] * generator))  # [T, n, n]
            return self.group.mul(self.tokens[tokens], rotations)  # [B, T, n, n]


class AlgebraAttention(nn.Module):
    """Causal multi-head attention with queries, keys and values in g (mirror of the reference)."""

    def __init__(self, config, group, device=None, dtype=None):
        super().__init__()
        self.config, self.group = config, group
        factory = {"device": device, "dtype": dtype}
        width = config.num_heads * group.dim
        self.query = nn.Linear(config.state_features, width, bias=False, **factory)
        self.key = nn.Linear(config.state_features, width, bias=False, **factory)
        self.value = nn.Linear(config.state_features, width, bias=False, **factory)
        self.mixing = TangentMixing(config.mixing, group.dim, config.mixing_rank, **factory)

    def reset_parameters(self, generator=None):
        n, dim, heads = self.group.n, self.group.dim, self.config.num_heads
        normal_(self.query.weight, std=1.0 / math.sqrt(n), generator=generator)
        normal_(self.key.weight, std=1.0 / math.sqrt(n), generator=generator)
        normal_(self.value.weight, std=drive_scale(self.group) / math.sqrt(n * dim * heads),
                        generator=generator)
        self.mixing.reset_parameters(generator)

    def _heads(self, linear, states):
        """``[B, T', n, n] -> [B, h, T', d]``: per-head coordinates of ``linear(features(states))``."""
        return linear(self.group.features(states)).unflatten(-1, (self.config.num_heads, self.group.dim)).transpose(1, 2)

    def _scores(self, states, keys):
        queries = self._heads(self.query, states)  # [B, h, T, d]
        scores = queries @ self._heads(self.key, keys).transpose(-1, -2) / math.sqrt(self.group.dim)
        return scores.masked_fill(_future(states.shape[1], keys.shape[1], states.device), -math.inf)

    def scores(self, states, past=None):
        """Scores s_ij^h ``[B, h, T, P + T]``, −inf where j is in the future of i."""
        return self._scores(states, _keys(states, past))

    def forward(self, states, past=None):
        """``states: [B, T, n, n]`` (and cached ``past: [B, P, n, n]``) -> updated states ``[B, T, n, n]``."""
        keys = _keys(states, past)
        weights = self._scores(states, keys).softmax(dim=-1)  # [B, h, T, P+T]
        c = (weights @ self._heads(self.value, keys)).sum(dim=1)  # Σ_h Σ_j α v, [B, T, d]
        c = self.mixing(c)
        return _moved(self.group, states, c)


class SimilarityAttention(nn.Module):
    """Causal multi-head attention by the similarity Re tr(H_iᴴ H_j) (mirror of the reference)."""

    def __init__(self, config, group, device=None, dtype=None):
        super().__init__()
        self.config, self.group = config, group
        factory = {"device": device, "dtype": dtype}
        self.inverse_temperature = nn.Parameter(torch.empty(config.num_heads, **factory))
        self.step = nn.Parameter(torch.empty(config.num_heads, **factory))
        self.mixing = TangentMixing(config.mixing, group.dim, config.mixing_rank, **factory)

    def reset_parameters(self, generator=None):
        n, heads = self.group.n, self.config.num_heads
        normal_(self.inverse_temperature, mean=1.0 / math.sqrt(n), std=0.5 / math.sqrt(n),
                        generator=generator)
        nn.init.constant_(self.step, drive_scale(self.group) / heads)
        self.mixing.reset_parameters(generator)

    def _scores(self, states, keys):
        similarity = realvec(states) @ realvec(keys).transpose(-1, -2)  # Re tr(H_iᴴ H_j), [B, T, P+T]
        scores = self.inverse_temperature[:, None, None] * similarity[:, None]  # [B, h, T, P+T]
        return scores.masked_fill(_future(states.shape[1], keys.shape[1], states.device), -math.inf)

    def scores(self, states, past=None):
        """Scores s_ij^h ``[B, h, T, P + T]``, −inf where j is in the future of i."""
        return self._scores(states, _keys(states, past))

    def forward(self, states, past=None):
        """``states: [B, T, n, n]`` (and cached ``past: [B, P, n, n]``) -> updated states ``[B, T, n, n]``."""
        group = self.group
        keys = _keys(states, past)
        weights = self._scores(states, keys).softmax(dim=-1)  # [B, h, T, P+T]
        combined = torch.einsum("h,bhij->bij", self.step, weights)  # Σ_h η_h α^h
        mean = torch.einsum("bij,bjxy->bixy", combined.to(keys.dtype), keys)  # Σ_h η_h M_i^h, [B, T, n, n]
        c = self.mixing(group.vee(group.proj(group.mul(group.inv(states), mean))))  # [B, T, d]
        return _moved(self.group, states, c)


ATTENTIONS = {"algebra": AlgebraAttention, "similarity": SimilarityAttention}


class FeedForward(nn.Module):
    """H_i ← H_i · exp(hat(mix(W_2 GELU(W_1 features(H_i) + b_1) + b_2))), all positions at once."""

    def __init__(self, config, group, device=None, dtype=None):
        super().__init__()
        self.config, self.group = config, group
        factory = {"device": device, "dtype": dtype}
        self.hidden = nn.Linear(config.state_features, config.feedforward_width, **factory)
        self.output = nn.Linear(config.feedforward_width, group.dim, **factory)
        self.mixing = TangentMixing(config.mixing, group.dim, config.mixing_rank, **factory)

    def reset_parameters(self, generator=None):
        n, dim, width = self.group.n, self.group.dim, self.config.feedforward_width
        normal_(self.hidden.weight, std=1.0 / math.sqrt(n), generator=generator)
        nn.init.zeros_(self.hidden.bias)
        normal_(self.output.weight, std=drive_scale(self.group) / math.sqrt(width * dim), generator=generator)
        nn.init.zeros_(self.output.bias)
        self.mixing.reset_parameters(generator)

    def forward(self, states):
        """``states: [B, T, n, n] -> [B, T, n, n]``."""
        c = self.mixing(self.output(gelu(self.hidden(self.group.features(states)))))  # [B, T, d]
        return _moved(self.group, states, c)


class GroupTransformerLayer(nn.Module):
    """One layer: the attention sublayer, then (``config.feedforward``) the feed-forward sublayer."""

    def __init__(self, config, group, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.attention = ATTENTIONS[config.attention](config, group, **factory)
        self.feedforward = FeedForward(config, group, **factory) if config.feedforward else None

    def reset_parameters(self, generator=None):
        self.attention.reset_parameters(generator)
        if self.feedforward is not None:
            self.feedforward.reset_parameters(generator)

    checkpoint_activations = False  # recompute the layer in the backward pass (train --checkpoint-activations)

    def forward(self, states, past=None):
        """The states after each sublayer, a list of ``[B, T, n, n]``; with ``checkpoint_activations``
        what the layer computes is recomputed in the backward pass instead of kept
        (``torch.utils.checkpoint``)."""
        if self.checkpoint_activations and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(self._forward, states, past, use_reentrant=False)
        return self._forward(states, past)

    def _forward(self, states, past):
        outputs = [self.attention(states, past)]
        if self.feedforward is not None:
            outputs.append(self.feedforward(outputs[-1]))
        return outputs


class GroupTransformerCache(NamedTuple):
    """Mirror of reference.group_transformer.GroupTransformerCache.

    Attributes:
        past: [B, S + 1, P, n, n] every state of the P tokens so far, or None.
        position: global index of the next token.
    """

    past: torch.Tensor | None
    position: int


class GroupTransformer(GroupModule):
    """Group-state Transformer LM: group-valued embedding -> layers -> readout.

    Args:
        config: a ``reference.config.GroupTransformerConfig``, or none and its fields as keywords
            (``reference.config.model_config``).
        device, dtype: where and in which real precision to keep the parameters (complex groups
            hold their group-valued parameters in the matching complex dtype).
        generator: ``torch.Generator`` for the initialization (default: torch's global RNG).
    """

    def __init__(self, config=None, device=None, dtype=None, generator=None, **fields):
        super().__init__()
        self.config = config = model_config(GroupTransformerConfig, config, fields)
        check_precision(dtype, "GroupTransformer")
        self.group = get_group(config.group, config.n, config.block)
        factory = {"device": device, "dtype": dtype}
        self.embedding = GroupEmbedding(config, self.group, **factory)
        self.layers = nn.ModuleList(GroupTransformerLayer(config, self.group, **factory)
                                    for _ in range(config.num_layers))
        self.readout = READOUTS[config.readout](self.group, config.vocab_size, **factory)
        self.reset_parameters(generator)

    def reset_parameters(self, generator=None):
        """The reference's initial distributions (reference.group_transformer.GroupTransformer.param_spec)."""
        self.embedding.reset_parameters(generator)
        for layer in self.layers:
            layer.reset_parameters(generator)
        self.readout.reset_parameters(generator)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """``nn.Module.load_state_dict`` after checking that group-valued entries lie on G."""
        check_group_state_dict(self, state_dict)
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, tokens, cache=None):
        """``tokens: [B, T]`` ids -> (logits ``[B, T, V]``, ``GroupTransformerCache``); see the reference."""
        tokens = check_tokens(tokens, self.config.vocab_size, next(self.parameters()).device)
        self._check_on_groups()
        past, position = None, 0
        if cache is not None:
            past, position = check_cache(cache, GroupTransformerCache)
            if past is not None:
                _check_past(self.group, past, tokens.shape[0], self.config.num_sublayers)
        states = [self.embedding(tokens, position)]
        for layer in self.layers:
            cached = None if past is None else past[:, len(states) - 1]  # this attention's inputs
            states += layer(states[-1], cached)
        logits, states = self.readout(states[-1]), torch.stack(states, dim=1)
        past = states if past is None else torch.cat([past, states], dim=2)
        return logits, GroupTransformerCache(past, position + tokens.shape[1])


def _check_past(group, past, batch, sublayers):
    """Validate cached states ``past: [batch, sublayers + 1, P, n, n]`` on ``group``.

    Membership is checked at n·√eps, not at the group's default 100·n·eps: the model's own states
    drift from G by rounding over layers and long positions (1.4e-13 measured at n = 2 in float64,
    above the default 4.4e-14), and the check is there to refuse wrong tensors, not rounding.
    """
    if not isinstance(past, torch.Tensor):
        raise TypeError(f"past must be a torch.Tensor, got {type(past).__name__}")
    shape = tuple(past.shape)
    expected = f"[{batch}, {sublayers + 1}, P, {group.n}, {group.n}]"
    if len(shape) != 5 or shape[:2] != (batch, sublayers + 1) or shape[3:] != (group.n, group.n):
        raise ValueError(f"past must have shape {expected} (the states of an earlier call), got {shape}")
    real = past.real.dtype if past.is_complex() else past.dtype
    atol = group.n * math.sqrt(torch.finfo(real).eps) if real.is_floating_point else None  # else is_member says why
    ok, reason = group.is_member(past, atol=atol, explain=True)
    if not ok:
        raise ValueError(f"past is not on {group!r}: {reason}")
    return past
