"""Group-state RNN language model in torch; mirror of ``reference/group_rnn.py`` (math there).

Batched over sequences; runs on any device and dtype given at construction. Performance notes:
the input drive W e_t + b is computed for all t in one matmul before the loop. Without the
recurrent term the updates do not depend on the state: the exponentials of all steps are one
batched call, and the running products H_0 U_1 ⋯ U_t come from an associative scan
(``_prefix_products``: ⌈log₂ T⌉ batched products instead of a loop over T), unless
``reproject_every`` asks for the step-by-step loop.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from manifold_impl.groups import get_group
from manifold_impl.manifolds import check_group_state_dict, group_parameter
from manifold_impl.mixing import TangentMixing
from manifold_impl.readouts import READOUTS
from manifold_impl.validation import check_cache, check_state, check_tokens


RECURRENT_GAIN = 0.05  # mirror of reference.group_rnn.RECURRENT_GAIN


def drive_scale(group):
    """Mirror of reference.group_rnn.drive_scale: 1 on compact groups, 0.1 on GL."""
    return 1.0 if group.is_compact else 0.1


class GroupRNNCell(nn.Module):
    """H_t = H_{t-1} · exp(hat(mix(W e_t + U realvec(H_{t-1}) + b)))."""

    def __init__(self, config, group, device=None, dtype=None):
        super().__init__()
        self.config, self.group = config, group
        factory = {"device": device, "dtype": dtype}
        self.initial_state = group_parameter(group.identity(dtype=dtype, device=device), group)
        self.input_map = nn.Linear(config.embedding_dim, group.dim, **factory)
        self.state_map = (nn.Linear(config.state_features, group.dim, bias=False, **factory)
                          if config.recurrent else None)
        self.mixing = TangentMixing(config.mixing, group.dim, config.mixing_rank, **factory)

    def reset_parameters(self, generator=None):
        dim, n, features = self.group.dim, self.group.n, self.config.embedding_dim
        drive = drive_scale(self.group)
        with torch.no_grad():
            self.initial_state.copy_(self.group.identity(dtype=self.input_map.weight.dtype))
        nn.init.normal_(self.input_map.weight, std=drive / math.sqrt(features * dim), generator=generator)
        nn.init.zeros_(self.input_map.bias)
        if self.state_map is not None:
            nn.init.normal_(self.state_map.weight, std=RECURRENT_GAIN * drive / math.sqrt(n * dim),
                            generator=generator)
        self.mixing.reset_parameters(generator)

    def forward(self, embedded, state, position=0):
        """``embedded: [B, T, F]``, ``state: [B, n, n]`` -> states ``[B, T, n, n]`` (H_1..H_T)."""
        group, every = self.group, self.config.reproject_every
        drive = self.input_map(embedded)  # [B, T, dim], all steps at once
        if self.state_map is None:
            drive = group.exp(group.hat(self.mixing(drive)))  # [B, T, n, n]: every update in one call
            if every is None:
                return _prefix_products(group, torch.cat([state[:, None], drive], dim=1))[:, 1:]
        # unbind, not drive[:, t]: the backward of T slices would zero-fill T full-size tensors
        states, ledger = [], []
        for t, step in enumerate(drive.unbind(dim=1)):
            if self.state_map is None:
                update = step
            else:
                recurrent = _StateMapStep.apply(group.features(state), self.state_map.weight, ledger, t == 0)
                update = group.exp(group.hat(self.mixing(step + recurrent)))
            state = group.mul(state, update)
            if every is not None and (position + t + 1) % every == 0:
                fixed = state.detach()
                state = state + (group.nearest(fixed) - fixed)  # straight-through re-projection
            states.append(state)
        return torch.stack(states, dim=1)


class _StateMapStep(torch.autograd.Function):
    """U realvec(H_{t-1}) of one step, whose U-gradient is formed once for all steps.

    Per step, ḡ_U = ḡ_{c_t}ᵀ realvec(H_{t-1}) is a thin [dim g × B] · [B × m] product that mostly
    writes memory; summed over T steps it is one [dim g × T·B] · [T·B × m] product instead. The
    backward pass reaches the steps from the last to the first (step t's input depends on every
    earlier step), so each step files (ḡ, input) in the shared ``ledger`` and returns no
    U-gradient, and the first step, reached last, returns the whole sum.
    """

    @staticmethod
    def forward(ctx, features, weight, ledger, first):
        ctx.save_for_backward(features, weight)
        ctx.ledger, ctx.first = ledger, first
        return features @ weight.T

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        features, weight = ctx.saved_tensors
        grad_weight = None
        if ctx.needs_input_grad[1]:
            ctx.ledger.append((grad, features))
            if ctx.first:
                grads, inputs = zip(*ctx.ledger)
                ctx.ledger.clear()
                grad_weight = torch.cat(grads).T @ torch.cat(inputs)
        return grad @ weight if ctx.needs_input_grad[0] else None, grad_weight, None, None


def _prefix_products(group, factors):
    """Running products ``P_t = F_0 F_1 ⋯ F_t`` of ``factors: [B, T, n, n]`` along axis 1.

    Hillis–Steele scan: in round k every P_t with t ≥ 2^k becomes P_{t−2^k} P_t, so after
    ⌈log₂ T⌉ rounds of one batched product each P_t holds all its factors, left to right (the
    group product is associative but not commutative, so the left factor is always the earlier
    one). Work T·log₂T products instead of T, but no Python loop over time.
    """
    length, shift = factors.shape[1], 1
    while shift < length:
        factors = torch.cat([factors[:, :shift], group.mul(factors[:, :-shift], factors[:, shift:])], dim=1)
        shift *= 2
    return factors


class GroupRNNCache(NamedTuple):
    """State and position to continue a sequence, and the states of the call that returned it;
    mirror of reference.group_rnn.GroupRNNCache.

    Attributes:
        state: [B, n, n] H_p.
        position: p, the global index of the next token.
        states: [B, T, n, n] every state of the call that returned this cache (not read by ``forward``).
    """

    state: torch.Tensor
    position: int
    states: torch.Tensor | None = None


class GroupRNN(nn.Module):
    """Group-state RNN LM: embedding -> GroupRNNCell -> readout.

    Args:
        config: a ``reference.config.GroupRNNConfig``.
        device, dtype: where and in which real precision to keep the parameters (complex groups
            hold their group-valued parameters in the matching complex dtype).
        generator: ``torch.Generator`` for the initialization (default: torch's global RNG).
    """

    def __init__(self, config, device=None, dtype=None, generator=None):
        super().__init__()
        self.config = config
        self.group = get_group(config.group, config.n, config.block)
        factory = {"device": device, "dtype": dtype}
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_dim, **factory)
        self.cell = GroupRNNCell(config, self.group, **factory)
        self.readout = READOUTS[config.readout](self.group, config.vocab_size, **factory)
        self.reset_parameters(generator)

    def reset_parameters(self, generator=None):
        """The reference's initial distributions (reference.group_rnn.GroupRNN.param_spec)."""
        nn.init.normal_(self.embedding.weight, generator=generator)
        self.cell.reset_parameters(generator)
        self.readout.reset_parameters(generator)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """``nn.Module.load_state_dict`` after checking that group-valued entries lie on G."""
        check_group_state_dict(self, state_dict)
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, tokens, cache=None):
        """``tokens: [B, T]`` ids -> (logits ``[B, T, V]``, ``GroupRNNCache``); see the reference."""
        tokens = check_tokens(tokens, self.config.vocab_size)
        batch = tokens.shape[0]
        if cache is None:
            state, position = self.cell.initial_state.expand(batch, -1, -1), 0
        else:
            cache = check_cache(cache, GroupRNNCache)
            check_state(self.group, cache.state, batch)
            state, position = cache.state, cache.position
        states = self.cell(self.embedding(tokens), state, position)
        return self.readout(states), GroupRNNCache(states[:, -1], position + tokens.shape[1], states)
