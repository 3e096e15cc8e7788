"""Group-state RNN language model (docs/design.md, Models), the reference: one plain loop over time.

For tokens x_1..x_T with embeddings e_t = E[x_t] ∈ ℝ^F and a learnable H_0 ∈ G:

    c_t = W e_t + U features(H_{t-1}) + b         coordinates of A_t in g, c_t ∈ ℝ^{dim g}
    c_t ← mix(c_t)                                tangent-space mixing (reference.mixing)
    c_t ← θ·tanh(c_t/θ)                           only with ``update_bound = θ`` (elementwise)
    H_t = H_{t-1} · exp(hat(c_t))                 stays on G
    logits_t = readout(H_t)

With ``forget`` (``GroupRNNConfig``) the previous state is first contracted toward the identity,
H_{t-1} ← polar((1 − α_t)·H_{t-1} + α_t·I), so that old input fades (``GroupRNNCell.forget``).

This is the paper's template A_t = Π(W̃ e_t + Ũ H_{t-1} + b̃) with ambient maps W̃, Ũ, b̃: Π is
linear and onto g, so Π∘W̃ ranges over all linear maps into g; parametrizing W, U, b straight into
the coordinates of g gives the same function class without the parameters Π would discard.
``recurrent=False`` drops the U term (the update is then input-driven). ``reproject_every=k``
replaces H_t by nearest(H_t) when the global step index t is a multiple of k; the correction is
of the order of rounding error, and its gradient is taken as the identity (straight-through).
Both live in the cell (``GroupRNNCell.__call__`` runs the loop, ``reproject`` the correction), as
in the torch tree. ``config.recurrence`` / ``keep_state_every`` choose how torch runs the loop;
the reference has this one loop.

``GroupRNNLayer`` is the cell alone as a sequence layer: inputs x_t ∈ ℝ^F in place of the
embeddings, outputs features(H_t) and the final state (the torch ``GroupRNNLayer``, a drop-in for
``torch.nn.LSTM``).

``features(H)`` (docs/design.md (Models), ``group.features``) stacks the real and, on the complex groups, imaginary
parts of the entries of H the group allows to be non-zero: all n² on the dense groups, the n
diagonal entries of T, the k·b² block entries of BO; a map of all n² entries would only add
weights on entries that are zero on G.

Parameters (keys and shapes = the torch ``state_dict``; m = group.num_features):
    embedding.weight        [V, F]
    cell.initial_state      [n, n]       group-valued H_0 (identity at init)
    cell.input_map.weight   [dim g, F]   W
    cell.input_map.bias     [dim g]      b
    cell.state_map.weight   [dim g, m]   U (recurrent only)
    cell.forget_gate.weight [1, dim g + m]   w (forget = gate only)
    cell.forget_gate.bias   [1]          b (forget = gate only)
    cell.mixing.*                        see reference.mixing
    cell_l1.*, cell_l2.*, …              the same for the layers above (``num_layers`` > 1), each
                                         driven by features(H_t) of the layer below: F = m
    readout.*                            see reference.readouts

``config.input_init = "spread"`` (``GroupRNN.init_params``): after the default draws, token v's
update c_v = W e_v + b is set to the coordinates of ``spread_updates`` (rotation angles uniform in
[0, π]) by ``fit_input_map`` (exact when F ≥ V or dim g ≤ F); at init the mixing is the identity
and nothing scales W e + b on its way to exp (``drive_scale`` is an init scale, 1 on the compact
groups ``spread`` allows; the map learning rates of ``reference.config.map_lr_scales`` act on the
optimizer only), so A_v = hat(c_v) on the input-driven model (the recurrent model adds its U term).
"""

from __future__ import annotations

from typing import NamedTuple

import autograd.numpy as anp
import numpy as np
from autograd.tracer import getval

from reference.checks import check_cache
from reference.config import (GroupRNNConfig, forget_steps, layer_prefixes, model_config, rnn_layer_config,
                              rnn_layer_repr, upper_layer_config)
from reference.groups import get_group
from reference.linalg import dagger, polar_newton_schulz
from reference.mixing import TangentMixing
from reference.params import ParamSpec, SpecModel, prefixed, sub_params
from reference.readouts import READOUTS
from reference.validation import check_state, check_tokens


RECURRENT_GAIN = 0.05  # initial scale of U relative to W (see GroupRNNCell.param_spec)
FORGET_GATE_BIAS = -4.0  # the forget gate's initial bias: α_t starts at forget_alpha·σ(−4), near 0


def drive_scale(group):
    """Scale of the cell's input and state maps: 1 on compact groups, 0.1 on GL."""
    return 1.0 if group.is_compact else 0.1


def _plane_rotations(angles, size):
    """⊕_i θ_i J in the planes (2i, 2i+1) of a size×size matrix, J = [[0, −1], [1, 0]] (a zero last
    row and column for odd size): ``angles [..., size // 2] -> [..., size, size]``."""
    planes = np.zeros(angles.shape[:-1] + (size, size))
    i = np.arange(angles.shape[-1])
    planes[..., 2 * i + 1, 2 * i], planes[..., 2 * i, 2 * i + 1] = angles, -angles
    return planes


def spread_updates(group, count, generator):
    """Algebra coordinates of ``count`` updates whose rotation angles are drawn uniformly in [0, π].

    Real groups, in blocks of size b (O, SO: one block, b = n; BO: its n/b blocks): per update and
    block ⌊b/2⌋ angles θ_i ~ U[0, π] and a Haar frame Q ∈ O(b),

        a = Q (⊕_i θ_i J) Qᵀ,  J = [[0, −1], [1, 0]],     exp(a) has eigenvalues e^{±iθ_i} (1 for odd b),

    its coordinates taken by O(b)'s ``vee`` block by block (BO's order; O(n)'s basis is SO(n)'s).
    U: n phases θ ~ U[0, π], a = Q i·diag(θ) Qᴴ with Haar Q ∈ U(n), exp(a) has eigenvalues e^{iθ}.
    SU: ⌊n/2⌋ angles, phases (θ, −θ, and 0 for odd n) so that tr a = 0. T: a = i·diag(θ), whose
    coordinates are θ (T's basis is i·E_kk; its ``vee`` would build n³ numbers). Draws the angles,
    then the frames, from ``generator``.

    Args:
        group: a compact ``reference.groups`` group.
        count: number of updates (the vocabulary size V).
        generator: ``numpy.random.Generator``.

    Returns:
        coordinates ``[count, dim g]`` and the angles ``[count, m]``: m = (n/b)·⌊b/2⌋ real, n on U
        and T, ⌊n/2⌋ on SU.

    Raises:
        ValueError: ``group`` is not compact.
    """
    if not group.is_compact:
        raise ValueError(f"spread_updates needs a compact group, got {group!r}")
    n = group.n
    if not group.is_complex:
        size = getattr(group, "block", n)
        frame_group = get_group("O", size)
        angles = generator.uniform(0.0, np.pi, (count, n // size, size // 2))
        frames = frame_group.random((count, n // size), generator=generator)
        algebra = frames @ _plane_rotations(angles, size) @ np.swapaxes(frames, -1, -2)
        return frame_group.vee(algebra).reshape(count, group.dim), angles.reshape(count, -1)
    angles = generator.uniform(0.0, np.pi, (count, n // 2 if group.name == "SU" else n))
    if group.name == "T":
        return angles, angles
    phases = angles if group.name == "U" else np.concatenate([angles, -angles, np.zeros((count, n % 2))], axis=-1)
    frames = get_group("U", n).random((count,), generator=generator)
    return group.vee((frames * (1j * phases)[..., None, :]) @ dagger(frames)), angles


def fit_input_map(embedding, weight, targets):
    """Embedding E and input map W with W e_v = c_v for every token v, where that is possible.

    F ≥ V: the embeddings (rows of E, generic) are independent, and W = Cᵀ (E⁺)ᵀ is the
    minimum-norm exact solution, E kept. F < V: W E has rank ≤ m = min(F, V, dim g), so both are
    set from the best rank-m approximation of C = L diag(s) Rᵀ (Eckart–Young; exact when
    dim g ≤ F), balanced in a frame P ∈ ℝ^{F×m} of W's row space (orthonormal columns, from the QR
    of Wᵀ):

        W = α R_m diag(√s_m) Pᵀ        E = L_m diag(√s_m) Pᵀ / α + E (I − P Pᵀ)

    α² = Σ s_m / (V m) gives the fitted part of E the default's mean square (N(0, 1) entries, V·m
    in m directions) and W the singular values α√s, so neither factor inherits a condition number
    worse than √cond(C) (keeping the default W, whose smallest singular value can be near 0 when
    F ≈ dim g, and solving E = C (W⁺)ᵀ gave S5's SO(8) arm embeddings of norm 3,000). E keeps its
    default draw outside P, which W does not read. With dim g > F (A5 in the state-tracking preset)
    the fit is the rank-F least-squares one, not exact.

    Args:
        embedding: ``[V, F]`` E.
        weight: ``[dim g, F]`` W.
        targets: ``[V, dim g]`` C, the coordinates c_v.

    Returns:
        (embedding ``[V, F]``, weight ``[dim g, F]``).
    """
    vocab, features = embedding.shape
    if features >= vocab:
        return embedding, (np.linalg.pinv(embedding) @ targets).T
    left, values, right = np.linalg.svd(targets, full_matrices=False)  # [V, k], [k], [k, dim g]
    rank = min(features, len(values))
    frame = np.linalg.qr(weight.T)[0][:, :rank]  # [F, m]
    root, scale = np.sqrt(values[:rank]), np.sqrt(np.sum(values[:rank]) / (vocab * rank))
    fitted = (left[:, :rank] * root / scale) @ frame.T + embedding - (embedding @ frame) @ frame.T
    return fitted, (scale * right[:rank].T * root) @ frame.T


class GroupRNNCell:
    """H_t = H_{t-1} · exp(hat(bound(mix(W e_t + U features(H_{t-1}) + b))))."""

    def __init__(self, config, group, input_norm_sq=None):
        """``input_norm_sq``: ‖x_t‖² of the cell's inputs at init, which sets W's scale: F (the
        default) for N(0, 1) embeddings, n for features(H) of the layer below (``upper_layer_config``)."""
        self.config, self.group = config, group
        self.input_norm_sq = config.embedding_dim if input_norm_sq is None else input_norm_sq
        self.mixing = TangentMixing(config.mixing, group.dim, config.mixing_rank)

    def param_spec(self):
        """W is scaled so that ‖W x_t‖ ≈ 1 at init (``input_norm_sq``); U starts RECURRENT_GAIN times smaller.

        The group product alone is an isometry of the state, but the U term makes the Jacobian
        ∂H_t/∂H_{t-1} expansive: with U at the scale of W (‖realvec(H)‖² = n on the compact
        groups) gradients grow about 1e10-fold over 200 steps; at gain 0.05 they stay O(1) over
        2,000 (test_stability). Parity draws (``scale``) use the full scale to exercise the term.
        GL's state norm is unbounded and U feeds it back, so there the whole drive is ten times
        smaller (``drive_scale``): exp(A_t) starts close to the identity.
        """
        n, dim, features = self.group.n, self.group.dim, self.config.embedding_dim
        drive = drive_scale(self.group)
        spec = {
            "initial_state": ParamSpec((n, n), group=self.group),
            "input_map.weight": ParamSpec((dim, features), std=drive / np.sqrt(self.input_norm_sq * dim)),
            "input_map.bias": ParamSpec((dim,), scale=0.1 * drive),
        }
        if self.config.recurrent:
            full = drive / np.sqrt(n * dim)
            spec["state_map.weight"] = ParamSpec((dim, self.group.num_features), std=RECURRENT_GAIN * full, scale=full)
        if self.config.forget == "gate":  # σ(b) ≈ 0.018 at init: close to the paper's update
            inputs = dim + self.group.num_features
            spec["forget_gate.weight"] = ParamSpec((1, inputs), std=0.1 / np.sqrt(inputs), scale=1 / np.sqrt(inputs))
            spec["forget_gate.bias"] = ParamSpec((1,), mean=FORGET_GATE_BIAS, scale=1.0)
        return spec | prefixed("mixing.", self.mixing.param_spec())

    def features(self, state):
        """``[..., n, n] -> [..., m]``: what U reads of the state (the one place that says so)."""
        return self.group.features(state)

    def coordinates(self, params, state, drive):
        """c_t = d_t + U features(H_{t-1}) ``[B, dim]`` (before mixing), from the drive d_t = W e_t + b."""
        if not self.config.recurrent:
            return drive
        return drive + self.features(state) @ params["state_map.weight"].T

    def bound(self, mixed):
        """θ·tanh(m/θ) elementwise with ``update_bound = θ`` (every |coordinate| < θ), m itself
        without: ``[..., dim] -> [..., dim]``, from the mixed coordinates to those of A_t."""
        theta = self.config.update_bound
        return mixed if theta is None else theta * anp.tanh(mixed / theta)

    def update(self, mixed):
        """exp(A_t) = exp(hat(bound(m_t))) ``[..., n, n]`` from the mixed coordinates m_t ``[..., dim]``."""
        return self.group.exp(self.group.hat(self.bound(mixed)))

    def forget_rate(self, params, state, drive):
        """α_t: ``forget_alpha`` (``constant``), or forget_alpha·σ(w·[d_t, features(H_{t−1})] + b)
        ``[B, 1, 1]`` (``gate``)."""
        alpha = self.config.forget_alpha
        if self.config.forget == "constant":
            return alpha
        inputs = anp.concatenate([drive, self.features(state)], axis=-1)  # [B, dim + m]
        gate = inputs @ params["forget_gate.weight"].T + params["forget_gate.bias"]  # [B, 1]
        return (alpha / (1 + anp.exp(-gate)))[..., None]

    def forget(self, params, state, drive):
        """polar((1 − α_t)·H_{t−1} + α_t·I) ``[B, n, n]``, the previous state contracted toward the
        identity and put back on the group (``GroupRNNConfig.forget``); H_{t−1} itself without."""
        if self.config.forget == "none":
            return state
        alpha = self.forget_rate(params, state, drive)
        blend = (1 - alpha) * state + alpha * np.eye(self.group.n)
        return polar_newton_schulz(blend, forget_steps(self.config.forget_alpha))

    def step(self, params, state, drive):
        """One update. ``state: [B, n, n]``, ``drive: [B, dim]`` (d_t) -> next state ``[B, n, n]``."""
        c = self.mixing(sub_params(params, "mixing."), self.coordinates(params, state, drive))
        return self.group.mul(self.forget(params, state, drive), self.update(c))

    def reproject(self, state, index):
        """nearest(H_t) with an identity gradient (straight-through) if k divides the step index
        ``index`` (``reproject_every = k``); H_t otherwise."""
        every = self.config.reproject_every
        if every is None or index % every:
            return state
        return state + (self.group.nearest(getval(state)) - getval(state))

    def truncate(self, state, index):
        """H_t without the gradient of the steps after it (as the next step's input) if k divides
        the step index ``index`` (``truncate_every = k``); H_t otherwise."""
        every = self.config.truncate_every
        return state if every is None or index % every else getval(state)

    def settle(self, state):
        """The state a call returns: ``group.settle(H_T)`` (back on the group if rounding has taken
        it past half the membership tolerance, else H_T itself) with an identity gradient."""
        return state + (self.group.settle(getval(state)) - getval(state))

    def __call__(self, params, embedded, state, position=0):
        """``embedded: [B, T, F]``, ``state: [B, n, n]`` (H_0) -> states ``[B, T, n, n]`` (H_1..H_T);
        ``position``: global index of the first step (for ``reproject`` and ``truncate``)."""
        drive = embedded @ params["input_map.weight"].T + params["input_map.bias"]  # d_t, [B, T, dim]
        states = []
        for t in range(embedded.shape[1]):
            state = self.reproject(self.step(params, state, drive[:, t]), position + t + 1)
            states.append(state)
            state = self.truncate(state, position + t + 1)
        return anp.stack(states, axis=1)


class GroupRNNCache(NamedTuple):
    """What ``GroupRNN.forward`` needs to continue a sequence, and the states of the call that made it.

    Attributes:
        state: [B, n, n] H_p, the state after the first p tokens ([L, B, n, n], every layer's,
            with ``num_layers = L > 1``).
        position: p, the global index of the next token (counts tokens from 0; it decides when
            ``reproject_every`` re-projects).
        packed_states: [B, T, *packed] H_{p−T+1}..H_p in the group's packed form (``Group.pack``:
            ``[L, B, T, *packed]`` with L > 1 layers;
            T's diagonal, BO's blocks, the matrix itself for dense groups), every state of the
            call that returned this cache; ``forward`` does not read it, so a cache built by hand
            may leave it None.
        group: the group that unpacks them.

    ``states`` ([B, T, n, n], drift measurements, the parity check that every state lies on G)
    unpacks ``packed_states`` when it is read: for the structured groups the dense matrices are
    mostly zeros, and training never needs them.
    """

    state: object
    position: int
    packed_states: object = None
    group: object = None

    @property
    def states(self):
        """[B, T, n, n] every state of the call that returned this cache, or None."""
        return None if self.packed_states is None else self.group.unpack(self.packed_states)


class _Layers:
    """The cells of a group RNN's ``num_layers`` layers, bottom first, under the keys of
    ``layer_prefixes`` (``cell.``, ``cell_l1.``, …), and one call through them: layer ℓ + 1 is
    driven by features(H_t^ℓ). With one layer the state is ``[B, n, n]``, else ``[L, B, n, n]``."""

    def _build_layers(self, config, group):
        self.prefixes = layer_prefixes(config)
        upper = upper_layer_config(config)
        self._cells = [GroupRNNCell(config, group)] + [GroupRNNCell(upper, group, input_norm_sq=group.n)
                                                       for _ in self.prefixes[1:]]
        self.cell = self._cells[0]

    @property
    def cells(self):
        """The layers' cells, bottom first."""
        return list(self._cells)

    def _layers_spec(self):
        spec = {}
        for prefix, cell in zip(self.prefixes, self.cells):
            spec |= prefixed(prefix, cell.param_spec())
        return spec

    def _initial_states(self, params, batch):
        """H_0 of every layer, ``[B, n, n]`` each."""
        return [anp.repeat(params[prefix + "initial_state"][None], batch, axis=0) for prefix in self.prefixes]

    def _given_states(self, state, batch):
        """A state passed in, checked (``[B, n, n]``, or ``[L, B, n, n]``), as one ``[B, n, n]`` per layer."""
        layers = len(self.cells)
        check_state(self.group, getval(state), batch, None if layers == 1 else layers)
        return [state] if layers == 1 else [state[layer] for layer in range(layers)]

    def _run_layers(self, params, inputs, states, position=0):
        """``inputs: [B, T, F]``, one H_0 ``[B, n, n]`` per layer -> every layer's states ``[B, T, n, n]``."""
        runs = []
        for prefix, cell, state in zip(self.prefixes, self.cells, states):
            runs.append(cell(sub_params(params, prefix), inputs, state, position))
            inputs = cell.features(runs[-1])
        return runs

    def _joined(self, per_layer):
        """One array of the layers' arrays: itself for one layer, stacked first for more."""
        return per_layer[0] if len(per_layer) == 1 else anp.stack(per_layer)

    def _final_state(self, runs):
        """The settled last state of every layer (``GroupRNNCell.settle``), joined."""
        return self._joined([cell.settle(states[:, -1]) for cell, states in zip(self.cells, runs)])


class GroupRNN(_Layers, SpecModel):
    """Reference group-state RNN LM. Functions of a parameter dict (see the module docstring)."""

    def __init__(self, config=None, **fields):
        self.config = config = model_config(GroupRNNConfig, config, fields)
        self.group = get_group(config.group, config.n, config.block)
        self._build_layers(config, self.group)
        self.readout = READOUTS[config.readout](self.group, config.vocab_size)

    def param_spec(self):
        """``{key: ParamSpec}`` in state_dict order."""
        config = self.config
        return ({"embedding.weight": ParamSpec((config.vocab_size, config.embedding_dim), std=1.0)}
                | self._layers_spec()
                | prefixed("readout.", self.readout.param_spec()))

    def init_params(self, generator):
        """Initial parameters from a ``numpy.random.Generator``: ``param_spec``'s draws; then, with
        ``input_init = "spread"``, from the same generator, W, b = 0 and (where needed) E fitted to
        ``spread_updates`` (module docstring)."""
        params = super().init_params(generator)
        if self.config.input_init == "spread":
            targets, _ = spread_updates(self.group, self.config.vocab_size, generator)
            params["embedding.weight"], params["cell.input_map.weight"] = fit_input_map(
                params["embedding.weight"], params["cell.input_map.weight"], targets)
            params["cell.input_map.bias"] = np.zeros_like(params["cell.input_map.bias"])
        return params

    def forward(self, params, tokens, cache=None):
        """Run the model over a batch of sequences.

        Args:
            params: parameter dict (see ``param_spec``).
            tokens: [B, T] integer ids in [0, V).
            cache: the ``GroupRNNCache`` an earlier call returned (continue after its tokens), or
                one built by hand with a state on G and a position; None: start at H_0, position 0.

        Returns:
            logits [B, T, V] (read from the top layer) and ``GroupRNNCache(H_{p+T}, p + T, packed
            states H_{p+1}..H_{p+T}, group)`` (its ``states`` unpacks them to [B, T, n, n]; with
            L > 1 layers, every layer's: [L, B, n, n] and [L, B, T, n, n]).
        """
        tokens = check_tokens(tokens, self.config.vocab_size)
        batch = tokens.shape[0]
        if cache is None:
            states, position = self._initial_states(params, batch), 0
        else:
            cache = check_cache(cache, GroupRNNCache)
            states, position = self._given_states(cache.state, batch), cache.position
        embedded = params["embedding.weight"][tokens]  # [B, T, F]
        runs = self._run_layers(params, embedded, states, position)  # L × [B, T, n, n]
        packed = self._joined([self.group.pack(states) for states in runs])
        cache = GroupRNNCache(self._final_state(runs), position + tokens.shape[1], packed, self.group)
        return self.readout(sub_params(params, "readout."), runs[-1]), cache


class GroupRNNLayer(_Layers, SpecModel):
    """The group RNN cell as a sequence layer (mirror of the torch ``GroupRNNLayer``).

    For inputs x_1..x_T ∈ ℝ^F (``input_size`` F): H_t = H_{t-1} · exp(hat(bound(mix(W x_t +
    U features(H_{t-1}) + b)))) as in ``GroupRNNCell``; the outputs are y_t = features(H_t) ∈ ℝ^m
    (m = ``output_size``), and the final state ``GroupRNNCell.settle(H_T)``. With ``num_layers``
    L > 1, layer ℓ + 1 reads features(H_t^ℓ), the outputs are the top layer's and the state is
    ``[L, B, n, n]``.

    Rounding: in float32 each factor's distance from the group grows with the rotation (about
    2e-7 at ‖c‖ ≈ 0.3, 4e-6 at ‖c‖ ≈ 30, 5e-5 at ‖c‖ ≈ 300), and the states of one call add up
    those of their factors. The returned state is settled (moved back onto the group once past
    half the membership tolerance), so passing it back is always accepted; ``reproject_every``
    bounds the drift of the states inside a call. Over long sequences the recurrent term's
    gradient grows like e^{λT}; the torch layer's docstring gives the safe range and the remedy
    (``truncate_every``).

    Parameters: the cells', under ``cell.``, ``cell_l1.``, … (see the module docstring).
    """

    def __init__(self, input_size, group, n, block=None, recurrent=True, reproject_every=None, mixing="none",
                 mixing_rank=None, batch_first=False, recurrence="fused", keep_state_every=None,
                 truncate_every=None, update_bound=None, forget="none", forget_alpha=None, num_layers=1):
        self.config = rnn_layer_config(input_size, group, n, block=block, recurrent=recurrent,
                                       reproject_every=reproject_every, mixing=mixing, mixing_rank=mixing_rank,
                                       recurrence=recurrence, keep_state_every=keep_state_every,
                                       truncate_every=truncate_every, update_bound=update_bound,
                                       forget=forget, forget_alpha=forget_alpha, num_layers=num_layers)
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first must be a bool, got {type(batch_first).__name__}")
        self.batch_first = batch_first
        self.group = get_group(group, n, block)
        self._build_layers(self.config, self.group)

    @property
    def input_size(self):
        return self.config.embedding_dim

    @property
    def output_size(self):
        """m: the length of each output y_t."""
        return self.config.state_features

    def __repr__(self):
        return f"GroupRNNLayer({rnn_layer_repr(self.config, self.batch_first)})"

    def param_spec(self):
        return self._layers_spec()

    def forward(self, params, input, state=None):
        """``input: [T, B, F]`` (``[B, T, F]`` if batch_first), ``state: [B, n, n]`` (``[L, B, n, n]``
        with L > 1 layers; default H_0) -> (outputs ``[T, B, m]`` (``[B, T, m]``), final state of the
        same shape as ``state``). ``recurrence`` and ``keep_state_every`` choose how torch runs the
        loop; here there is one."""
        if np.ndim(input) != 3 or np.shape(input)[-1] != self.input_size or 0 in np.shape(input):
            raise ValueError(f"input must have shape [T, B, {self.input_size}] with T, B ≥ 1, got {np.shape(input)}")
        inputs = input if self.batch_first else anp.swapaxes(input, 0, 1)  # [B, T, F]
        batch = inputs.shape[0]
        states = self._initial_states(params, batch) if state is None else self._given_states(state, batch)
        runs = self._run_layers(params, inputs, states)  # L × [B, T, n, n]
        outputs = self.cells[-1].features(runs[-1])
        return (outputs if self.batch_first else anp.swapaxes(outputs, 0, 1)), self._final_state(runs)
