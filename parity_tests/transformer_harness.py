"""Parity of the two group-state Transformer trees on one configuration (SPEC §8), shared by
pytest and the CLI.

The layout of the report is that of ``parity_tests.harness.group_rnn_parity``. From one NumPy
parameter set (keys and shapes of the torch ``state_dict``) both trees compute logits, loss, the
token states before and after every sublayer (``[B, S + 1, T, n, n]``) and every gradient; each
tree also decodes token by token, feeding its own returned states back as the cache (``past``);
both take one Riemannian Adam step (group-valued token embeddings, and prototypes with the
prototype readout, on G; the rest Euclidean). The reference always runs in float64; torch runs
in ``dtype``.

Gradient errors are max|g_torch − g_ref| / max(max|g_ref|, floor) per parameter, with floor =
``GRADIENT_FLOOR[dtype]`` · the largest |g_ref| entry of any parameter (0 in float64, so there
they are plain relative errors; see tolerances.GRADIENT_FLOOR for why float32 needs it).
"""

from __future__ import annotations

import numpy as np
import torch

from manifold_impl.group_transformer import GroupTransformer as TorchGroupTransformer
from manifold_impl.losses import cross_entropy as torch_cross_entropy
from parity_tests.harness import (
    DTYPES, draw_problem, gradient_errors, reference_loss_and_grads, relative_error, step_and_membership, to_torch,
)
from parity_tests.tolerances import MEMBERSHIP_ATOL, PARITY
from reference.group_transformer import GroupTransformer as ReferenceGroupTransformer


def group_transformer_parity(config, seed=0, dtype="float64", batch=2, length=6, device="cpu"):
    """Compare the reference and torch group Transformer on ``config``; returns a JSON-ready dict."""
    torch_dtype = DTYPES[dtype]
    reference = ReferenceGroupTransformer(config)
    spec = reference.param_spec()
    params, inputs, targets = draw_problem(reference, config.vocab_size, seed, batch, length)

    # reference, float64
    ref_logits, ref_states = reference.forward(params, inputs)
    ref_loss, ref_grads = reference_loss_and_grads(reference, params, inputs, targets)
    ref_step_logits, ref_step_states = _reference_stepped(reference, params, inputs)

    # torch
    model = TorchGroupTransformer(config, device=device, dtype=torch_dtype)
    model.load_state_dict(to_torch(params, torch_dtype, device))
    inputs_t = torch.from_numpy(inputs).to(device)
    logits, states = model(inputs_t)
    loss = torch_cross_entropy(logits, torch.from_numpy(targets).to(device))
    loss.backward()
    grads = {key: p.grad for key, p in model.named_parameters()}
    with torch.no_grad():
        step_logits, step_states = _torch_stepped(model, inputs_t)

    full_logits, full_states = logits.detach().cpu().numpy(), states.detach().cpu().numpy()
    errors = {
        "logits": relative_error(logits, ref_logits),
        "loss": relative_error(loss, ref_loss),
        "states": relative_error(states, ref_states),
        "stepwise_torch": relative_error(step_logits, full_logits),
        "stepwise_reference": relative_error(ref_step_logits, ref_logits),
        "stepwise_states_torch": relative_error(step_states, full_states),
        "stepwise_states_reference": relative_error(ref_step_states, ref_states),
    }
    grad_errors, missing, key_mismatch = gradient_errors(grads, ref_grads, dtype)

    step_errors, membership = step_and_membership(model, reference, spec, params, ref_grads, dtype,
                                                  states, ref_states)
    membership_atol = MEMBERSHIP_ATOL[dtype]
    tol = PARITY[dtype]
    checks = {
        "outputs": max(errors.values()) <= tol["output"],
        "gradients": (not missing and not key_mismatch and len(grad_errors) == len(spec)
                      and max(grad_errors.values()) <= tol["gradient"]),
        "optimizer_step": max(step_errors.values()) <= tol["gradient"],
        "on_group": max(membership.values()) <= membership_atol,
    }
    return {
        "model": "group_transformer",
        "config": {key: getattr(config, key) for key in config.__dataclass_fields__},
        "seed": seed, "dtype": dtype, "batch": batch, "length": length, "device": str(device),
        "errors": errors,
        "gradient_errors": grad_errors,
        "gradient_keys": {"missing_in_torch": missing, "mismatched": key_mismatch},
        "optimizer_step_errors": step_errors,
        "membership_errors": membership,
        "tolerances": {**tol, "membership": membership_atol},
        "checks": checks,
        "pass": bool(all(checks.values())),
    }


def _reference_stepped(reference, params, inputs):
    """Reference logits ``[B, T, V]`` and states computed one token at a time, the returned
    states of the earlier tokens fed back as ``past``."""
    past, logits = None, []
    for t in range(inputs.shape[1]):
        step_logits, states = reference.forward(params, inputs[:, t:t + 1], past=past, position=t)
        past = states if past is None else np.concatenate([past, states], axis=2)
        logits.append(step_logits)
    return np.concatenate(logits, axis=1), past


def _torch_stepped(model, inputs):
    """Torch logits and states computed one token at a time (see ``_reference_stepped``)."""
    past, logits = None, []
    for t in range(inputs.shape[1]):
        step_logits, states = model(inputs[:, t:t + 1], past=past, position=t)
        past = states if past is None else torch.cat([past, states], dim=2)
        logits.append(step_logits)
    return torch.cat(logits, dim=1), past
