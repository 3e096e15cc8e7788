"""Training-dynamics diagnostics, recorded by ``experiments.train`` at every evaluation.

What each diagnostic measures, and how: ``dynamics`` and ``gradient_norms``.
"""

from __future__ import annotations

import math

import geoopt
import torch

from manifold_impl.group_rnn import GroupRNN
from manifold_impl.linalg import realvec

LAGS = (1, 10)
DYNAMICS_KEYS = ("dyn_rotation_mean", "dyn_rotation_max", "dyn_drive_norm", "dyn_input_norm", "dyn_state_norm",
                 *(f"dyn_similarity@{lag}" for lag in LAGS), "dyn_readout_norm")  # what ``dynamics`` returns
DIAGNOSTIC_PREFIXES = ("grad_norm", "dyn_")  # of every key these diagnostics write


def parameter_groups(model):
    """``{group name: [parameters]}``, non-empty groups that together hold every parameter once."""
    if isinstance(model, GroupRNN):
        groups = {"embedding": list(model.embedding.parameters()), "readout": list(model.readout.parameters())}
        for layer, cell in enumerate(model.cells):
            suffix = f"_l{layer}" if layer else ""  # the first layer's names are those of a model without depth
            modules = {"input_map": cell.input_map, "state_map": cell.state_map, "forget_gate": cell.forget_gate,
                       "mixing": cell.mixing}
            groups |= {name + suffix: list(module.parameters()) for name, module in modules.items() if module is not None}
            groups["initial_state" + suffix] = [cell.initial_state]
    else:
        groups = {name: list(child.parameters()) for name, child in model.named_children()}
        groups["other"] = list(model.parameters(recurse=False))
    return {name: parameters for name, parameters in groups.items() if parameters}


def _norm(tensors):
    return float(torch.sqrt(sum((torch.linalg.vector_norm(t) ** 2 for t in tensors), torch.zeros(()))))


def gradient_norms(model):
    """``{"grad_norm": total, "grad_norm_<group>": ...}`` of the gradients now held (call before clipping)."""
    result = {}
    for name, parameters in parameter_groups(model).items():
        result[f"grad_norm_{name}"] = _norm([p.grad.detach().cpu() for p in parameters if p.grad is not None])
    result["grad_norm"] = math.sqrt(sum(value ** 2 for value in result.values()))
    return result


@torch.no_grad()
def dynamics(model, tokens):
    """The group-RNN diagnostics of ``model`` on ``tokens: [B, T]`` (``{}`` for any other model).

    Gradient norms (``gradient_norms``, every model): the Euclidean norm of the gradient of each
    parameter group, before clipping, as ``grad_norm_<group>``, and over all parameters as
    ``grad_norm``. A group RNN's groups are its modules: ``embedding``, ``input_map`` (W, b),
    ``state_map`` (U), ``forget_gate``, ``mixing``, ``readout`` and ``initial_state`` (H_0), with
    ``_l1``, ``_l2``, … for the cells of the layers above the first; any other model's groups are
    its top-level modules.

    Group-RNN dynamics (``dynamics``; an empty dict for any other model), of the first layer (the
    one the tokens drive; ``num_layers``) on one batch of tokens, from
    the model's public pieces only (the embedding, the cell's ``input_map``, ``state_map`` and
    ``mixing``, the group's ``features`` and ``hat``, the states the model returns). With
    d_t = W e_t + b, the state term s_t = U features(H_{t−1}), c_t = d_t + s_t and
    A_t = hat(mix(c_t)), means over batch and time:

    * ``dyn_rotation_mean`` / ``dyn_rotation_max``: the spectral norm ‖A_t‖₂ (for a compact group the
      largest rotation angle of the step, in radians), mean and maximum;
    * ``dyn_drive_norm``, ``dyn_input_norm``, ``dyn_state_norm``: ‖c_t‖, ‖d_t‖, ‖s_t‖;
    * ``dyn_similarity@k`` for k in ``LAGS``: Re tr(H_tᴴ H_{t+k}) / n (1 for a state that does not move;
      near 0 once the state has forgotten H_t), over the pairs the batch's length allows;
    * ``dyn_readout_norm``: the norm of the readout's Euclidean weights (its parameters other than
      biases and group-valued ones: R of the linear readout, τ of the prototype readout).
    """
    if not isinstance(model, GroupRNN):
        return {}
    cell, group = model.cell, model.group
    tokens = tokens.to(cell.input_map.weight.device)
    states = model(tokens)[1].states  # [B, T, n, n], [L, B, T, n, n] with L > 1 layers
    states = states[0] if len(model.cells) > 1 else states
    initial = cell.initial_state.expand(tokens.shape[0], 1, -1, -1)
    previous = torch.cat([initial, states[:, :-1]], dim=1)  # H_{t-1}
    drive = cell.input_map(model.embedding(tokens))  # d_t = W e_t + b: [B, T, dim]
    state_term = cell.state_map(group.features(previous)) if cell.state_map is not None else torch.zeros_like(drive)
    coordinates = drive + state_term
    if not torch.isfinite(coordinates).all():  # a diverged model: no spectral norm to take
        return {key: float("nan") for key in DYNAMICS_KEYS}
    rotation = torch.linalg.matrix_norm(group.hat(cell.bound(cell.mixing(coordinates))), ord=2)  # [B, T]
    result = {"dyn_rotation_mean": rotation.mean().item(), "dyn_rotation_max": rotation.max().item(),
              "dyn_drive_norm": torch.linalg.vector_norm(coordinates, dim=-1).mean().item(),
              "dyn_input_norm": torch.linalg.vector_norm(drive, dim=-1).mean().item(),
              "dyn_state_norm": torch.linalg.vector_norm(state_term, dim=-1).mean().item()}
    flat = realvec(states)  # Re tr(XᴴY) = realvec(X) · realvec(Y)
    for lag in LAGS:
        if lag < states.shape[1]:
            similarity = (flat[:, :-lag] * flat[:, lag:]).sum(-1) / group.n
            result[f"dyn_similarity@{lag}"] = similarity.mean().item()
    weights = [p.detach() for name, p in model.readout.named_parameters()
               if not name.endswith("bias") and not isinstance(p, geoopt.ManifoldParameter)]
    result["dyn_readout_norm"] = _norm([w.cpu() for w in weights])
    return result
