"""mLSTM language model in torch; mirror of ``reference/mlstm.py`` (math and conventions there).

The layer's parameter names and shapes are those of ``xlstm``'s ``mLSTMLayer``, so
``mLSTMLayer.load_state_dict(model.layer.state_dict())`` works and, with ``read="plain"``,
computes the same outputs (tested).

Performance notes. The cell runs *chunkwise*: positions are cut into chunks of ``chunk_size``;
within a chunk every position is computed at once from the state at the chunk's start, and only
the state (C, n, m) is carried from chunk to chunk in a Python loop (T / chunk_size iterations,
none for ``chunk_size=None``). With the local log-forget cumsum l_t = Σ_{s∈chunk, s≤t} log σ(f̃_s)
and the state (C_0, n_0, m_0) at the chunk's start (m_0 = −∞ for an empty memory, xlstm's
convention; with the NS read m_0 = 0 would give a layer output about 0.2% different, 0.7% at most
at default initialization: NS(C) is scale-free, the normalizer is not, and only the GroupNorm's
eps keeps the resulting per-head scale; see the reference)::

    m_t   = l_t + max(m_0, max_{j≤t} (ĩ_j − l_j))              the recurrence's running max
    w_tj  = exp(l_t − l_j + ĩ_j − m_t)  (j ≤ t, else 0),       δ_t = exp(m_0 + l_t − m_t)
    C_t   = δ_t C_0 + Σ_j w_tj k_j v_jᵀ,                       n_t = δ_t n_0 + Σ_j w_tj k_j

``plain`` never materializes C_t: q_tᵀ C_t = δ_t q_tᵀ C_0 + Σ_j w_tj (q_t·k_j) v_j (the
stabilized quadratic form of xlstm's ``parallel_stabilized_simple``; one chunk of the whole
sequence is exactly that form). ``ns`` and ``polar`` need R(C_t) for every t, so they materialize
C_t for one chunk at a time ([B, H, chunk, P, P]); with ``checkpoint=True`` (default) each chunk
runs under ``torch.utils.checkpoint``, so the backward pass recomputes a chunk's C_t and
Newton–Schulz iterates instead of storing them: memory grows with T only through the chunk
boundary states and the [B, T, ·] activations.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from manifold_impl.draws import normal_
from manifold_impl.precision import full_precision, to_real
from manifold_impl.validation import check_tokens
from reference.checks import check_cache, check_mlstm_state_fields
from reference.config import (MLSTM_CELL_EPS, MLSTM_NORM_EPS, NS_COEFFICIENTS, NS_NORM_FLOOR, MLSTMConfig,
                              model_config)

# Positions per chunk when ``chunk_size="auto"``: the plain read never materializes C_t, so long
# chunks are cheap; the ns/polar reads hold [B, H, chunk, P, P] memories and their Newton–Schulz
# iterates, so shorter chunks bound the peak memory (batch 8, length 512: 367 MiB at 64, 143 MiB
# at 16, at the same speed).
_AUTO_CHUNK_SIZE = {"plain": 64, "ns": 16, "polar": 16}


class MLSTMState(NamedTuple):
    """Recurrent state after a prefix; mirror of reference.mlstm.MLSTMState.

    Attributes:
        conv_history: [B, K−1, D] the last K−1 pre-convolution inputs.
        memory: [B, H, P, P] stabilized C_t.
        normalizer: [B, H, P] stabilized n_t.
        stabilizer: [B, H] m_t.
    """

    conv_history: torch.Tensor
    memory: torch.Tensor
    normalizer: torch.Tensor
    stabilizer: torch.Tensor


class MLSTMCache(NamedTuple):
    """Mirror of reference.mlstm.MLSTMCache: the ``MLSTMState`` after the tokens so far and the
    global index of the next token."""

    state: MLSTMState
    position: int


def check_mlstm_state(config, state, batch):
    """Mirror of reference.mlstm.check_mlstm_state: every field a torch.Tensor."""
    return check_mlstm_state_fields(config, state, batch, MLSTMState,
                                    lambda value: value.shape if isinstance(value, torch.Tensor) else None,
                                    array="torch.Tensor")


# --- reads ---------------------------------------------------------------------------------------


def newton_schulz(c, steps=5, coeffs="cubic"):
    """NS_k(C) of ``c: [..., P, P]``; mirror of reference.mlstm.newton_schulz."""
    a, b, c5 = NS_COEFFICIENTS[coeffs]
    norm = torch.linalg.matrix_norm(c)  # ‖C‖_F, [...]
    x = c / norm.clamp(min=NS_NORM_FLOOR)[..., None, None]
    for _ in range(steps):
        gram = x @ x.mT  # X Xᵀ
        update = a * x + b * (gram @ x)
        if c5 != 0.0:
            update = update + c5 * (gram @ (gram @ x))
        x = update
    return x


class _PolarRead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, c, rtol):
        u, s, vh = torch.linalg.svd(c)
        keep = (s > rtol * s[..., :1]).to(c.dtype)  # [..., P]
        return (u * keep[..., None, :]) @ vh

    @staticmethod
    def backward(ctx, grad):
        raise NotImplementedError("read='polar' is forward-only (the SVD limit has no stable gradient on "
                                  "rank-deficient memories); train with read='ns' or 'plain'")


def polar_read(c, rtol):
    """U diag(1[σ > rtol·σ_max]) Vᵀ of ``c: [..., P, P]``; forward only (backward raises)."""
    return _PolarRead.apply(c, rtol)


def read_memory(config, c):
    """R(C) of the configured read for ``c: [..., P, P]``."""
    if config.read == "plain":
        return c
    if config.read == "ns":
        return newton_schulz(c, config.ns_steps, config.ns_coeffs)
    return polar_read(c, config.polar_rtol)


# --- components ----------------------------------------------------------------------------------


class LayerNorm(nn.Module):
    """xlstm's LayerNorm: F.layer_norm with weight (1 + w), no bias, eps 1e-5."""

    def __init__(self, features, device=None, dtype=None):
        super().__init__()
        self.features = features
        self.weight = nn.Parameter(torch.zeros(features, device=device, dtype=dtype))

    def reset_parameters(self, generator=None):
        nn.init.zeros_(self.weight)

    def forward(self, x):
        return F.layer_norm(x, (self.features,), 1.0 + self.weight, None, MLSTM_NORM_EPS)


class MultiHeadLayerNorm(nn.Module):
    """xlstm's per-head GroupNorm (weight 1 + w, no bias): ``[B, T, H, P] -> [B, T, H·P]``."""

    def __init__(self, features, heads, device=None, dtype=None):
        super().__init__()
        self.features, self.heads = features, heads
        self.weight = nn.Parameter(torch.zeros(features, device=device, dtype=dtype))

    def reset_parameters(self, generator=None):
        nn.init.zeros_(self.weight)

    def forward(self, h):
        batch, length, heads, head_dim = h.shape
        out = F.group_norm(h.reshape(batch * length, heads * head_dim), heads, 1.0 + self.weight, None,
                           MLSTM_NORM_EPS)
        return out.view(batch, length, heads * head_dim)


class HeadwiseLinear(nn.Module):
    """Block-diagonal map without bias, ``weight: [D/b, b, b]`` (xlstm's LinearHeadwiseExpand)."""

    def __init__(self, features, blocksize, std, device=None, dtype=None):
        super().__init__()
        self.features, self.blocksize, self.std = features, blocksize, std
        self.weight = nn.Parameter(torch.empty(features // blocksize, blocksize, blocksize, device=device,
                                               dtype=dtype))

    def reset_parameters(self, generator=None):
        normal_(self.weight, std=self.std, generator=generator)

    def forward(self, x):
        blocks = x.view(*x.shape[:-1], -1, self.blocksize)  # [..., D/b, b]
        return torch.einsum("...hd,hod->...ho", blocks, self.weight).reshape(x.shape)


class CausalConv1d(nn.Module):
    """Depthwise causal convolution with bias; ``conv`` is the torch Conv1d (keys as in xlstm)."""

    def __init__(self, features, kernel, device=None, dtype=None):
        super().__init__()
        self.features, self.kernel = features, kernel
        self.conv = nn.Conv1d(features, features, kernel, groups=features, bias=True, device=device, dtype=dtype)

    def reset_parameters(self, generator=None):
        std = 1.0 / math.sqrt(3 * self.kernel)
        normal_(self.conv.weight, std=std, generator=generator)
        normal_(self.conv.bias, std=std, generator=generator)

    def forward(self, x, history=None):
        """``x: [B, T, D]``, ``history: [B, K−1, D]`` (None: zeros) -> (y ``[B, T, D]``, new history)."""
        batch, length, features = x.shape
        if history is None:
            history = x.new_zeros(batch, self.kernel - 1, features)
        padded = torch.cat([history, x], dim=1)  # [B, K−1+T, D]
        weight = self.conv.weight[:, 0, :]  # [D, K]
        y = self.conv.bias
        for s in range(self.kernel):  # K shifted products: cheaper than torch's grouped conv on CPU
            y = y + weight[:, s] * padded[:, s:s + length]
        return y, padded[:, length:]


def _cell_chunk(config, q, k, v, igate, log_fgate, memory, normalizer, stabilizer):
    """One chunk of positions (see the module docstring).

    Args:
        q, k, v: [B, H, c, P] (k already scaled by 1/√P).
        igate, log_fgate: [B, H, c] ĩ and log σ(f̃).
        memory, normalizer, stabilizer: state at the chunk's start ([B, H, P, P], [B, H, P], [B, H]),
            or all None for an empty memory.

    Returns:
        h̃ [B, H, c, P] and the state after the chunk's last position.
    """
    length = q.shape[-2]
    cumulative = log_fgate.cumsum(-1)  # l_t, [B, H, c]
    running = (igate - cumulative).cummax(-1).values  # max_{j≤t} (ĩ_j − l_j)
    if stabilizer is not None:
        running = torch.maximum(running, stabilizer[..., None])
    m = cumulative + running  # m_t, [B, H, c]
    causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
    log_weights = cumulative[..., :, None] - cumulative[..., None, :] + igate[..., None, :] - m[..., :, None]
    weights = log_weights.masked_fill(~causal, float("-inf")).exp()  # w_tj, [B, H, c, c]
    decay = None if stabilizer is None else torch.exp(stabilizer[..., None] + cumulative - m)  # δ_t, [B, H, c]
    if config.read == "plain":
        scores = (q @ k.mT) * weights  # w_tj (q_t·k_j), [B, H, c, c]
        numerator = scores @ v  # [B, H, c, P]
        qn = scores.sum(-1)  # [B, H, c]
        last = weights[..., -1, :, None]  # w_{c,j}, [B, H, c, 1]
        new_memory, new_normalizer = (k * last).mT @ v, (k * last).sum(-2)
        if decay is not None:
            numerator = numerator + decay[..., None] * (q @ memory)
            qn = qn + decay * (q @ normalizer[..., None]).squeeze(-1)
            new_memory = new_memory + decay[..., -1, None, None] * memory
            new_normalizer = new_normalizer + decay[..., -1, None] * normalizer
    else:
        head_dim = q.shape[-1]
        writes = (k[..., :, None] * v[..., None, :]).flatten(-2)  # k_j v_jᵀ, [B, H, c, P·P]
        memories = (weights @ writes).unflatten(-1, (head_dim, head_dim))  # C_t, [B, H, c, P, P]
        normalizers = weights @ k  # n_t, [B, H, c, P]
        if decay is not None:
            memories = memories + decay[..., None, None] * memory[:, :, None]
            normalizers = normalizers + decay[..., None] * normalizer[:, :, None]
        read = read_memory(config, memories)  # R(C_t), never written back
        numerator = (q[..., None, :] @ read).squeeze(-2)  # q_tᵀ R(C_t), [B, H, c, P]
        qn = (q * normalizers).sum(-1)
        # clone: a view would keep the whole chunk's [B, H, c, P, P] storage alive with the state
        new_memory, new_normalizer = memories[:, :, -1].clone(), normalizers[:, :, -1].clone()
    denominator = torch.maximum(qn.abs(), torch.exp(-m)) + MLSTM_CELL_EPS
    return numerator / denominator[..., None], new_memory, new_normalizer, m[..., -1]


class MLSTMCell(nn.Module):
    """Gates, chunkwise recurrence and read, per-head GroupNorm; mirror of reference.mlstm.MLSTMCell.

    Args:
        chunk_size: positions per chunk (None: the whole sequence in one chunk; "auto":
            ``_AUTO_CHUNK_SIZE`` of the read).
        checkpoint: recompute the ``ns``/``polar`` chunks in the backward pass.

    ``checkpoint_activations`` (train --checkpoint-activations) recomputes every chunk, the
    ``plain`` read's too.
    """

    checkpoint_activations = False

    def __init__(self, config, device=None, dtype=None, chunk_size="auto", checkpoint=True):
        super().__init__()
        if chunk_size == "auto":
            chunk_size = _AUTO_CHUNK_SIZE[config.read]
        elif chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
                                         or chunk_size < 1):
            raise ValueError(f"chunk_size must be a positive int, None or 'auto', got {chunk_size!r}")
        self.config, self.chunk_size, self.checkpoint = config, chunk_size, checkpoint
        factory = {"device": device, "dtype": dtype}
        heads, inner = config.num_heads, config.inner_dim
        self.igate = nn.Linear(3 * inner, heads, **factory)
        self.fgate = nn.Linear(3 * inner, heads, **factory)
        self.outnorm = MultiHeadLayerNorm(inner, heads, **factory)

    def reset_parameters(self, generator=None):
        nn.init.zeros_(self.igate.weight)
        normal_(self.igate.bias, std=0.1, generator=generator)
        nn.init.zeros_(self.fgate.weight)
        with torch.no_grad():
            self.fgate.bias.copy_(torch.linspace(3.0, 6.0, self.config.num_heads, dtype=self.fgate.bias.dtype))
        self.outnorm.reset_parameters(generator)

    def forward(self, q, k, v, state=None):
        """``q, k, v: [B, T, D]``, state (memory, normalizer, stabilizer) or None -> (GN(h̃) ``[B, T, D]``, state).
        Under autocast the cell (gates, memory, read, norm) keeps the parameters' precision
        (``manifold_impl.precision``); the projections that make q, k and v do not."""
        with full_precision(q.device):
            return self._run(*(to_real(x, self.igate.weight) for x in (q, k, v)), state)

    def _run(self, q, k, v, state):
        config = self.config
        batch, length, _ = q.shape
        heads, head_dim = config.num_heads, config.head_dim
        gate_in = torch.cat([q, k, v], dim=-1)  # [B, T, 3D]
        igate = self.igate(gate_in).transpose(1, 2)  # ĩ, [B, H, T]
        log_fgate = F.logsigmoid(self.fgate(gate_in)).transpose(1, 2)  # [B, H, T]

        def split(x):
            return x.view(batch, length, heads, head_dim).transpose(1, 2)  # [B, H, T, P]

        q, k, v = split(q), split(k) / math.sqrt(head_dim), split(v)
        memory, normalizer, stabilizer = (None, None, None) if state is None else state
        chunk = length if self.chunk_size is None else self.chunk_size
        recompute = torch.is_grad_enabled() and (self.checkpoint_activations or
                                                 (self.checkpoint and config.read != "plain"))
        outputs = []
        for start in range(0, length, chunk):
            part = slice(start, start + chunk)
            args = (config, q[..., part, :], k[..., part, :], v[..., part, :], igate[..., part],
                    log_fgate[..., part], memory, normalizer, stabilizer)
            if recompute:
                hidden, memory, normalizer, stabilizer = torch.utils.checkpoint.checkpoint(
                    _cell_chunk, *args, use_reentrant=False)
            else:
                hidden, memory, normalizer, stabilizer = _cell_chunk(*args)
            outputs.append(hidden)
        hidden = torch.cat(outputs, dim=2).transpose(1, 2)  # h̃, [B, T, H, P]
        return self.outnorm(hidden), (memory, normalizer, stabilizer)


class MLSTMLayer(nn.Module):
    """xlstm's mLSTMLayer (same submodule and parameter names); mirror of reference.mlstm.MLSTMLayer."""

    def __init__(self, config, device=None, dtype=None, chunk_size="auto", checkpoint=True):
        super().__init__()
        self.config = config
        factory = {"device": device, "dtype": dtype}
        inner, width, block = config.inner_dim, config.embedding_dim, config.qkv_proj_blocksize
        small = math.sqrt(2.0 / (5.0 * width))
        self.proj_up = nn.Linear(width, 2 * inner, bias=False, **factory)
        self.q_proj = HeadwiseLinear(inner, block, small, **factory)
        self.k_proj = HeadwiseLinear(inner, block, small, **factory)
        self.v_proj = HeadwiseLinear(inner, block, small, **factory)
        self.conv1d = CausalConv1d(inner, config.conv1d_kernel_size, **factory)
        self.mlstm_cell = MLSTMCell(config, chunk_size=chunk_size, checkpoint=checkpoint, **factory)
        self.learnable_skip = nn.Parameter(torch.ones(inner, **factory))
        self.proj_down = nn.Linear(inner, width, bias=False, **factory)

    def reset_parameters(self, generator=None):
        width = self.config.embedding_dim
        normal_(self.proj_up.weight, std=math.sqrt(2.0 / (5.0 * width)), generator=generator)
        for module in (self.q_proj, self.k_proj, self.v_proj, self.conv1d, self.mlstm_cell):
            module.reset_parameters(generator)
        nn.init.ones_(self.learnable_skip)
        normal_(self.proj_down.weight, std=2.0 / math.sqrt(width), generator=generator)

    def forward(self, x, state=None):
        """``x: [B, T, d]``, ``state``: MLSTMState or None -> (y ``[B, T, d]``, MLSTMState)."""
        branch, gate = self.proj_up(x).split(self.config.inner_dim, dim=-1)  # x_t, z_t
        history, cell_state = (None, None) if state is None else (state[0], tuple(state[1:]))
        conv, history = self.conv1d(branch, history)
        conv_act = F.silu(conv)
        q, k, v = self.q_proj(conv_act), self.k_proj(conv_act), self.v_proj(branch)
        hidden, cell_state = self.mlstm_cell(q, k, v, cell_state)
        out = (hidden + self.learnable_skip * conv_act) * F.silu(gate)
        return self.proj_down(out), MLSTMState(history, *cell_state)


class MLSTM(nn.Module):
    """mLSTM LM: embedding -> x + layer(LN(x)) -> LN -> Linear head with bias.

    Args:
        config: a ``reference.config.MLSTMConfig``, or none and its fields as keywords
            (``reference.config.model_config``).
        device, dtype: where and in which precision to keep the parameters.
        generator: ``torch.Generator`` for the initialization (default: torch's global RNG).
        chunk_size: positions per chunk of the cell (None: one chunk; "auto": by read, see
            ``_AUTO_CHUNK_SIZE``); a performance knob only.
        checkpoint: recompute the ``ns``/``polar`` chunks in the backward pass (saves memory).
    """

    def __init__(self, config=None, device=None, dtype=None, generator=None, chunk_size="auto",
                 checkpoint=True, **fields):
        super().__init__()
        self.config = config = model_config(MLSTMConfig, config, fields)
        factory = {"device": device, "dtype": dtype}
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_dim, **factory)
        self.norm = LayerNorm(config.embedding_dim, **factory)
        self.layer = MLSTMLayer(config, chunk_size=chunk_size, checkpoint=checkpoint, **factory)
        self.post_norm = LayerNorm(config.embedding_dim, **factory)
        self.head = nn.Linear(config.embedding_dim, config.vocab_size, **factory)
        self.reset_parameters(generator)

    def reset_parameters(self, generator=None):
        """The reference's initial distributions (reference.mlstm.MLSTM.param_spec)."""
        small = math.sqrt(2.0 / (5.0 * self.config.embedding_dim))
        normal_(self.embedding.weight, std=small, generator=generator)
        self.norm.reset_parameters(generator)
        self.layer.reset_parameters(generator)
        self.post_norm.reset_parameters(generator)
        normal_(self.head.weight, std=small, generator=generator)
        nn.init.zeros_(self.head.bias)

    def forward(self, tokens, cache=None):
        """``tokens: [B, T]`` ids -> (logits ``[B, T, V]``, ``MLSTMCache``); see the reference."""
        tokens = check_tokens(tokens, self.config.vocab_size, next(self.parameters()).device)
        state, position = None, 0
        if cache is not None:
            state, position = check_cache(cache, MLSTMCache)
            state = check_mlstm_state(self.config, state, tokens.shape[0])
        embedded = self.embedding(tokens)  # [B, T, d]
        update, state = self.layer(self.norm(embedded), state)
        return self.head(self.post_norm(embedded + update)), MLSTMCache(state, position + tokens.shape[1])
