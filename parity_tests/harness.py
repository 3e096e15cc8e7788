"""Parity of the two trees on one configuration (SPEC §8), shared by pytest and the CLI.

From one NumPy-generated parameter set (keys and shapes of the torch ``state_dict``) both trees
compute logits, loss, states and every gradient; each tree also runs step by step, and both take
one Riemannian Adam step. The reference always runs in float64; torch runs in ``dtype``.
"""

from __future__ import annotations

import autograd
import numpy as np
import torch

from manifold_impl.group_rnn import GroupRNN as TorchGroupRNN
from manifold_impl.losses import cross_entropy as torch_cross_entropy
from manifold_impl.optim import RiemannianAdam as TorchRiemannianAdam
from parity_tests.tolerances import ADAM_EPS, GRADIENT_FLOOR, MEMBERSHIP_ATOL, PARITY
from reference.group_rnn import GroupRNN as ReferenceGroupRNN
from reference.losses import cross_entropy as reference_cross_entropy
from reference.optim import RiemannianAdam as ReferenceRiemannianAdam
from reference.optim import ambient_gradients
from reference.params import random_params

DTYPES = {"float32": torch.float32, "float64": torch.float64}
ADAM_LR = 1e-2


def relative_error(actual, expected, floor=0.0):
    """max|actual − expected| / max(max|expected|, floor) (absolute when that scale is 0)."""
    actual = actual.detach().cpu().numpy() if isinstance(actual, torch.Tensor) else np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape:
        raise ValueError(f"shape mismatch: {actual.shape} vs {expected.shape}")
    scale = max(float(np.max(np.abs(expected), initial=0.0)), floor)
    err = np.max(np.abs(actual - expected), initial=0.0)
    return float(err / scale) if scale > 0 else float(err)


def gradient_errors(grads, ref_grads, dtype):
    """Compare torch gradients (``{key: tensor or None}``) with the reference's.

    Returns ``(errors, missing, mismatched)``: per-key ``relative_error`` with the floor
    ``GRADIENT_FLOOR[dtype]`` · (largest |entry| of any reference gradient) — see tolerances —,
    the keys torch left without a gradient, and the keys not present in both.
    """
    missing = sorted(key for key, g in grads.items() if g is None)
    mismatched = sorted(set(grads) ^ set(ref_grads))
    floor = GRADIENT_FLOOR[dtype] * max(float(np.max(np.abs(g), initial=0.0)) for g in ref_grads.values())
    errors = {key: relative_error(grads[key], ref_grads[key], floor)
              for key in ref_grads if grads.get(key) is not None}
    return errors, missing, mismatched


def to_torch(params, dtype, device):
    """NumPy parameter dict -> torch state dict in ``dtype`` (complex arrays in its complex twin)."""
    out = {}
    for key, value in params.items():
        tensor = torch.from_numpy(np.asarray(value))
        target = dtype if not tensor.is_complex() else (torch.complex64 if dtype == torch.float32 else torch.complex128)
        out[key] = tensor.to(device=device, dtype=target)
    return out


def max_membership_error(group, states):
    """Largest |H^H H − I| (compact groups) over ``states: [..., n, n]``; 0 for GL."""
    states = states.detach().cpu().numpy() if isinstance(states, torch.Tensor) else np.asarray(states)
    if not group.is_compact:
        return 0.0
    gram = np.conj(np.swapaxes(states, -1, -2)) @ states
    return float(np.max(np.abs(gram - np.eye(group.n)), initial=0.0))


def draw_problem(reference, vocab_size, seed, batch, length):
    """Generic parameters of ``reference``'s spec and a batch of tokens, all from ``seed``:
    ``(params, inputs [batch, length], targets [batch, length])``."""
    rng = np.random.default_rng(seed)
    params = random_params(reference.param_spec(), rng)
    tokens = rng.integers(0, vocab_size, size=(batch, length + 1))
    return params, tokens[:, :-1], tokens[:, 1:]


def reference_loss_and_grads(reference, params, inputs, targets):
    """The reference's cross-entropy and its ambient gradients (autograd, conjugation undone)."""
    def loss(p):
        return reference_cross_entropy(reference.forward(p, inputs)[0], targets)

    value, grads = autograd.value_and_grad(loss)(params)
    return value, ambient_gradients(grads)


def group_rnn_parity(config, seed=0, dtype="float64", batch=2, length=8, device="cpu"):
    """Compare the reference and torch group RNN on ``config``; returns a JSON-ready dict."""
    torch_dtype = DTYPES[dtype]
    reference = ReferenceGroupRNN(config)
    spec = reference.param_spec()
    params, inputs, targets = draw_problem(reference, config.vocab_size, seed, batch, length)

    # reference, float64
    ref_logits, ref_states = reference.forward(params, inputs)
    ref_loss, ref_grads = reference_loss_and_grads(reference, params, inputs, targets)
    ref_step_logits = _reference_stepped(reference, params, inputs)

    # torch
    model = TorchGroupRNN(config, device=device, dtype=torch_dtype)
    model.load_state_dict(to_torch(params, torch_dtype, device))
    inputs_t = torch.from_numpy(inputs).to(device)
    logits, states = model(inputs_t)
    loss = torch_cross_entropy(logits, torch.from_numpy(targets).to(device))
    loss.backward()
    grads = {key: p.grad for key, p in model.named_parameters()}
    with torch.no_grad():
        step_logits = _torch_stepped(model, inputs_t)

    errors = {
        "logits": relative_error(logits, ref_logits),
        "loss": relative_error(loss, ref_loss),
        "states": relative_error(states, ref_states),
        "stepwise_torch": relative_error(step_logits, logits.detach().cpu().numpy()),
        "stepwise_reference": relative_error(ref_step_logits, ref_logits),
    }
    grad_errors, missing, key_mismatch = gradient_errors(grads, ref_grads, dtype)

    step_errors, membership = step_and_membership(model, reference, spec, params, ref_grads, dtype,
                                                  states, ref_states)
    membership_atol = MEMBERSHIP_ATOL[dtype]
    tol = PARITY[dtype]
    checks = {
        "outputs": max(errors.values()) <= tol["output"],
        "gradients": not missing and not key_mismatch and max(grad_errors.values()) <= tol["gradient"],
        "optimizer_step": max(step_errors.values()) <= tol["gradient"],
        "on_group": max(membership.values()) <= membership_atol,
    }
    return {
        "model": "group_rnn",
        "config": {key: getattr(config, key) for key in config.__dataclass_fields__},
        "seed": seed, "dtype": dtype, "batch": batch, "length": length, "device": str(device),
        "errors": errors,
        "gradient_errors": grad_errors,
        "gradient_keys": {"missing_in_torch": missing, "mismatched": key_mismatch},
        "optimizer_step_errors": step_errors,
        "membership_errors": membership,
        "tolerances": {**tol, "membership": membership_atol},
        "checks": checks,
        "pass": all(checks.values()),
    }


def step_and_membership(model, reference, spec, params, ref_grads, dtype, states, ref_states):
    """One Riemannian Adam step in each tree from each tree's own gradients (torch's are in
    ``model``'s ``.grad``), then the distance from G of every state and of every group-valued
    parameter after the step.

    Returns:
        (step_errors ``{key: relative error after the step}``, membership ``{what: max error}``).
    """
    TorchRiemannianAdam(model.parameters(), lr=ADAM_LR, eps=ADAM_EPS[dtype]).step()
    stepped = ReferenceRiemannianAdam(spec, lr=ADAM_LR, eps=ADAM_EPS[dtype]).step(params, ref_grads)
    after = dict(model.named_parameters())
    step_errors = {key: relative_error(after[key], stepped[key]) for key in stepped}
    membership = {
        "states_torch": max_membership_error(model.group, states),
        "states_reference": max_membership_error(reference.group, ref_states),
        **{f"after_step_torch:{key}": max_membership_error(model.group, after[key])
           for key, s in spec.items() if s.group is not None},
    }
    return step_errors, membership


def _reference_stepped(reference, params, inputs):
    """Reference logits computed one token at a time, threading the state."""
    state, logits = None, []
    for t in range(inputs.shape[1]):
        step_logits, states = reference.forward(params, inputs[:, t:t + 1], state=state, position=t)
        state = states[:, -1]
        logits.append(step_logits)
    return np.concatenate(logits, axis=1)


def _torch_stepped(model, inputs):
    """Torch logits computed one token at a time, threading the state."""
    state, logits = None, []
    for t in range(inputs.shape[1]):
        step_logits, states = model(inputs[:, t:t + 1], state=state, position=t)
        state = states[:, -1]
        logits.append(step_logits)
    return torch.cat(logits, dim=1)
