"""Group-state Transformer language model (docs/design.md, Models), the reference: plain loops over heads and
positions.

Every token carries a state H_i ∈ G (an n×n matrix); every sublayer moves it by a group action
H_i ← H_i · exp(Δ_i) with Δ_i ∈ g, so no state ever leaves G and there is no additive residual.
With m = group.num_features = len(features(H)) (docs/design.md, Models: the real and, on the complex groups,
imaginary parts of the entries the group allows to be non-zero; n² or 2n² on the dense groups,
2n on T, k·b² on BO), d = dim g, h heads:

Embedding (positions i = position, position + 1, ..., counted from 0):

    H_i⁰ = E_{x_i} · exp(i · hat(ω))                 E_v ∈ G group-valued, ω ∈ ℝ^d

    exp(i·Ω) with Ω = hat(ω) is a one-parameter subgroup, so positions act relatively: shifting
    every position by k right-multiplies every state by the common element R = exp(k·Ω).

Attention sublayer, ``attention="algebra"`` (the specification's template), causal (j ≤ i):

    q_i^h = W_q^h features(H_i),  k_j^h = W_k^h features(H_j),  v_j^h = W_v^h features(H_j)   ∈ ℝ^d
    s_ij^h = <q_i^h, k_j^h> / √d,      α_ij^h = softmax_{j ≤ i}(s_ij^h)
    Δ_i = hat(mix(Σ_h Σ_{j ≤ i} α_ij^h v_j^h))

Attention sublayer, ``attention="similarity"`` (no query/key/value maps):

    s_ij^h = β_h · Re tr(H_iᴴ H_j),    α_ij^h = softmax_{j ≤ i}(s_ij^h),    M_i^h = Σ_{j ≤ i} α_ij^h H_j
    Δ_i = hat(mix(vee(Σ_h η_h Π(H_i⁻¹ M_i^h))))

Feed-forward sublayer (GELU in its exact erf form):

    Δ_i = hat(mix(W_2 GELU(W_1 features(H_i) + b_1) + b_2))

Readout (reference.readouts) of the last states: logits_i = readout(H_i^S).

Decisions where docs/design.md (Models) is silent:
- Heads are copies, not slices. Each head of ``algebra`` attention maps features(H) to all d
  coordinates of g (so √d scales its scores) and the head outputs are summed, as the specification's
  Δ_i = hat(Σ_heads Σ_j α_ij v_j) reads; each head of ``similarity`` attention has its own
  inverse temperature β_h and step η_h (heads attend at different sharpness; β_h starts at
  random values so that the heads differ). Any number of heads works for any group: nothing has
  to divide anything.
- q, k, v are linear maps without bias, as the specification says ("linear maps of realvec(H_i)"). They and
  the feed-forward sublayer read features(H_i), which is realvec(H_i) on the dense groups and
  drops only the entries that are zero on G on T and BO: the same function class on G.
- ``similarity`` uses H_i⁻¹ = ``group.inv(H_i)`` where the specification writes H_iᴴ: the same on every compact
  group; on GL it is the true inverse, which keeps Δ_i the left-trivialized direction from H_i
  towards M_i (that of ``group.proj_tangent``), invariant under H → gH on every group. On GL,
  where Π is the identity, Δ_i contains the multiple Σ_h η_h α_ii^h of I (the j = i term), so
  the sublayer also rescales the state; η_h starts ten times smaller there (below).
  Σ_h η_h Π(·) = Π(Σ_h η_h ·) since Π is linear.
- Mixing (reference.mixing) acts on the coordinates of each sublayer's whole update (after the
  sum over heads), with its own parameters per sublayer.
- Positions count from 0: the first token's state is its embedding itself.
- No maximum length, no dropout, no normalization (the states are on G: their norm is fixed on
  the compact groups). ``feedforward=False`` gives attention-only layers.
- Relative positions. A common right shift H_j → H_j R (R ∈ G) leaves the similarity scores
  unchanged on the compact groups (Re tr(Rᴴ H_iᴴ H_j R) = Re tr(H_iᴴ H_j)) and maps
  Δ_i → R⁻¹ Δ_i R (Π commutes with conjugation by R), so H_i exp(Δ_i) → H_i exp(Δ_i) R: every
  later state is shifted by the same R, through every ``similarity`` sublayer with mixing
  ``none`` or ``scalar``. The feed-forward sublayer (a function of features(H_i)), ``algebra``
  attention and ``lowrank`` mixing (a map of coordinates that does not commute with
  conjugation) break it, and so does GL, whose scores are not invariant (R is not unitary).
- Incremental decoding: ``forward`` returns a ``GroupTransformerCache`` holding the state of every
  token so far before and after every sublayer (``past``; keys and values are functions of the
  sublayer-input states of earlier tokens) and the next position; fed back, stepping one token
  at a time equals the full-sequence forward.

Initial scales (``param_spec``): on the compact groups ‖features(H)‖² = n, so the maps that read
features(H) (W_q, W_k, W_1) start with std 1/√n and give unit-variance coordinates: algebra
scores ≈ N(0, 1), GELU inputs ≈ N(0, 1). The maps that make updates carry drive =
``drive_scale(G)`` (reused from the group RNN: 1 on compact groups, 0.1 on GL): W_v has std
drive/√(n d h), so that Σ_h v^h has norm ≈ drive; W_2 has std drive/√(F d); η_h = drive/h.
β_h ~ N(1/√n, (0.5/√n)²): a token's score with itself, β n ≈ √n, stands out against O(β) for
unrelated states, and the random spread makes the heads differ (equal heads would get equal
gradients forever). On compact groups ω ~ N(0, 1/d), so ‖Ω‖ ≈ 1. On GL, whose state norm is not
fixed, every update thus starts ten times smaller, and Ω starts at 0 (``position_scale``): a
generic Ω makes ‖exp(i·Ω)‖ grow or shrink exponentially in the position i. Parity draws generic
values instead (``ParamSpec.scale``).

Parameters (keys and shapes = the torch ``state_dict``; F = feed-forward width):
    embedding.tokens                         [V, n, n]   group-valued E_v (Haar at init)
    embedding.position_generator             [d]         ω, Ω = hat(ω)
    layers.{l}.attention.query.weight        [h·d, m]    W_q^h = rows h·d .. (h+1)·d  (algebra)
    layers.{l}.attention.key.weight          [h·d, m]    W_k                          (algebra)
    layers.{l}.attention.value.weight        [h·d, m]    W_v                          (algebra)
    layers.{l}.attention.inverse_temperature [h]         β                            (similarity)
    layers.{l}.attention.step                [h]         η                            (similarity)
    layers.{l}.attention.mixing.*                        see reference.mixing
    layers.{l}.feedforward.hidden.weight     [F, m]      W_1   (feedforward only)
    layers.{l}.feedforward.hidden.bias       [F]         b_1
    layers.{l}.feedforward.output.weight     [d, F]      W_2
    layers.{l}.feedforward.output.bias       [d]         b_2
    layers.{l}.feedforward.mixing.*
    readout.*                                            see reference.readouts

States (``forward``'s cache, field ``past``): ``[B, S + 1, P, n, n]`` over the P tokens so far,
with S = ``config.num_sublayers``; index 0 is the embedding H⁰, index s + 1 the output of
sublayer s (layer l's attention is sublayer 2l and its feed-forward 2l + 1; without
feed-forward, layer l is sublayer l).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import autograd.numpy as anp
import numpy as np
from autograd.scipy.special import erf, logsumexp
from autograd.tracer import getval

from reference.checks import check_cache
from reference.config import GroupTransformerConfig, model_config
from reference.group_rnn import drive_scale
from reference.groups import get_group
from reference.linalg import frobenius_inner
from reference.mixing import TangentMixing
from reference.params import ParamSpec, SpecModel, prefixed, sub_params
from reference.readouts import READOUTS
from reference.validation import check_tokens


def position_scale(group):
    """Initial std of the coordinates of ω: 1/√dim g on compact groups (‖Ω‖ ≈ 1), 0 on GL."""
    return 1.0 / np.sqrt(group.dim) if group.is_compact else 0.0


def gelu(x):
    """GELU in its exact form x Φ(x) = x (1 + erf(x / √2)) / 2 (not the tanh approximation)."""
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _softmax(scores):
    """Softmax over the last axis (the keys j ≤ i of one query)."""
    return anp.exp(scores - logsumexp(scores, axis=-1, keepdims=True))


def _pad_rows(rows, width):
    """Stack score rows ``[B, P+i+1]`` into ``[B, T, width]`` with −inf right of the causal edge."""
    padded = [np.concatenate([row, np.full(row.shape[:-1] + (width - row.shape[-1],), -np.inf)], axis=-1)
              for row in rows]
    return np.stack(padded, axis=1)


def _keys(states, past):
    """The states every query may attend to: ``past`` then ``states``, ``[B, P + T, n, n]``."""
    return states if past is None else anp.concatenate([past, states], axis=1)


class GroupEmbedding:
    """H_i⁰ = E_{x_i} · exp(i · hat(ω)). ``tokens: [B, T] -> states [B, T, n, n]``."""

    def __init__(self, config, group):
        self.config, self.group = config, group

    def param_spec(self):
        dim = self.group.dim
        return {
            "tokens": ParamSpec((self.config.vocab_size, self.group.n, self.group.n), group=self.group, haar=True),
            "position_generator": ParamSpec((dim,), std=position_scale(self.group),
                                            scale=drive_scale(self.group) / np.sqrt(dim)),
        }

    def __call__(self, params, tokens, position=0):
        group = self.group
        rotations = [group.exp(group.hat((position + t) * params["position_generator"]))
                     for t in range(tokens.shape[1])]  # exp(i·Ω), one [n, n] per position
        return group.mul(params["tokens"][tokens], anp.stack(rotations))  # [B, T, n, n]


class _TangentSublayer:
    """A sublayer that moves every state along the group, H ← H · exp(hat(mix(c))), by coordinates
    c ∈ ℝ^d it computes (attention or feed-forward), mixed by ``TangentMixing``."""

    def __init__(self, config, group):
        self.config, self.group = config, group
        self.mixing = TangentMixing(config.mixing, group.dim, config.mixing_rank)

    def _move(self, params, states, c):
        """``states: [B, T, n, n]``, coordinates ``c: [B, T, d]`` -> H · exp(hat(mix(c))) ``[B, T, n, n]``."""
        c = self.mixing(sub_params(params, "mixing."), c)
        return self.group.mul(states, self.group.exp(self.group.hat(c)))


class _Attention(_TangentSublayer):
    """Causal multi-head attention; a subclass gives the score rows ``_score_rows``."""

    def scores(self, params, states, past=None):
        """Scores s_ij^h ``[B, h, T, P + T]``, −inf where j is in the future of i."""
        keys = _keys(states, past)
        rows = self._score_rows(params, states, keys)
        return np.stack([_pad_rows([getval(r) for r in head], keys.shape[1]) for head in rows], axis=1)


class AlgebraAttention(_Attention):
    """Causal multi-head attention with queries, keys and values in g (module docstring)."""

    def param_spec(self):
        n, dim, heads = self.group.n, self.group.dim, self.config.num_heads
        shape = (heads * dim, self.config.state_features)
        value_std = drive_scale(self.group) / np.sqrt(n * dim * heads)
        return {
            "query.weight": ParamSpec(shape, std=1.0 / np.sqrt(n)),
            "key.weight": ParamSpec(shape, std=1.0 / np.sqrt(n)),
            "value.weight": ParamSpec(shape, std=value_std),
        } | prefixed("mixing.", self.mixing.param_spec())

    def _heads(self, weight, states):
        """Per-head coordinates ``[B, T', d]`` (one per head) of the map ``weight`` of features(states)."""
        dim = self.group.dim
        features = self.group.features(states)  # [B, T', m]
        return [features @ weight[h * dim:(h + 1) * dim].T for h in range(self.config.num_heads)]

    def _score_rows(self, params, states, keys):
        """rows[h][i] = s_ij^h for the keys j ≤ P + i, ``[B, P + i + 1]``."""
        queries = self._heads(params["query.weight"], states)
        keys = self._heads(params["key.weight"], keys)
        offset = keys[0].shape[1] - states.shape[1]  # P
        scale = 1.0 / np.sqrt(self.group.dim)
        return [[anp.einsum("bd,bjd->bj", queries[h][:, i], keys[h][:, :offset + i + 1]) * scale
                 for i in range(states.shape[1])] for h in range(self.config.num_heads)]

    def __call__(self, params, states, past=None):
        """``states: [B, T, n, n]`` (and cached ``past: [B, P, n, n]``) -> updated states ``[B, T, n, n]``."""
        keys = _keys(states, past)
        rows = self._score_rows(params, states, keys)
        values = self._heads(params["value.weight"], keys)  # h × [B, P+T, d]
        offset = keys.shape[1] - states.shape[1]
        updates = []
        for i in range(states.shape[1]):
            update = 0.0
            for h in range(self.config.num_heads):
                weights = _softmax(rows[h][i])  # [B, P+i+1]
                update = update + anp.einsum("bj,bjd->bd", weights, values[h][:, :offset + i + 1])
            updates.append(update)
        return self._move(params, states, anp.stack(updates, axis=1))  # c: [B, T, d]


class SimilarityAttention(_Attention):
    """Causal multi-head attention by the group's own similarity Re tr(H_iᴴ H_j) (module docstring)."""

    def param_spec(self):
        """β_h ~ N(1/√n, (0.5/√n)²) and η_h = drive/h (module docstring)."""
        n, heads = self.group.n, self.config.num_heads
        step = drive_scale(self.group) / heads
        return {
            "inverse_temperature": ParamSpec((heads,), mean=1.0 / np.sqrt(n), std=0.5 / np.sqrt(n)),
            "step": ParamSpec((heads,), mean=step, scale=step),
        } | prefixed("mixing.", self.mixing.param_spec())

    def _score_rows(self, params, states, keys):
        """rows[h][i] = β_h Re tr(H_iᴴ H_j) for the keys j ≤ P + i, ``[B, P + i + 1]``."""
        offset = keys.shape[1] - states.shape[1]
        return [[params["inverse_temperature"][h] * frobenius_inner(states[:, i, None], keys[:, :offset + i + 1])
                 for i in range(states.shape[1])] for h in range(self.config.num_heads)]

    def __call__(self, params, states, past=None):
        """``states: [B, T, n, n]`` (and cached ``past: [B, P, n, n]``) -> updated states ``[B, T, n, n]``."""
        group = self.group
        keys = _keys(states, past)
        rows = self._score_rows(params, states, keys)
        offset = keys.shape[1] - states.shape[1]
        updates = []
        for i in range(states.shape[1]):
            to_query = group.inv(states[:, i])  # H_i⁻¹, [B, n, n]
            delta = 0.0
            for h in range(self.config.num_heads):
                weights = _softmax(rows[h][i])  # [B, P+i+1]
                mean = anp.einsum("bj,bjxy->bxy", weights, keys[:, :offset + i + 1])  # M_i^h
                delta = delta + params["step"][h] * group.proj(group.mul(to_query, mean))
            updates.append(group.vee(delta))
        return self._move(params, states, anp.stack(updates, axis=1))  # c: [B, T, d]


ATTENTIONS = {"algebra": AlgebraAttention, "similarity": SimilarityAttention}


class FeedForward(_TangentSublayer):
    """H_i ← H_i · exp(hat(mix(W_2 GELU(W_1 features(H_i) + b_1) + b_2))), position by position."""

    def param_spec(self):
        n, dim, width = self.group.n, self.group.dim, self.config.feedforward_width
        drive = drive_scale(self.group)
        return {
            "hidden.weight": ParamSpec((width, self.config.state_features), std=1.0 / np.sqrt(n)),
            "hidden.bias": ParamSpec((width,), scale=0.1),
            "output.weight": ParamSpec((dim, width), std=drive / np.sqrt(width * dim)),
            "output.bias": ParamSpec((dim,), scale=0.1 * drive),
        } | prefixed("mixing.", self.mixing.param_spec())

    def __call__(self, params, states):
        """``states: [B, T, n, n] -> [B, T, n, n]``."""
        hidden = gelu(self.group.features(states) @ params["hidden.weight"].T + params["hidden.bias"])  # [B, T, F]
        c = hidden @ params["output.weight"].T + params["output.bias"]  # [B, T, d]
        return self._move(params, states, c)


class GroupTransformerLayer:
    """One layer: the attention sublayer, then (``config.feedforward``) the feed-forward sublayer."""

    def __init__(self, config, group):
        self.config = config
        self.attention = ATTENTIONS[config.attention](config, group)
        self.feedforward = FeedForward(config, group) if config.feedforward else None

    def param_spec(self):
        spec = prefixed("attention.", self.attention.param_spec())
        if self.feedforward is not None:
            spec |= prefixed("feedforward.", self.feedforward.param_spec())
        return spec

    def __call__(self, params, states, past=None):
        """``states: [B, T, n, n]``, ``past``: the cached attention inputs ``[B, P, n, n]`` or None.

        Returns the states after each sublayer, a list of ``[B, T, n, n]``.
        """
        outputs = [self.attention(sub_params(params, "attention."), states, past)]
        if self.feedforward is not None:
            outputs.append(self.feedforward(sub_params(params, "feedforward."), outputs[-1]))
        return outputs


class GroupTransformerCache(NamedTuple):
    """The states of the tokens so far and the next position: what ``GroupTransformer.forward``
    needs to continue a sequence.

    Attributes:
        past: [B, S + 1, P, n, n] the state of each of the P tokens so far before and after every
            sublayer (layout in the module docstring); every hidden state of those tokens, so after
            a call without a cache, exactly that call's states. None: no earlier tokens.
        position: global index i of the next token (P when the sequence started at position 0).
    """

    past: object
    position: int


class GroupTransformer(SpecModel):
    """Reference group-state Transformer LM. Functions of a parameter dict (module docstring)."""

    def __init__(self, config=None, **fields):
        self.config = config = model_config(GroupTransformerConfig, config, fields)
        self.group = get_group(config.group, config.n, config.block)
        self.embedding = GroupEmbedding(config, self.group)
        self.layers = [GroupTransformerLayer(config, self.group) for _ in range(config.num_layers)]
        self.readout = READOUTS[config.readout](self.group, config.vocab_size)

    def param_spec(self):
        """``{key: ParamSpec}`` in state_dict order."""
        spec = prefixed("embedding.", self.embedding.param_spec())
        for index, layer in enumerate(self.layers):
            spec |= prefixed(f"layers.{index}.", layer.param_spec())
        return spec | prefixed("readout.", self.readout.param_spec())

    def forward(self, params, tokens, cache=None):
        """Run the model over a batch of sequences.

        Args:
            params: parameter dict (see ``param_spec``).
            tokens: [B, T] integer ids in [0, V).
            cache: the ``GroupTransformerCache`` an earlier call returned (continue after its
                tokens), or one built by hand (e.g. ``GroupTransformerCache(None, i)``: start at
                position i); None: no earlier tokens, position 0.

        Returns:
            logits [B, T, V] and ``GroupTransformerCache(past ++ this call's states [B, S + 1, P + T, n, n],
            position + T)`` (embedding, then every sublayer's output).
        """
        tokens = check_tokens(tokens, self.config.vocab_size)
        past, position = None, 0
        if cache is not None:
            past, position = check_cache(cache, GroupTransformerCache)
            if past is not None:
                _check_past(self.group, getval(past), tokens.shape[0], self.config.num_sublayers)
        states = [self.embedding(sub_params(params, "embedding."), tokens, position)]
        for index, layer in enumerate(self.layers):
            cached = None if past is None else past[:, len(states) - 1]  # this attention's inputs
            states += layer(sub_params(params, f"layers.{index}."), states[-1], cached)
        logits = self.readout(sub_params(params, "readout."), states[-1])
        states = anp.stack(states, axis=1)
        past = states if past is None else anp.concatenate([past, states], axis=2)
        return logits, GroupTransformerCache(past, position + tokens.shape[1])


def _check_past(group, past, batch, sublayers):
    """Validate cached states ``past: [batch, sublayers + 1, P, n, n]`` on ``group``.

    Membership is checked at n·√eps, not at the group's default 100·n·eps: the model's own states
    drift from G by rounding over layers and long positions (1.4e-13 measured at n = 2 in float64,
    above the default 4.4e-14), and the check is there to refuse wrong tensors, not rounding.
    """
    shape = np.shape(past)
    expected = f"[{batch}, {sublayers + 1}, P, {group.n}, {group.n}]"
    if len(shape) != 5 or shape[:2] != (batch, sublayers + 1) or shape[3:] != (group.n, group.n):
        raise ValueError(f"past must have shape {expected} (the states of an earlier call), got {shape}")
    real = np.asarray(past).real.dtype
    atol = group.n * math.sqrt(np.finfo(real).eps) if real.kind == "f" else None  # else is_member says why
    ok, reason = group.is_member(past, atol=atol, explain=True)
    if not ok:
        raise ValueError(f"past is not on {group!r}: {reason}")
    return past
