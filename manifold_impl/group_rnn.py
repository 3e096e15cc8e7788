"""Group-state RNN language model in torch; mirror of ``reference/group_rnn.py`` (math there).

Batched over sequences; runs on any device, in float32 or float64 (given at construction or by a
cast, ``manifolds.GroupModule``). The input drive d_t = W e_t + b is one matmul for all t; the loop
over time then runs one of three ways (``config.recurrence``), each one function of (cell, drive,
H_0, position), all computing the same states:

- ``fused`` (default, ``_fused``): the whole loop is one autograd node (``_FusedRecurrence``) whose
  forward builds no graph and whose backward is one reverse loop of written-out step VJPs, with U's
  gradient as one product over all steps; ``keep_state_every=k`` rebuilds the states in reverse
  instead of keeping them.
- ``loop`` (``_loop``): autograd through every step; the plain path the others are tested against.
- ``scan`` (``_scan``, input-driven only): the exponentials of all steps in one batched call and the
  running products H_0 U_1 ⋯ U_t by an associative scan (⌈log₂ T⌉ batched products).

All three run on the packed state (``group.pack``; reference/groups.py): T's recurrence is
elementwise on its diagonal ``[B, n]``, BO's runs on its ``[B, k, b, b]`` blocks, the dense groups on
their n×n matrices; ``GroupRNNCell._packed_states`` returns the packed states, ``forward`` unpacks them.

Re-projection (``reproject_every``) is ``GroupRNNCell.reproject``, called after every step by the
loop and by the fused forward, as in the reference cell.

``config.input_init = "spread"``: ``GroupRNN.reset_parameters`` fits W, b and E to
``spread_updates`` after the default draws, from the same generator (math in the reference).
"""

from __future__ import annotations

import math
import types
from typing import NamedTuple

import torch
from torch import nn

from manifold_impl.draws import drawing_device, normal_
from manifold_impl.groups import get_group
from manifold_impl.linalg import _DEVICE_SQUARINGS, _fixed_count, dagger, polar_newton_schulz
from manifold_impl.manifolds import GroupModule, check_group_state_dict, check_precision, group_parameter
from manifold_impl.mixing import TangentMixing
from manifold_impl.precision import full_precision, to_real
from manifold_impl.readouts import READOUTS
from manifold_impl.validation import check_state, check_tokens
from reference.checks import check_cache
from reference.config import (GroupRNNConfig, forget_steps, layer_prefixes, model_config, rnn_layer_config,
                              rnn_layer_repr, upper_layer_config)


RECURRENT_GAIN = 0.05  # mirror of reference.group_rnn.RECURRENT_GAIN
FORGET_GATE_BIAS = -4.0  # mirror of reference.group_rnn.FORGET_GATE_BIAS


def drive_scale(group):
    """Mirror of reference.group_rnn.drive_scale: 1 on compact groups, 0.1 on GL."""
    return 1.0 if group.is_compact else 0.1


def _plane_rotations(angles, size):
    """Mirror of the reference: ⊕_i θ_i J, ``angles [..., size // 2] -> [..., size, size]``."""
    planes = angles.new_zeros(angles.shape[:-1] + (size, size))
    i = torch.arange(angles.shape[-1], device=angles.device)
    planes[..., 2 * i + 1, 2 * i], planes[..., 2 * i, 2 * i + 1] = angles, -angles
    return planes


def spread_updates(group, count, generator=None, dtype=None, device=None):
    """Mirror of ``reference.group_rnn.spread_updates``: (coordinates ``[count, dim g]``, angles
    ``[count, m]``) in the real precision ``dtype`` (default float64), drawn from ``generator``."""
    if not group.is_compact:
        raise ValueError(f"spread_updates needs a compact group, got {group!r}")
    n, real = group.n, torch.float64 if dtype is None else dtype
    factory = {"dtype": real, "device": drawing_device(generator, device)}  # drawn there, then moved
    if not group.is_complex:
        size = getattr(group, "block", n)
        frame_group = get_group("O", size)
        angles = math.pi * torch.rand((count, n // size, size // 2), generator=generator, **factory)
        frames = frame_group.random((count, n // size), generator=generator, **factory)
        algebra = frames @ _plane_rotations(angles, size) @ frames.transpose(-1, -2)
        return frame_group.vee(algebra).reshape(count, group.dim).to(device), angles.reshape(count, -1).to(device)
    angles = math.pi * torch.rand((count, n // 2 if group.name == "SU" else n), generator=generator, **factory)
    if group.name == "T":
        return angles.to(device), angles.to(device)
    phases = angles if group.name == "U" else torch.cat([angles, -angles, angles.new_zeros(count, n % 2)], dim=-1)
    frames = get_group("U", n).random((count,), generator=generator, **factory)
    coordinates = group.vee((frames * torch.complex(torch.zeros_like(phases), phases)[..., None, :]) @ dagger(frames))
    return coordinates.to(device), angles.to(device)


def fit_input_map(embedding, weight, targets):
    """Mirror of ``reference.group_rnn.fit_input_map``: (embedding ``[V, F]``, weight ``[dim g, F]``)
    with W e_v = c_v (``targets [V, dim g]``): the minimum-norm W if F ≥ V, else the balanced
    factors of C's best rank-min(F, V, dim g) approximation in a frame of W's row space."""
    vocab, features = embedding.shape
    if features >= vocab:
        return embedding, (torch.linalg.pinv(embedding) @ targets).T
    left, values, right = torch.linalg.svd(targets, full_matrices=False)  # [V, k], [k], [k, dim g]
    rank = min(features, values.numel())
    frame = torch.linalg.qr(weight.T)[0][:, :rank]  # [F, m]
    root, scale = values[:rank].sqrt(), (values[:rank].sum() / (vocab * rank)).sqrt()
    fitted = (left[:, :rank] * root / scale) @ frame.T + embedding - (embedding @ frame) @ frame.T
    return fitted, (scale * right[:rank].T * root) @ frame.T


class GroupRNNCell(GroupModule):
    """H_t = H_{t-1} · exp(hat(bound(mix(W e_t + U features(H_{t-1}) + b))))."""

    def __init__(self, config, group, device=None, dtype=None, input_norm_sq=None):
        """``input_norm_sq``: as in the reference, ‖x_t‖² of the inputs at init (W's scale)."""
        super().__init__()
        self.config, self.group = config, group
        self.input_norm_sq = config.embedding_dim if input_norm_sq is None else input_norm_sq
        factory = {"device": device, "dtype": dtype}
        self.initial_state = group_parameter(group.identity(dtype=dtype, device=device), group)
        self.input_map = nn.Linear(config.embedding_dim, group.dim, **factory)
        self.state_map = (nn.Linear(config.state_features, group.dim, bias=False, **factory)
                          if config.recurrent else None)
        self.forget_gate = (nn.Linear(group.dim + config.state_features, 1, **factory)
                            if config.forget == "gate" else None)
        self.mixing = TangentMixing(config.mixing, group.dim, config.mixing_rank, **factory)
        self._steps = _Steps()

    def compile_steps(self, backend="inductor"):
        """Compile what the fused recurrence runs per step (``torch.compile(fullgraph=True,
        dynamic=False)`` with ``backend``: the step forward and its VJP, and the exponentials over all
        steps where the recurrence is input-driven), once for each shape; the loop over time stays
        in Python, so compiling takes the same few seconds at any sequence length (a compiled caller
        does not trace into the recurrence). Needs ``recurrence="fused"``; ``backend=None`` restores
        the eager functions. Traced, the exponential runs a fixed count of squarings
        (``_CompiledSteps``)."""
        if self.config.recurrence != "fused":
            raise ValueError(f"compile_steps compiles the fused recurrence's steps; this cell's recurrence "
                             f"is {self.config.recurrence!r}")
        self._steps = _Steps() if backend is None else _CompiledSteps(backend)
        return self

    def reset_parameters(self, generator=None):
        dim, n = self.group.dim, self.group.n
        drive = drive_scale(self.group)
        with torch.no_grad():
            self.initial_state.copy_(self.group.identity(dtype=self.input_map.weight.dtype))
        normal_(self.input_map.weight, std=drive / math.sqrt(self.input_norm_sq * dim), generator=generator)
        nn.init.zeros_(self.input_map.bias)
        if self.state_map is not None:
            normal_(self.state_map.weight, std=RECURRENT_GAIN * drive / math.sqrt(n * dim),
                            generator=generator)
        if self.forget_gate is not None:
            normal_(self.forget_gate.weight, std=0.1 / math.sqrt(self.forget_gate.in_features), generator=generator)
            nn.init.constant_(self.forget_gate.bias, FORGET_GATE_BIAS)
        self.mixing.reset_parameters(generator)

    def features(self, state):
        """``[..., n, n] -> [..., m]``: what U reads of the state (the one place that says so)."""
        return self.group.features(state)

    def coordinates(self, state, drive):
        """c_t = d_t + U features(H_{t-1}) (``drive`` d_t = W e_t + b: ``[B, dim]``) before mixing, from
        the packed state (``group.pack``; the n×n matrix itself on the dense groups)."""
        if self.state_map is None:
            return drive
        return drive + self.state_map(self.group.packed_features(state))

    def bound(self, mixed):
        """Mirror of the reference: θ·tanh(m/θ) with ``update_bound = θ``, m itself without."""
        theta = self.config.update_bound
        return mixed if theta is None else theta * torch.tanh(mixed / theta)

    def update(self, mixed):
        """Mirror of the reference on the packed form: X_t = packed_exp(bound(m_t)) ``[..., *packed]``
        from the mixed coordinates m_t ``[..., dim]``."""
        return self.group.packed_exp(self.bound(mixed))

    def forget_rate(self, state, drive):
        """Mirror of the reference: α_t, ``forget_alpha`` or ``[B, 1]`` from the gate on [d_t,
        features(H_{t−1})] (the packed state's)."""
        alpha = self.config.forget_alpha
        if self.forget_gate is None:
            return alpha
        return alpha * torch.sigmoid(self.forget_gate(torch.cat([drive, self.group.packed_features(state)], dim=-1)))

    def forget(self, state, drive):
        """Mirror of the reference on the packed state: polar((1 − α_t)·H_{t−1} + α_t·I) by the same
        Newton–Schulz steps, per block on BO and per diagonal entry on T (its packed form); the
        state itself without ``forget``."""
        if self.config.forget == "none":
            return state
        return self._polar_iterates(self._blend(state, self.forget_rate(state, drive)))[-1]

    def _blend(self, state, alpha):
        """(1 − α)·H + α·I on the packed state ``[B, *packed]`` (α a number or ``[B, 1]``)."""
        if state.dim() == 2:  # T: the diagonal, where I is a vector of ones
            return (1 - alpha) * state + alpha
        if torch.is_tensor(alpha):  # [B, 1] -> [B, 1, ..., 1] against [B, *packed]
            alpha = alpha.reshape(*alpha.shape, *[1] * (state.dim() - 2))
        return (1 - alpha) * state + alpha * torch.eye(state.shape[-1], dtype=state.dtype, device=state.device)

    def _polar_iterates(self, blend):
        """P_0 = blend, …, P_k (k = ``forget_steps(forget_alpha)``): P ← P·(3I − PᴴP)/2 per matrix
        or block, and p ← p·(3 − |p|²)/2 per diagonal entry on T; P_k is the polar factor."""
        iterates = [blend]
        for _ in range(forget_steps(self.config.forget_alpha)):
            iterates.append(_polar_step(iterates[-1]))
        return iterates

    def step(self, state, drive):
        """One update of the packed state ``[B, *packed]`` from the drive ``[B, dim]``."""
        update = self.update(self.mixing(self.coordinates(state, drive)))
        return self.group.packed_mul(self.forget(state, drive), update)

    def reproject(self, state, index):
        """Mirror of the reference: nearest(H_t), straight-through, if k divides ``index`` (on the
        packed state, through the n×n matrix: only every k-th step)."""
        every = self.config.reproject_every
        if every is None or index % every:
            return state
        group, fixed = self.group, state.detach()
        return state + (group.pack(group.nearest(group.unpack(fixed))) - fixed)

    def truncate(self, state, index):
        """Mirror of the reference: H_t detached (as the next step's input) if k divides ``index``."""
        every = self.config.truncate_every
        return state if every is None or index % every else state.detach()

    def settle(self, state):
        """Mirror of the reference: ``group.settle(H_T)`` with an identity gradient (``[B, n, n]``)."""
        fixed = state.detach()
        return state + (self.group.settle(fixed) - fixed)

    def _packed_settle(self, state):
        """``settle`` on the packed state ``[B, *packed]`` (``group.packed_settle``), identity gradient."""
        fixed = state.detach()
        return state + (self.group.packed_settle(fixed) - fixed)

    def forward(self, embedded, state, position=0):
        """``embedded: [B, T, F]``, ``state: [B, n, n]`` -> states ``[B, T, n, n]`` (H_1..H_T)."""
        return self.group.unpack(self._packed_states(embedded, self.group.pack(state), position))

    def _packed_states(self, embedded, state, position=0):
        """The recurrence on packed states: ``state: [B, *packed]`` (H_0) -> ``[B, T, *packed]``. Under
        autocast the input map W e_t + b runs in the lower precision and the recurrence in the
        parameters' (``manifold_impl.precision``)."""
        recurrence = _RECURRENCES[self.config.recurrence]
        drive = self.input_map(embedded)
        with full_precision(drive.device):
            return recurrence(self, to_real(drive, self.input_map.weight), state, position)


def _loop(cell, drive, state, position):
    """Autograd through every step. ``drive: [B, T, dim]``, packed ``state: [B, *packed]`` -> packed
    states ``[B, T, *packed]``."""
    states = []
    for t, step in enumerate(drive.unbind(dim=1)):  # unbind: slicing T times would zero-fill T gradients
        state = cell.reproject(cell.step(state, step), position + t + 1)
        states.append(state)
        state = cell.truncate(state, position + t + 1)
    return torch.stack(states, dim=1)


def _scan(cell, drive, state, position):
    """Input-driven updates U_t = exp(hat(bound(mix(d_t)))) in one call, then H_0 U_1 ⋯ U_t by a scan."""
    updates = cell.update(cell.mixing(drive))  # [B, T, *packed]
    return _prefix_products(cell.group, torch.cat([state[:, None], updates], dim=1))[:, 1:]


def _fused(cell, drive, state, position):
    """``_FusedRecurrence`` with the cell's parameters as inputs. Without gradients to compute
    (inference, ``torch.no_grad``) the same steps run as ``_loop``, which then records nothing."""
    mixing, gate = cell.mixing, cell.forget_gate
    inputs = (drive, state, None if cell.state_map is None else cell.state_map.weight,
              getattr(mixing, "step_size", None), getattr(mixing, "left", None), getattr(mixing, "right", None),
              None if gate is None else gate.weight, None if gate is None else gate.bias)
    if not (torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in inputs)):
        return _loop(cell, drive, state, position)
    if isinstance(cell._steps, _CompiledSteps):  # a compiled caller runs the loop, not its trace
        return _opaque_recurrence(cell, position, *inputs)
    return _FusedRecurrence.apply(cell, position, *inputs)


@torch.compiler.disable
def _opaque_recurrence(cell, position, *inputs):
    """``_FusedRecurrence`` where ``torch.compile`` does not trace (its steps are compiled)."""
    return _FusedRecurrence.apply(cell, position, *inputs)


_RECURRENCES = {"loop": _loop, "scan": _scan, "fused": _fused}


class _FusedRecurrence(torch.autograd.Function):
    """The loop over time as one autograd node, on packed states (``group.pack``: T's diagonal,
    BO's blocks, the n×n matrix itself on the dense groups; H below stands for the packed state).

    Forward, without a graph: c_t = coordinates(H_{t-1}, d_t), m_t = mix(c_t),
    X_t = cell.update(m_t) (= pack(exp(hat(bound(m_t))))), H_t = reproject(F_t X_t) with F_t = H_{t-1}, or
    with ``forget`` F_t = forget(H_{t-1}, d_t), the polar factor of the blend by Newton–Schulz. Only the
    update keeps intermediates (``_exponentials``: per step, or for all steps at once when the update
    does not depend on the state), those its written-out VJP needs (``_exponential_vjp``), and with
    ``forget`` the polar iterates (``_forget_vjp``: back through them, the blend and the gate). Kept for the
    backward: the states (the output itself), c_t (recurrent only), X_t and those intermediates; with
    ``keep_state_every = k`` instead only every k-th state (and the state before each re-projection,
    the last one, and c_t), the rest rebuilt below. No autograd runs inside, forward or backward.

    Backward, one reverse loop, ḡ denoting torch's gradient (∂L/∂Re + i ∂L/∂Im):
        ḡ_{H_t} += ∂L/∂H_t                  (re-projection is straight-through: the identity)
                                             (truncate_every = k, k | t: ḡ_{H_t} = ∂L/∂H_t)
        ḡ_{X_t} = H_{t-1}ᴴ ḡ_{H_t},  ḡ_{H_{t-1}} = ḡ_{H_t} X_tᴴ      (H_t = H_{t-1} X_t)
        ḡ_{m_t} = the VJP of packed_exp ∘ bound at m_t applied to ḡ_{X_t} (on the dense groups hat's
                  adjoint vee ∘ Π after the exponential's VJP; the bound's derivative last)
        ḡ_{c_t} = α ḡ_{m_t} + Q Pᵀ ḡ_{m_t}    (mix(c) = α c + P Qᵀ c)
        ḡ_{H_{t-1}} += packed_features*(Uᵀ ḡ_{c_t})  (recurrent only)
    then in one product each over all steps: ḡ_U = Σ_t ḡ_{c_t} features(H_{t-1})ᵀ, ḡ_α = Σ_t ḡ_{m_t}·c_t,
    ḡ_P = Σ_t ḡ_{m_t} (Qᵀ c_t)ᵀ, ḡ_Q = Σ_t c_t (Pᵀ ḡ_{m_t})ᵀ; ḡ_{d_t} = ḡ_{c_t}. Products go through
    ``group.packed_mul`` (the VJP of a product restricted to the group's support is the same
    restricted product: elementwise on T, per block on BO) and the packed adjoint
    (``_packed_adjoint``), not ``group.inv`` (on GL the adjoint is the transpose, not the inverse).
    With ``keep_state_every``, H_{t-1} = H_t X_tᴴ (compact groups) unless H_{t-1} is kept; U's
    gradient is then summed step by step.
    """

    @staticmethod
    def forward(ctx, cell, position, drive, state, state_weight, step_size, left, right, gate_weight, gate_bias):
        group, every, reproject = cell.group, cell.config.keep_state_every, cell.config.reproject_every
        length, recurrent, keep_graphs = drive.shape[1], state_weight is not None, every is None
        per_step = recurrent or cell.config.forget != "none"  # each step's update depends on the state
        states = state.new_empty((state.shape[0], length) + state.shape[1:])
        drive = drive.transpose(0, 1).contiguous()  # time-major [T, B, dim], as every buffer below: [t] is
        # contiguous, with the same strides at any length (what a compiled step was compiled for)
        coordinates = [] if recurrent else drive  # c_t, stacked after the loop
        batched = keep_graphs and not per_step  # every update at once (not when memory is to stay flat)
        steps = cell._steps
        updates, saved = steps.exponentials(cell, drive) if batched else ([], [])
        offsets = [0]  # recurrent, kept graphs: step t's intermediates are saved[offsets[t]:offsets[t + 1]]
        current = state.detach().contiguous()  # as every later H_t: one compiled step serves all t
        kept = {0: current}  # keep_state_every: the states the backward does not rebuild
        for t in range(length):
            if batched:
                product = group.packed_mul(current, updates[t])
            else:
                coordinates_t, update, intermediates, product = steps.forward(cell, current, drive[t])
                if recurrent:
                    coordinates.append(coordinates_t)
                if keep_graphs:
                    updates.append(update)
                    saved.extend(intermediates)
                    offsets.append(len(saved))  # how many a step keeps varies (the squarings on the CPU)
            index = position + t + 1
            if not keep_graphs and reproject is not None and index % reproject == 0:
                kept[t] = current  # H_{t+1} = nearest(H_t X_{t+1}): no exact reverse step to H_t
            current = cell.reproject(product, index)
            states[:, t] = current
            if not keep_graphs and (t + 1) % every == 0:
                kept[t + 1] = current
        kept[length] = current
        coordinates = torch.stack(coordinates) if recurrent else coordinates  # [T, B, dim]
        ctx.cell, ctx.position, ctx.length, ctx.recurrent, ctx.per_step = cell, position, length, recurrent, per_step
        ctx.kept, ctx.offsets = (None if keep_graphs else sorted(kept)), offsets
        if keep_graphs:
            saved = (states, *((updates,) if batched else updates), *saved)
        else:
            saved = (None, *(kept[k] for k in ctx.kept))
        ctx.save_for_backward(coordinates, state, state_weight, step_size, left, right, gate_weight,
                              drive if gate_weight is not None else None, *saved)
        return states

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states):
        cell, position, length, recurrent = ctx.cell, ctx.position, ctx.length, ctx.recurrent
        group, truncate = cell.group, cell.config.truncate_every
        coordinates, state, state_weight, step_size, left, right, gate_weight, gate_drive, states, *rest = (
            ctx.saved_tensors)
        rebuild = ctx.kept is not None
        if rebuild:
            kept = dict(zip(ctx.kept, rest))
        elif ctx.per_step:  # per step: X_t, then the intermediates of every step, in order
            updates, intermediates = rest[:length], rest[length:]
        else:
            updates, intermediates = rest[0], tuple(rest[1:])
        lift = _features_adjoint(state_weight, state) if recurrent else None
        adjoint, steps = _packed_adjoint(group), cell._steps
        grad_mixed, grad_coordinates = [], []  # ḡ_{m_t}, ḡ_{c_t} (recurrent) from t = T down, stacked after
        grad_updates = None if ctx.per_step or rebuild else torch.empty_like(updates)
        grad_weight = None if state_weight is None or not rebuild else torch.zeros_like(state_weight)
        gated = gate_weight is not None  # the forget gate: ḡ_z per step, its parameters' sums after the loop
        grad_gate_drive, grad_gates = [], []
        grad_state = torch.zeros_like(state)
        current = kept[length] if rebuild else None
        # H_{t-1} for every t, time-major: each [t] is contiguous, as a compiled step was compiled for
        previous_states = None if rebuild else torch.cat([state[None], states.transpose(0, 1)[:-1]])
        for t in reversed(range(length)):
            if truncate is not None and (position + t + 1) % truncate == 0:
                grad_state = grad_states[:, t].contiguous()  # truncate: H_{t+1}'s gradient from later steps dropped
            else:
                grad_state = grad_state + grad_states[:, t]
            if rebuild:  # X_t recomputed, with what its VJP needs; H_{t-1} kept or rebuilt
                update, saved = steps.exponentials(cell, coordinates[t])
                previous = kept[t] if t in kept else group.packed_mul(current, adjoint(update))
                current = previous
            else:
                update = updates[t]
                saved = tuple(intermediates[ctx.offsets[t]:ctx.offsets[t + 1]]) if ctx.per_step else None
                previous = previous_states[t]
            if grad_updates is not None:  # input-driven, kept graphs: one exponential VJP after the loop
                grad_updates[t] = group.packed_mul(adjoint(previous), grad_state)
                grad_state = group.packed_mul(grad_state, adjoint(update))
                continue
            grad_mixed_t, grad_coordinates_t, grad_state, grad_drive_t, grad_gate_t = steps.backward(
                cell, previous, update, saved, grad_state, lift, step_size, left, right,
                gate_drive[t] if gated else None, gate_weight)
            grad_mixed.append(grad_mixed_t)
            if gated:
                grad_gate_drive.append(grad_drive_t)
                grad_gates.append(grad_gate_t)
            if recurrent:
                grad_coordinates.append(grad_coordinates_t)
                if grad_weight is not None:
                    grad_weight += grad_coordinates_t.T @ group.packed_features(previous)
        if grad_updates is not None:
            grad_mixed = steps.exponential_vjp(cell, intermediates, grad_updates)
        else:
            grad_mixed = torch.stack(grad_mixed[::-1])  # [T, B, dim]
        grad_coordinates = torch.stack(grad_coordinates[::-1]) if recurrent else None
        if not recurrent:
            grad_coordinates = _mixing_vjp(grad_mixed, step_size, left, right)
        if state_weight is not None and grad_weight is None:  # one product over all steps
            previous = group.packed_features(previous_states)  # [T, B, m]
            grad_weight = grad_coordinates.flatten(0, 1).T @ previous.flatten(0, 1)
        grad_step, grad_left, grad_right = _mixing_parameter_vjp(coordinates, grad_mixed, step_size, left, right)
        grad_drive, grad_gate_weight, grad_gate_bias = grad_coordinates, None, None
        if gated:  # ḡ_d += ḡ_z w_d; ḡ_w = Σ_t ḡ_zᵀ [d_t, features(H_{t-1})], ḡ_b = Σ_t ḡ_z
            grad_gates = torch.stack(grad_gates[::-1])  # [T, B, 1]
            grad_drive = grad_drive + torch.stack(grad_gate_drive[::-1])
            inputs = torch.cat([gate_drive, group.packed_features(previous_states)], dim=-1)  # [T, B, dim + m]
            grad_gate_weight = grad_gates.flatten(0, 1).T @ inputs.flatten(0, 1)
            grad_gate_bias = grad_gates.sum((0, 1))
        return (None, None, grad_drive.transpose(0, 1), grad_state, grad_weight, grad_step, grad_left,
                grad_right, grad_gate_weight, grad_gate_bias)


def _polar_step(p):
    """One Newton–Schulz step of ``GroupRNNCell._polar_iterates``: p·(3 − |p|²)/2 on a packed diagonal
    ``[B, n]``, P·(3I − PᴴP)/2 on matrices or blocks."""
    if p.dim() == 2:
        return p * (1.5 - 0.5 * (p.conj() * p).real)
    return polar_newton_schulz(p, 1)


def _polar_step_vjp(p, grad):
    """ḡ_P of P ↦ P·M, M = (3I − PᴴP)/2, at P (``_polar_step``): ḡ M − P (S + Sᴴ)/2 with S = Pᴴ ḡ (M is
    Hermitian), four products; on a diagonal entry by entry, 3ḡ/2 − (2|p|² ḡ + p² ḡ*)/2."""
    if p.dim() == 2:
        return 1.5 * grad - 0.5 * (2 * (p.conj() * p).real * grad + p * p * grad.conj())
    ph = dagger(p)
    eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)
    inner = ph @ grad
    return grad @ (1.5 * eye - 0.5 * (ph @ p)) - 0.5 * (p @ (inner + dagger(inner)))


def _forget_vjp(cell, previous, drive, iterates, grad_forgotten, gate_weight):
    """The leaky update's VJP (``GroupRNNCell.forget``), from ḡ of F = P_k (the polar iterates of the
    blend M = (1 − α)·H + α·I): back through the k steps to ḡ_M, then ḡ_H = (1 − α) ḡ_M and, with the
    gate α = a·σ(z), z = w·[d, features(H)] + b: ḡ_α = Re⟨I − H, ḡ_M⟩, ḡ_z = ḡ_α·α(1 − α/a), which adds
    ḡ_z w to ḡ_[d, features(H)]. Returns ``(ḡ_H, ḡ_d or None, ḡ_z [B, 1] or None)``."""
    grad = grad_forgotten
    for p in reversed(iterates[:-1]):
        grad = _polar_step_vjp(p, grad)
    alpha = cell.forget_rate(previous, drive)
    if not torch.is_tensor(alpha):  # constant α
        return (1 - alpha) * grad, None, None
    shaped = alpha.reshape(*alpha.shape, *[1] * (previous.dim() - 2))
    toward = cell._blend(torch.zeros_like(previous), 1.0) - previous  # I − H, packed
    grad_alpha = (toward.conj() * grad).real.flatten(1).sum(-1, keepdim=True)  # [B, 1]
    grad_gate = grad_alpha * alpha * (1 - alpha / cell.config.forget_alpha)  # ḡ_z
    grad_inputs = grad_gate @ gate_weight  # [B, dim + m]
    dim = drive.shape[-1]
    grad_state = (1 - shaped) * grad + _features_adjoint(grad_inputs[:, dim:], previous)
    return grad_state, grad_inputs[:, :dim], grad_gate


def _exponentials(cell, mixed):
    """``(X, saved)``: X = cell.update(m) (= packed_exp(bound(m))) of mixed coordinates m, the same
    bits, and ``saved``, the tensors ``_exponential_vjp`` needs (m itself with a bound)."""
    update, saved = cell.group._packed_exp_saving(cell.bound(mixed))
    return update, (saved if cell.config.update_bound is None else (mixed, *saved))


def _exponential_vjp(cell, saved, grad_update):
    """ḡ_m: the VJP of m ↦ packed_exp(bound(m)) (``_exponentials``'s ``saved``): the group's written-out
    VJP of packed_exp (exp's, then hat's adjoint vee ∘ Π on the dense groups; elementwise or per
    block on T and BO), then the bound's θ·tanh(m/θ)′ = 1 − tanh²(m/θ), elementwise."""
    theta = cell.config.update_bound
    if theta is None:
        return cell.group._packed_exp_vjp(saved, grad_update)
    mixed, *saved = saved
    return cell.group._packed_exp_vjp(tuple(saved), grad_update) * (1 - torch.tanh(mixed / theta).square())


def _mixed_exponentials(cell, coordinates):
    """``_exponentials`` of mix(c) for coordinates c ``[..., dim]``."""
    return _exponentials(cell, cell.mixing(coordinates))


def _forward_step(cell, current, drive):
    """One step of the fused forward before re-projection: ``(c_t, X_t, saved, H_{t-1} X_t)`` for the
    packed state H_{t-1} ``[B, *packed]`` and the drive d_t ``[B, dim]`` (``saved``: X_t's, for
    ``_exponential_vjp``)."""
    coordinates = cell.coordinates(current, drive)
    update, saved = _mixed_exponentials(cell, coordinates)
    if cell.config.forget == "none":
        return coordinates, update, saved, cell.group.packed_mul(current, update)
    iterates = cell._polar_iterates(cell._blend(current, cell.forget_rate(current, drive)))
    return coordinates, update, (*saved, *iterates), cell.group.packed_mul(iterates[-1], update)


def _backward_step(cell, previous, update, saved, grad_state, lift, step_size, left, right, drive, gate_weight):
    """One reverse step of the fused backward (``_FusedRecurrence``): ``(ḡ_{m_t}, ḡ_{c_t}, ḡ_{H_{t-1}},
    ḡ_{d_t} from the gate, ḡ_{z_t})`` from ḡ_{H_t}, H_{t-1} (``previous``), X_t with its ``saved`` and
    d_t (``drive``); ḡ_{c_t} is None and the state map's share is left out where the recurrence is
    input-driven (``lift`` None); the last two are None without the gate. With ``forget``, ``saved``
    ends with the step's polar iterates P_0..P_k (``_forward_step``), which ``_forget_vjp`` reads."""
    group, adjoint = cell.group, _packed_adjoint(cell.group)
    forgetting = cell.config.forget != "none"
    if forgetting:
        count = forget_steps(cell.config.forget_alpha) + 1
        saved, iterates = saved[:-count], saved[-count:]
    forgotten = iterates[-1] if forgetting else previous
    grad_update = group.packed_mul(adjoint(forgotten), grad_state)
    grad_state = group.packed_mul(grad_state, adjoint(update))
    grad_drive = grad_gate = None
    if forgetting:
        grad_state, grad_drive, grad_gate = _forget_vjp(cell, previous, drive, iterates, grad_state, gate_weight)
    grad_mixed = _exponential_vjp(cell, saved, grad_update)
    if lift is None:
        return grad_mixed, None, grad_state, grad_drive, grad_gate
    grad_coordinates = _mixing_vjp(grad_mixed, step_size, left, right)
    return grad_mixed, grad_coordinates, grad_state + _combine(grad_coordinates, lift), grad_drive, grad_gate


def _own_code(function):
    """``function`` with a code object of its own: torch.compile keeps its compiled graphs, and counts
    them against its recompile limit, per code object, so each cell's steps get their own."""
    return types.FunctionType(function.__code__.replace(), function.__globals__, function.__name__,
                              function.__defaults__, function.__closure__)


def _flagged(function, update):
    """``function`` returning ``(its result, whether result[update] has a NaN)``, the flag computed where
    it is compiled (``_CompiledSteps``)."""

    def flagged(*args):
        result = function(*args)
        return result, torch.isnan(result[update]).any()

    return flagged


class _Steps(NamedTuple):
    """The functions the fused recurrence runs per step (``GroupRNNCell.compile_steps`` compiles them)."""

    forward: object = _forward_step
    backward: object = _backward_step
    exponentials: object = _mixed_exponentials
    exponential_vjp: object = _exponential_vjp


class _CompiledSteps:
    """``_Steps`` compiled (``torch.compile(fullgraph=True, dynamic=False)``), and the count of squarings
    a traced exponential runs (``linalg._fixed_count``; masked per matrix, so any count that suffices
    gives the same bits). On a device the fixed ``_DEVICE_SQUARINGS``, nothing read back. On the CPU,
    where a read-back costs nothing, the least count the cell's updates have needed so far: it
    starts at 0, and a step whose update comes out NaN (a matrix needed more) runs again with the
    next count (0, 1, 3, 7, 10), each traced once. A backward step runs the count its forward step
    saved; a state rebuilt in the backward pass, at least that. A NaN that more squarings do not
    remove (a diverged run) ends at 10 and stays."""

    def __init__(self, backend):
        eager = _Steps()
        self._forward, self.backward, self._exponentials, self.exponential_vjp = (
            torch.compile(_own_code(function), backend=backend, fullgraph=True, dynamic=False)
            for function in (_flagged(eager.forward, 1), eager.backward, _flagged(eager.exponentials, 0),
                             eager.exponential_vjp))
        self.squarings = 0  # the CPU's count

    def forward(self, cell, current, drive):
        return self._enough(self._forward, cell, current, drive)

    def exponentials(self, cell, coordinates):
        return self._enough(self._exponentials, cell, coordinates)

    def _enough(self, function, cell, *tensors):
        """``function(cell, *tensors)`` (flagged) with a count of squarings that sufficed."""
        if tensors[0].device.type != "cpu":
            return function(cell, *tensors)[0]
        while True:
            with _fixed_count(self.squarings):
                result, nan = function(cell, *tensors)
            if self.squarings == _DEVICE_SQUARINGS or not nan:
                return result
            self.squarings = min(2 * self.squarings + 1, _DEVICE_SQUARINGS)


def _packed_adjoint(group):
    """p ↦ pack(unpack(p)ᴴ) without an n×n matrix: the conjugate where the packed form is a diagonal
    (T: ``[..., n]``), the adjoint of each matrix where it is one matrix or a stack of blocks."""
    diagonal_form = group.pack(group.identity()).dim() == 1
    return torch.conj if diagonal_form else dagger


def _mixing_vjp(grad, step_size, left, right):
    """ḡ_c of mix(c) = α c + P Qᵀ c: α ḡ + Q Pᵀ ḡ (``grad: [..., dim]``)."""
    if step_size is None:
        return grad
    result = step_size * grad
    return result if left is None else result + (grad @ left) @ right.T


def _mixing_parameter_vjp(c, grad, step_size, left, right):
    """(ḡ_α, ḡ_P, ḡ_Q) over all steps (``c, grad: [T, B, dim]``); None where the mode has none."""
    if step_size is None:
        return None, None, None
    grad_step = (grad * c).sum()
    if left is None:
        return grad_step, None, None
    c, grad = c.flatten(0, -2), grad.flatten(0, -2)
    return grad_step, grad.T @ (c @ right), c.T @ (grad @ left)


def _features_adjoint(weight, like):
    """``[dim, *packed]``: row k is packed_features*(U_k), so Σ_k g_k packed_features*(U_k) is ḡ_p of
    g · U packed_features(p) (``like``: a packed state ``[B, *packed]``).

    packed_features reads the packed entries row-major, followed on the complex groups by their
    imaginary parts (``Group.features``, T's diagonal, BO's blocks), so its adjoint puts each row of
    U back in that shape: the real part and i times the imaginary one.
    """
    rows = weight.shape[0]
    if not like.is_complex():
        return weight.reshape((rows,) + tuple(like.shape[1:]))
    pairs = weight.reshape((rows, 2) + tuple(like.shape[1:]))
    return torch.complex(pairs[:, 0], pairs[:, 1])


def _combine(weights, matrices):
    """Σ_k weights[:, k] matrices[k]: real ``[B, dim]`` and ``[dim, *packed]`` (real or complex) ->
    ``[B, *packed]``."""
    if not matrices.is_complex():
        return (weights @ matrices.flatten(1)).unflatten(-1, matrices.shape[1:])
    pairs = weights @ torch.view_as_real(matrices).flatten(1)
    return torch.view_as_complex(pairs.unflatten(-1, matrices.shape[1:] + (2,)))


def _prefix_products(group, factors):
    """Running products ``P_t = F_0 F_1 ⋯ F_t`` of packed ``factors: [B, T, *packed]`` along axis 1.

    Hillis–Steele scan: in round k every P_t with t ≥ 2^k becomes P_{t−2^k} P_t, so after
    ⌈log₂ T⌉ rounds of one batched product each P_t holds all its factors, left to right (the
    group product is associative but not commutative, so the left factor is always the earlier
    one). Work T·log₂T products instead of T, but no Python loop over time.
    """
    length, shift = factors.shape[1], 1
    while shift < length:
        factors = torch.cat([factors[:, :shift], group.packed_mul(factors[:, :-shift], factors[:, shift:])], dim=1)
        shift *= 2
    return factors


class GroupRNNCache(NamedTuple):
    """State and position to continue a sequence, and the states of the call that returned it,
    packed (``states`` unpacks them when read); mirror of reference.group_rnn.GroupRNNCache.

    Attributes:
        state: [B, n, n] H_p ([L, B, n, n] with ``num_layers = L > 1``).
        position: p, the global index of the next token.
        packed_states: [B, T, *packed] ([L, B, T, *packed]) every state of the call that returned
            this cache, in the group's packed form (not read by ``forward``).
        group: the group that unpacks them.
    """

    state: torch.Tensor
    position: int
    packed_states: torch.Tensor | None = None
    group: object = None

    @property
    def states(self):
        """[B, T, n, n] every state of the call that returned this cache, or None."""
        return None if self.packed_states is None else self.group.unpack(self.packed_states)


class _Layers:
    """Mirror of the reference: the cells of ``num_layers`` layers, bottom first, registered as the
    modules ``cell``, ``cell_l1``, … (``layer_prefixes``), and one call through them on packed states."""

    def _build_layers(self, config, group, **factory):
        self.prefixes = layer_prefixes(config)
        upper = upper_layer_config(config)
        self.cell = GroupRNNCell(config, group, **factory)
        for prefix in self.prefixes[1:]:
            self.add_module(prefix[:-1], GroupRNNCell(upper, group, input_norm_sq=group.n, **factory))

    @property
    def cells(self):
        """The layers' cells, bottom first."""
        return [getattr(self, prefix[:-1]) for prefix in self.prefixes]

    def _initial_states(self, batch):
        return [cell.initial_state.expand(batch, -1, -1) for cell in self.cells]

    def _given_states(self, state, batch):
        layers = len(self.prefixes)
        state = check_state(self.group, state, batch, self.cell.initial_state.dtype, None if layers == 1 else layers)
        return [state] if layers == 1 else list(state.unbind(0))

    def _run_layers(self, inputs, states, position=0):
        """``inputs: [B, T, F]``, one H_0 ``[B, n, n]`` per layer -> every layer's packed states
        ``[B, T, *packed]``."""
        runs = []
        for cell, state in zip(self.cells, states):
            runs.append(cell._packed_states(inputs, self.group.pack(state), position))
            inputs = self.group.packed_features(runs[-1])
        return runs

    def _joined(self, per_layer):
        return per_layer[0] if len(per_layer) == 1 else torch.stack(per_layer)

    def _final_state(self, runs):
        return self._joined([self.group.unpack(cell._packed_settle(packed[:, -1]))
                             for cell, packed in zip(self.cells, runs)])


class GroupRNN(_Layers, GroupModule):
    """Group-state RNN LM: embedding -> GroupRNNCell (one per layer) -> readout.

    Args:
        config: a ``reference.config.GroupRNNConfig``, or none and its fields as keywords
            (``reference.config.model_config``).
        device, dtype: where and in which real precision to keep the parameters (complex groups
            hold their group-valued parameters in the matching complex dtype).
        generator: ``torch.Generator`` for the initialization (default: torch's global RNG).
    """

    def __init__(self, config=None, device=None, dtype=None, generator=None, **fields):
        super().__init__()
        self.config = config = model_config(GroupRNNConfig, config, fields)
        check_precision(dtype, "GroupRNN")
        self.group = get_group(config.group, config.n, config.block)
        factory = {"device": device, "dtype": dtype}
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_dim, **factory)
        self._build_layers(config, self.group, **factory)
        self.readout = READOUTS[config.readout](self.group, config.vocab_size, **factory)
        self.reset_parameters(generator)

    def reset_parameters(self, generator=None):
        """The reference's initial distributions (reference.group_rnn.GroupRNN.init_params), ``spread``
        included: its input map fitted after the default draws, from the same generator."""
        normal_(self.embedding.weight, generator=generator)
        for cell in self.cells:
            cell.reset_parameters(generator)
        self.readout.reset_parameters(generator)
        if self.config.input_init == "spread":
            embedding, weight = self.embedding.weight, self.cell.input_map.weight
            targets, _ = spread_updates(self.group, self.config.vocab_size, generator, weight.dtype, weight.device)
            with torch.no_grad():
                fitted = fit_input_map(embedding, weight, targets)
                embedding.copy_(fitted[0])
                weight.copy_(fitted[1])
                self.cell.input_map.bias.zero_()

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """``nn.Module.load_state_dict`` after checking that group-valued entries lie on G."""
        check_group_state_dict(self, state_dict)
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, tokens, cache=None):
        """``tokens: [B, T]`` ids -> (logits ``[B, T, V]``, ``GroupRNNCache``); see the reference."""
        tokens = check_tokens(tokens, self.config.vocab_size, next(self.parameters()).device)
        self._check_on_groups()
        batch = tokens.shape[0]
        if cache is None:
            states, position = self._initial_states(batch), 0
        else:
            cache = check_cache(cache, GroupRNNCache)
            states, position = self._given_states(cache.state, batch), cache.position
        runs = self._run_layers(self.embedding(tokens), states, position)  # L × [B, T, *packed]
        logits = self.readout._from_features(self.group.packed_features(runs[-1]))
        return logits, GroupRNNCache(self._final_state(runs), position + tokens.shape[1], self._joined(runs), self.group)


class GroupRNNLayer(_Layers, GroupModule):
    """A group RNN as a drop-in for ``torch.nn.LSTM`` (mirror of ``reference.group_rnn.GroupRNNLayer``).

    H_t = H_{t-1} · exp(hat(bound(mix(W x_t + U features(H_{t-1}) + b)))) from a learnable H_0 ∈ G; the
    output at every step is features(H_t) (``output_size`` numbers), the state the group element.

    Args:
        input_size: F, the length of each input x_t.
        group, n, block: the state space (``reference.config.GROUP_NAMES``; ``block`` for BO).
        recurrent, reproject_every, mixing, mixing_rank, recurrence, keep_state_every, truncate_every,
            update_bound, forget, forget_alpha, num_layers: as in ``reference.config.GroupRNNConfig`` (``num_layers`` L > 1
            stacks L cells, as nn.LSTM does: the state is then ``[L, B, n, n]``, the output the top
            layer's features).
        batch_first: inputs and outputs ``[B, T, ·]`` instead of ``[T, B, ·]``, as in nn.LSTM.
        device, dtype, generator: where, in which real precision, and from which seed.

    ``forward(input, state=None) -> (output, state)`` as nn.LSTM's, with one group element H for
    the state where nn.LSTM has ``(h, c)`` (see ``forward``).

    Training. H_0 is a ``geoopt.ManifoldParameter``: train it with
    ``manifold_impl.optim.RiemannianAdam`` (the recommended optimizer; geoopt's ``RiemannianSGD``
    too), which steps along the group and treats the other parameters as ``torch.optim.Adam``
    does. Any other torch optimizer (AdamW, SGD) moves H_0 off the group; the next forward call
    then fails naming ``cell.initial_state``, unless each step is followed by
    ``with torch.no_grad(): layer.cell.initial_state.copy_(layer.group.nearest(layer.cell.initial_state))``.

    Long sequences. The product H_{t-1} X_t is an isometry, so an input-driven layer's gradients
    grow at most linearly in T; the recurrent term U features(H_{t-1}) feeds every state back into
    the next update, and at the default initialisation the gradient through it grows like e^{λT}
    with λ ≈ 1.6–2.5·10⁻³ per step (measured for O(8), O(16), U(6), SU(6), T(8), BO(8): a factor
    of 5 to 12 per 1,000 steps; λ falls with U's scale, and training can raise it). For O(8) the
    largest gradient of a mean loss over all outputs is 0.28 at T = 2,000 and 1e6 at T = 10,000.
    Up to about 2,000 steps per call the default is safe; beyond, switch on ``truncate_every=k``
    (truncated backpropagation inside the call; k = 1,000 bounds the growth to one window's, 0.05
    at T = 10,000), or feed the sequence in chunks and pass back the returned state detached.
    """

    def __init__(self, input_size, group, n, block=None, recurrent=True, reproject_every=None, mixing="none",
                 mixing_rank=None, batch_first=False, recurrence="fused", keep_state_every=None,
                 truncate_every=None, update_bound=None, forget="none", forget_alpha=None, num_layers=1,
                 device=None, dtype=None, generator=None):
        super().__init__()
        self.config = rnn_layer_config(input_size, group, n, block=block, recurrent=recurrent,
                                       reproject_every=reproject_every, mixing=mixing, mixing_rank=mixing_rank,
                                       recurrence=recurrence, keep_state_every=keep_state_every,
                                       truncate_every=truncate_every, update_bound=update_bound,
                                       forget=forget, forget_alpha=forget_alpha, num_layers=num_layers)
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first must be a bool, got {type(batch_first).__name__}")
        check_precision(dtype, "GroupRNNLayer")
        self.batch_first = batch_first
        self.group = get_group(group, n, block)
        self._build_layers(self.config, self.group, device=device, dtype=dtype)
        for cell in self.cells:
            cell.reset_parameters(generator)

    @property
    def input_size(self):
        return self.config.embedding_dim

    @property
    def output_size(self):
        """m: the length of each output (features(H_t))."""
        return self.config.state_features

    def extra_repr(self):
        return rnn_layer_repr(self.config, self.batch_first)

    def forward(self, input, state=None):
        """Run the layer over a batch of sequences.

        Args:
            input: ``[T, B, F]`` (``[B, T, F]`` if batch_first, unbatched ``[T, F]``), a tensor of the
                layer's dtype, F = ``input_size``.
            state: the initial state H, one tensor ``[B, n, n]`` on the group (unbatched ``[n, n]``;
                ``[L, B, n, n]`` and ``[L, n, n]`` with L > 1 layers),
                e.g. the state an earlier call returned; None: the learned H_0. There is no ``(h, c)``
                pair as in nn.LSTM.

        Returns:
            ``(output, state)``: ``output: [T, B, m]`` (``[B, T, m]`` if batch_first, unbatched
            ``[T, m]``), the features y_t = features(H_t) of every step (of the top layer), m =
            ``output_size``; and the final state H_T, shaped as ``state``. H_T is settled
            (``GroupRNNCell.settle``): moved back onto the group where the rounding of a long float32
            call has taken it past half the membership tolerance, so the layer always accepts the
            state it returned; ``reproject_every`` bounds the drift of the states inside a call.
        """
        dtype = self.cell.input_map.weight.dtype
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"input must be a torch.Tensor, got {type(input).__module__}.{type(input).__name__}; "
                            f"convert it with torch.as_tensor(input, dtype={dtype})")
        if input.dtype != dtype:
            raise TypeError(f"input must have the layer's dtype {dtype}, got {input.dtype}; "
                            f"cast it with input.to({dtype})")
        if input.dim() not in (2, 3) or input.shape[-1] != self.input_size or 0 in input.shape:
            raise ValueError(f"input must have shape [T, B, {self.input_size}] ([B, T, ·] if batch_first) or "
                             f"[T, {self.input_size}] with T, B ≥ 1, got {tuple(input.shape)}")
        self._check_on_groups()
        batched = input.dim() == 3
        sequences = input if not batched else (input if self.batch_first else input.transpose(0, 1))
        sequences = sequences if batched else sequences[None]  # [B, T, F]
        layered = len(self.prefixes) > 1
        if state is None:
            states = self._initial_states(sequences.shape[0])
        else:
            if not batched and isinstance(state, torch.Tensor):  # [n, n] or [L, n, n] -> a batch of one
                state = state[:, None] if layered else state[None]
            states = self._given_states(state, sequences.shape[0])
        runs = self._run_layers(sequences, states)  # L × [B, T, *packed]
        output, final = self.group.packed_features(runs[-1]), self._final_state(runs)
        if not batched:
            return output[0], (final[:, 0] if layered else final[0])
        return (output if self.batch_first else output.transpose(0, 1)), final
