"""mLSTM language model with an orthogonalized read (docs/design.md, Models), the reference: one loop over time.

Shapes: B batch, T positions, d = embedding_dim (94), D = inner width (192), H heads (4),
P = D / H head dimension (48), K conv kernel (4), V vocabulary.

Model (``MLSTM``), pre-LayerNorm residual block, untied embedding, head with bias::

    e_t = E[x_t]                                          [B, T, d]
    u_t = e_t + layer(LN(e_t))
    logits_t = W_head LN'(u_t) + b_head                   [B, T, V]

Layer (``MLSTMLayer``, the ``xlstm`` package's ``mLSTMLayer``)::

    [x_t, z_t] = W_up a_t                                 a_t = LN(e_t); x_t, z_t ∈ ℝ^D
    c_t = SiLU(b + Σ_{s=0}^{K-1} w_s ⊙ x_{t-K+1+s})       depthwise causal conv, x_{≤0} = 0
    q_t = Q c_t,  k_t = K c_t,  v_t = V x_t               block-diagonal, blocks 4×4, no bias
    ĩ_t = W_i [q_t; k_t; v_t] + b_i,  f̃_t = W_f [q_t; k_t; v_t] + b_f        ∈ ℝ^H
    h̃_t = cell(q, k, v, ĩ, f̃)                             [B, T, H, P]
    y_t = W_down ((GN(h̃_t) + s ⊙ c_t) ⊙ SiLU(z_t))         s: learnable skip (init 1)

Cell (``MLSTMCell``), per head, stabilized recurrent form with k_t ← k_t / √P::

    m_t  = max(log σ(f̃_t) + m_{t-1}, ĩ_t)
    f'_t = exp(log σ(f̃_t) + m_{t-1} − m_t),   i'_t = exp(ĩ_t − m_t)
    C_t  = f'_t C_{t-1} + i'_t k_t v_tᵀ                    [P, P], rows indexed by k
    n_t  = f'_t n_{t-1} + i'_t k_t                          [P]
    h̃_t  = q_tᵀ R(C_t) / (max(|q_tᵀ n_t|, exp(−m_t)) + 1e-6)

C_t and n_t are the stabilized e^{−m_t}-scaled memory. Reads (``read_memory``):
``plain`` R(C) = C; ``ns`` R = NS_k (``newton_schulz``), applied to every C_t after the write at
t, for the read only (never written back), differentiated through; ``polar`` R = the iteration's
limit U 1[σ > rtol·σ_max] Vᵀ (``polar_read``), forward only. NS and polar see the stabilized
C_t; NS is scale-invariant but for the floor max(‖C‖_F, 1e-6), so for those reads h̃_t carries a
factor e^{m_t} relative to the unstabilized memory, which the per-head GroupNorm removes (the specification:
"the normalizer uses the raw n_t; the per-head GroupNorm then removes the scale").

Conventions of xlstm 2.0.0 followed where docs/design.md (Models) is silent or differs (the torch layer with
``read="plain"`` equals ``xlstm``'s ``mLSTMLayer`` loaded with the same weights, tested):

1. Stabilizer at the start of a sequence. The specification writes m_0 = 0; ``mLSTMLayer.forward`` (kernel
   ``parallel_stabilized_simple``) uses m_t = max_{j≤t}(ĩ_j + Σ_{s=j+1}^{t} log σ(f̃_s)), which is
   the recurrence above started from an *empty* memory, m_0 = −∞: m_1 = ĩ_1 and f'_1 = 0. (xlstm's
   own one-token ``step`` starts from m_0 = 0, so xlstm disagrees with itself.) Written without
   stabilization, h̃_t = q_tᵀ C_t / (max(|q_tᵀ n_t|, 1) + 1e-6·e^{m_t}), so the choice changes the
   plain read by O(1e-6) relative through the eps only; we follow ``forward``. A state passed in
   (stepping) carries its finite m. The NS read is not indifferent: NS(C_t) is scale-free but the
   normalizer is not, so while the m_0 = 0 path dominates the running max, h̃_t is scaled by
   e^{Δm_t} (Δm_t = m_t(m_0 = 0) − m_t(m_0 = −∞) ≥ 0), which the per-head GroupNorm removes except
   through its eps 1e-5. At default initialization (V = 80, batch 8, T = 128, float64, 10 seeds)
   m_0 = 0 and m_0 = −∞ differ by 0.2% of the layer output's norm in the median, 0.7% at most
   (about 2% at the first position); with the GroupNorm's eps set to 0 the difference vanishes.
2. Norm weights. xlstm's ``LayerNorm`` and ``MultiHeadLayerNorm`` store w (init 0) and scale by
   (1 + w) ("residual weight"); no bias; eps 1e-5. Both LayerNorms of the model and the per-head
   GroupNorm use this convention, so ``outnorm.weight`` loads into xlstm unchanged.
3. The per-head GroupNorm is ``F.group_norm`` with H groups on each position's [H·P] vector: per
   position and head, normalize over P with the biased variance, then scale by (1 + w).
4. The gates read the *unscaled* q, k and v; only the cell scales k by 1/√P. The numerator uses
   the unscaled q. The eps 1e-6 is added after the max, as in the specification.
5. Orientation: C_t = Σ k vᵀ (rows indexed by the key), h̃_t = q_tᵀ C_t, as in the specification.

Parameters (keys and shapes = the torch ``state_dict``; the layer's keys are xlstm's)::

    embedding.weight                      [V, d]
    norm.weight                           [d]        LN before the layer (1 + w)
    layer.proj_up.weight                  [2D, d]
    layer.q_proj.weight, k_proj, v_proj   [D/4, 4, 4]  block b maps x[4b:4b+4] to y[4b:4b+4]
    layer.conv1d.conv.weight              [D, 1, K]
    layer.conv1d.conv.bias                [D]
    layer.mlstm_cell.igate.weight         [H, 3D]    .bias [H]
    layer.mlstm_cell.fgate.weight         [H, 3D]    .bias [H]
    layer.mlstm_cell.outnorm.weight       [D]        GN (1 + w)
    layer.learnable_skip                  [D]
    layer.proj_down.weight                [d, D]
    post_norm.weight                      [d]        LN after the block (1 + w)
    head.weight                           [V, d]     .bias [V]

At V = 80 this is 77,716 parameters; at V = 96, 80,740 (tested).

Initialization as xlstm: "small init" N(0, 2/(5d)) for the up-projection, q/k/v, embedding and
head; "Wang init" N(0, (2/√d)²) for the down-projection; gate weights 0, forget bias
linspace(3, 6), input bias N(0, 0.1²); norm weights 0, skip 1, head bias 0. The depthwise
convolution is torch's default uniform ±1/√K in xlstm; here a normal of the same variance 1/(3K).
"""

from __future__ import annotations

from typing import NamedTuple

import autograd.numpy as anp
import numpy as np
from autograd.extend import defvjp, primitive
from autograd.tracer import getval

from reference.checks import check_cache, check_mlstm_state_fields
from reference.config import (MLSTM_CELL_EPS, MLSTM_NORM_EPS, NS_COEFFICIENTS, NS_NORM_FLOOR, MLSTMConfig,
                              model_config)
from reference.params import ParamSpec, SpecModel, prefixed, sub_params
from reference.validation import check_tokens


class MLSTMState(NamedTuple):
    """Recurrent state after a prefix, threaded when stepping.

    Attributes:
        conv_history: [B, K−1, D] the last K−1 pre-convolution inputs x_t (zeros before the start).
        memory: [B, H, P, P] stabilized C_t.
        normalizer: [B, H, P] stabilized n_t.
        stabilizer: [B, H] m_t.
    """

    conv_history: object
    memory: object
    normalizer: object
    stabilizer: object


class MLSTMCache(NamedTuple):
    """What ``MLSTM.forward`` needs to continue a sequence.

    Attributes:
        state: the ``MLSTMState`` (conv history, C_t, n_t, m_t) after the tokens so far.
        position: the global index of the next token (the mLSTM reads no positions; kept so that
            every model's cache says where it stands).
    """

    state: MLSTMState
    position: int


def check_mlstm_state(config, state, batch):
    """Raise a ValueError naming the field unless ``state`` is an MLSTMState of ``config``'s shapes
    (``reference.checks.check_mlstm_state_fields``)."""
    return check_mlstm_state_fields(config, state, batch, MLSTMState, lambda value: np.shape(getval(value)))


def _sigmoid(x):
    return 0.5 * (anp.tanh(0.5 * x) + 1.0)  # no overflow for large |x|


def _silu(x):
    return x * _sigmoid(x)


def _log_sigmoid(x):
    """log σ(x) = −log(1 + e^{−x}), stable."""
    return -anp.logaddexp(0.0, -x)


def _normalize(x):
    """(x − mean) / sqrt(var + eps) over the last axis (biased variance)."""
    centered = x - anp.mean(x, axis=-1, keepdims=True)
    variance = anp.mean(centered * centered, axis=-1, keepdims=True)
    return centered / anp.sqrt(variance + MLSTM_NORM_EPS)


# --- reads ---------------------------------------------------------------------------------------


def newton_schulz(c, steps=5, coeffs="cubic"):
    """Newton–Schulz orthogonalization NS_k(C) of ``c: [..., P, P]`` (differentiable).

    X_0 = C / max(‖C‖_F, 1e-6), then k times X ← a X + b (X Xᵀ) X + c (X Xᵀ)² X with
    (a, b, c) = (1.5, −0.5, 0) (``cubic``) or (3.4445, −4.7750, 2.0315) (``quintic``, Muon's).
    Each step maps every singular value s of X by p(s) = a s + b s³ + c s⁵ and keeps the singular
    vectors: cubic steps drive s ∈ (0, √3) to 1 (the polar factor in the limit); quintic ones to
    about [0.7, 1.2].
    """
    a, b, c5 = NS_COEFFICIENTS[coeffs]
    # max(‖C‖_F, floor) as sqrt(max(‖C‖_F², floor²)): the square root is never differentiated at
    # 0, so a zero memory has the finite gradient NS_k'(0) = aᵏ / floor (torch's value), not NaN
    norm = anp.sqrt(anp.maximum(anp.sum(c * c, axis=(-2, -1)), NS_NORM_FLOOR ** 2))  # [...]
    x = c / norm[..., None, None]
    for _ in range(steps):
        gram = x @ anp.swapaxes(x, -1, -2)  # X Xᵀ
        update = a * x + b * (gram @ x)
        if c5 != 0.0:
            update = update + c5 * (gram @ (gram @ x))
        x = update
    return x


def polar_read(c, rtol):
    """Limit of the cubic iteration: U diag(1[σ_i > rtol·σ_max]) Vᵀ for ``c = U diag(σ) Vᵀ: [..., P, P]``.

    Forward only: early C_t are rank-deficient and the SVD's gradient is unstable there, so
    differentiating raises NotImplementedError (docs/design.md, Models: a forward-only oracle).
    """
    return _polar_primitive(c, rtol)


@primitive
def _polar_primitive(c, rtol):
    u, s, vh = np.linalg.svd(c)
    keep = s > rtol * s[..., :1]  # [..., P]
    return (u * keep[..., None, :]) @ vh


def _polar_vjp(ans, c, rtol):
    def vjp(g):
        raise NotImplementedError("read='polar' is forward-only (the SVD limit has no stable gradient on "
                                  "rank-deficient memories); train with read='ns' or 'plain'")

    return vjp


defvjp(_polar_primitive, _polar_vjp)


def read_memory(config, c):
    """R(C) of the configured read for ``c: [..., P, P]``."""
    if config.read == "plain":
        return c
    if config.read == "ns":
        return newton_schulz(c, config.ns_steps, config.ns_coeffs)
    return polar_read(c, config.polar_rtol)


# --- components ----------------------------------------------------------------------------------


class LayerNorm:
    """xlstm's LayerNorm: (x − mean)/sqrt(var + 1e-5) ⊙ (1 + w) over the last axis, no bias."""

    def __init__(self, features):
        self.features = features

    def param_spec(self):
        return {"weight": ParamSpec((self.features,), scale=0.1)}

    def __call__(self, params, x):
        """``x: [..., features]`` -> same shape."""
        return _normalize(x) * (1.0 + params["weight"])


class MultiHeadLayerNorm:
    """xlstm's per-head GroupNorm: each head's P features normalized, then ⊙ (1 + w), no bias."""

    def __init__(self, features, heads):
        self.features, self.heads = features, heads

    def param_spec(self):
        return {"weight": ParamSpec((self.features,), scale=0.1)}

    def __call__(self, params, h):
        """``h: [B, T, H, P]`` -> ``[B, T, H·P]``."""
        normed = _normalize(h)
        return anp.reshape(normed, h.shape[:-2] + (-1,)) * (1.0 + params["weight"])


class HeadwiseLinear:
    """Block-diagonal map without bias (xlstm's LinearHeadwiseExpand, expand factor 1).

    ``weight: [D/b, b, b]``; block j maps x[j·b:(j+1)·b] to y_j = W_j x_j (W_j stored (out, in)).
    """

    def __init__(self, features, blocksize, std):
        self.features, self.blocksize, self.std = features, blocksize, std

    def param_spec(self):
        blocks, size = self.features // self.blocksize, self.blocksize
        return {"weight": ParamSpec((blocks, size, size), std=self.std)}

    def __call__(self, params, x):
        """``x: [..., D]`` -> ``[..., D]``."""
        blocks = anp.reshape(x, x.shape[:-1] + (-1, self.blocksize))  # [..., D/b, b]
        y = anp.sum(blocks[..., None, :] * params["weight"], axis=-1)  # [..., D/b, b(out)]
        return anp.reshape(y, x.shape)


class CausalConv1d:
    """Depthwise causal convolution with bias: y_t = b + Σ_{s=0}^{K-1} w[:, 0, s] ⊙ x_{t-K+1+s}.

    Keys ``conv.weight: [D, 1, K]`` and ``conv.bias: [D]`` (torch's Conv1d inside xlstm's module).
    """

    def __init__(self, features, kernel):
        self.features, self.kernel = features, kernel

    def param_spec(self):
        std = 1.0 / np.sqrt(3 * self.kernel)  # the variance of torch's default uniform ±1/√K
        return {"conv.weight": ParamSpec((self.features, 1, self.kernel), std=std),
                "conv.bias": ParamSpec((self.features,), std=std)}

    def __call__(self, params, x, history=None):
        """``x: [B, T, D]``, ``history: [B, K−1, D]`` (None: zeros) -> (y ``[B, T, D]``, new history)."""
        batch, length, features = x.shape
        if history is None:
            history = np.zeros((batch, self.kernel - 1, features))
        padded = anp.concatenate([history, x], axis=1)  # [B, K−1+T, D]
        weight = params["conv.weight"][:, 0, :]  # [D, K]
        y = params["conv.bias"]
        for s in range(self.kernel):
            y = y + weight[:, s] * padded[:, s:s + length]
        return y, padded[:, length:]


class MLSTMCell:
    """Gates, the stabilized recurrence and the read, then the per-head GroupNorm (module docstring)."""

    def __init__(self, config):
        self.config = config
        self.outnorm = MultiHeadLayerNorm(config.inner_dim, config.num_heads)

    def param_spec(self):
        heads, gate_in = self.config.num_heads, 3 * self.config.inner_dim
        forget_bias = tuple(np.linspace(3.0, 6.0, heads))  # a per-entry mean (ParamSpec adds it to the noise)
        return {
            "igate.weight": ParamSpec((heads, gate_in), scale=1.0 / np.sqrt(gate_in)),
            "igate.bias": ParamSpec((heads,), std=0.1, scale=1.0),
            "fgate.weight": ParamSpec((heads, gate_in), scale=1.0 / np.sqrt(gate_in)),
            "fgate.bias": ParamSpec((heads,), mean=forget_bias, scale=1.0),
        } | prefixed("outnorm.", self.outnorm.param_spec())

    def __call__(self, params, q, k, v, state=None):
        """Run the cell over a sequence.

        Args:
            q, k, v: [B, T, D] (k unscaled).
            state: (memory [B, H, P, P], normalizer [B, H, P], stabilizer [B, H]) after a prefix, or
                None for an empty memory (m_0 = −∞, see the module docstring).

        Returns:
            GN(h̃) [B, T, D] and the final (memory, normalizer, stabilizer).
        """
        config = self.config
        batch, length, _ = q.shape
        heads, head_dim = config.num_heads, config.head_dim
        gate_in = anp.concatenate([q, k, v], axis=-1)  # [B, T, 3D]
        igate = gate_in @ params["igate.weight"].T + params["igate.bias"]  # ĩ, [B, T, H]
        log_fgate = _log_sigmoid(gate_in @ params["fgate.weight"].T + params["fgate.bias"])  # [B, T, H]
        shape = (batch, length, heads, head_dim)
        q = anp.reshape(q, shape)
        k = anp.reshape(k, shape) / np.sqrt(head_dim)
        v = anp.reshape(v, shape)
        memory, normalizer, stabilizer = (None, None, None) if state is None else state
        outputs = []
        for t in range(length):
            write = k[:, t, :, :, None] * v[:, t, :, None, :]  # k_t v_tᵀ, [B, H, P, P]
            if stabilizer is None:  # empty memory: m_1 = ĩ_1, f'_1 = 0
                stabilizer = igate[:, t]
                input_act = anp.exp(igate[:, t] - stabilizer)  # = 1
                memory = input_act[..., None, None] * write
                normalizer = input_act[..., None] * k[:, t]
            else:
                new_stabilizer = anp.maximum(log_fgate[:, t] + stabilizer, igate[:, t])  # m_t, [B, H]
                forget_act = anp.exp(log_fgate[:, t] + stabilizer - new_stabilizer)  # f'_t
                input_act = anp.exp(igate[:, t] - new_stabilizer)  # i'_t
                memory = forget_act[..., None, None] * memory + input_act[..., None, None] * write
                normalizer = forget_act[..., None] * normalizer + input_act[..., None] * k[:, t]
                stabilizer = new_stabilizer
            read = read_memory(config, memory)  # R(C_t), never written back
            numerator = anp.sum(q[:, t, :, :, None] * read, axis=-2)  # q_tᵀ R(C_t), [B, H, P]
            qn = anp.sum(q[:, t] * normalizer, axis=-1)  # q_tᵀ n_t, [B, H]
            denominator = anp.maximum(anp.abs(qn), anp.exp(-stabilizer)) + MLSTM_CELL_EPS
            outputs.append(numerator / denominator[..., None])
        hidden = anp.stack(outputs, axis=1)  # h̃, [B, T, H, P]
        return self.outnorm(sub_params(params, "outnorm."), hidden), (memory, normalizer, stabilizer)


class MLSTMLayer:
    """xlstm's mLSTMLayer: up-projection, conv, q/k/v, cell, skip, output gate, down-projection."""

    def __init__(self, config):
        self.config = config
        inner, width = config.inner_dim, config.embedding_dim
        small = np.sqrt(2.0 / (5.0 * width))  # xlstm's small init uses the model width for q/k/v too
        self.q_proj = HeadwiseLinear(inner, config.qkv_proj_blocksize, small)
        self.k_proj = HeadwiseLinear(inner, config.qkv_proj_blocksize, small)
        self.v_proj = HeadwiseLinear(inner, config.qkv_proj_blocksize, small)
        self.conv1d = CausalConv1d(inner, config.conv1d_kernel_size)
        self.mlstm_cell = MLSTMCell(config)

    def param_spec(self):
        config = self.config
        inner, width = config.inner_dim, config.embedding_dim
        return ({"proj_up.weight": ParamSpec((2 * inner, width), std=np.sqrt(2.0 / (5.0 * width)))}
                | prefixed("q_proj.", self.q_proj.param_spec())
                | prefixed("k_proj.", self.k_proj.param_spec())
                | prefixed("v_proj.", self.v_proj.param_spec())
                | prefixed("conv1d.", self.conv1d.param_spec())
                | prefixed("mlstm_cell.", self.mlstm_cell.param_spec())
                | {"learnable_skip": ParamSpec((inner,), mean=1.0, scale=0.3),
                   "proj_down.weight": ParamSpec((width, inner), std=2.0 / np.sqrt(width))})

    def __call__(self, params, x, state=None):
        """``x: [B, T, d]``, ``state``: MLSTMState or None -> (y ``[B, T, d]``, MLSTMState)."""
        inner = self.config.inner_dim
        up = x @ params["proj_up.weight"].T  # [B, T, 2D]
        branch, gate = up[..., :inner], up[..., inner:]  # x_t, z_t
        history, cell_state = (None, None) if state is None else (state[0], tuple(state[1:]))
        conv, history = self.conv1d(sub_params(params, "conv1d."), branch, history)
        conv_act = _silu(conv)  # c_t
        q = self.q_proj(sub_params(params, "q_proj."), conv_act)
        k = self.k_proj(sub_params(params, "k_proj."), conv_act)
        v = self.v_proj(sub_params(params, "v_proj."), branch)
        hidden, cell_state = self.mlstm_cell(sub_params(params, "mlstm_cell."), q, k, v, cell_state)
        out = (hidden + params["learnable_skip"] * conv_act) * _silu(gate)
        return out @ params["proj_down.weight"].T, MLSTMState(history, *cell_state)


class MLSTM(SpecModel):
    """Reference mLSTM LM. Functions of a parameter dict (see the module docstring)."""

    def __init__(self, config=None, **fields):
        self.config = config = model_config(MLSTMConfig, config, fields)
        self.norm = LayerNorm(config.embedding_dim)
        self.layer = MLSTMLayer(config)
        self.post_norm = LayerNorm(config.embedding_dim)

    def param_spec(self):
        """``{key: ParamSpec}`` with the keys and shapes of the torch ``state_dict``."""
        vocab, width = self.config.vocab_size, self.config.embedding_dim
        small = np.sqrt(2.0 / (5.0 * width))
        return ({"embedding.weight": ParamSpec((vocab, width), std=small, scale=1.0)}
                | prefixed("norm.", self.norm.param_spec())
                | prefixed("layer.", self.layer.param_spec())
                | prefixed("post_norm.", self.post_norm.param_spec())
                | {"head.weight": ParamSpec((vocab, width), std=small),
                   "head.bias": ParamSpec((vocab,), scale=0.1)})

    def forward(self, params, tokens, cache=None):
        """Run the model over a batch of sequences.

        Args:
            params: parameter dict (see ``param_spec``).
            tokens: [B, T] integer ids in [0, V).
            cache: the ``MLSTMCache`` an earlier call returned (default: the start of a sequence).

        Returns:
            logits [B, T, V] and the ``MLSTMCache`` after the last token.
        """
        tokens = check_tokens(tokens, self.config.vocab_size)
        state, position = None, 0
        if cache is not None:
            state, position = check_cache(cache, MLSTMCache)
            state = check_mlstm_state(self.config, state, tokens.shape[0])
        embedded = params["embedding.weight"][tokens]  # [B, T, d]
        update, state = self.layer(sub_params(params, "layer."), self.norm(sub_params(params, "norm."), embedded),
                                   state)
        hidden = self.post_norm(sub_params(params, "post_norm."), embedded + update)
        return hidden @ params["head.weight"].T + params["head.bias"], MLSTMCache(state, position + tokens.shape[1])
