"""Parity of the two mLSTM trees on one configuration (SPEC §8), shared by pytest and the CLI.

The layout of the report is that of ``parity_tests.harness.group_rnn_parity``. From one NumPy
parameter set (keys and shapes of the torch ``state_dict``) both trees compute logits, loss, the
final recurrent state and every gradient; each tree also runs token by token, threading its
state; both take one AdamW step (the protocol's optimizer, SPEC §6; the mLSTM has no
group-valued parameters, so there is no Riemannian step and no membership check). The reference
always runs in float64; torch runs in ``dtype``.

``read="polar"`` is forward-only: its gradients and the optimizer step are skipped and listed
under ``"skipped"``.
"""

from __future__ import annotations

import numpy as np
import torch

from manifold_impl.losses import cross_entropy as torch_cross_entropy
from manifold_impl.mlstm import MLSTM as TorchMLSTM
from manifold_impl.optim import AdamW as TorchAdamW
from parity_tests.harness import DTYPES, draw_problem, gradient_errors, reference_loss_and_grads, relative_error, to_torch
from parity_tests.tolerances import ADAM_EPS, PARITY, PARITY_NS_QUINTIC
from reference.losses import cross_entropy as reference_cross_entropy
from reference.mlstm import MLSTM as ReferenceMLSTM
from reference.optim import AdamW as ReferenceAdamW

ADAMW_LR = 1e-2
ADAMW_WEIGHT_DECAY = 0.01


def mlstm_parity(config, seed=0, dtype="float64", batch=2, length=8, device="cpu", chunk_size=3):
    """Compare the reference and torch mLSTM on ``config``; returns a JSON-ready dict.

    ``chunk_size`` is the torch cell's chunk (default 3, so that a short sequence spans several
    chunks and the state is carried across chunk boundaries; None: one chunk).
    """
    torch_dtype = DTYPES[dtype]
    differentiable = config.read != "polar"
    reference = ReferenceMLSTM(config)
    params, inputs, targets = draw_problem(reference, config.vocab_size, seed, batch, length)

    # reference, float64 (the mLSTM's parameters are real: no conjugation to undo)
    ref_logits, ref_state = reference.forward(params, inputs)
    ref_loss = reference_cross_entropy(ref_logits, targets)
    ref_grads = {}
    if differentiable:
        ref_loss, ref_grads = reference_loss_and_grads(reference, params, inputs, targets)
    ref_step_logits = _reference_stepped(reference, params, inputs)

    # torch
    model = TorchMLSTM(config, device=device, dtype=torch_dtype, chunk_size=chunk_size)
    model.load_state_dict(to_torch(params, torch_dtype, device))
    inputs_t = torch.from_numpy(inputs).to(device)
    with torch.set_grad_enabled(differentiable):
        logits, state = model(inputs_t)
        loss = torch_cross_entropy(logits, torch.from_numpy(targets).to(device))
    grads = {}
    if differentiable:
        loss.backward()
        grads = {key: p.grad for key, p in model.named_parameters()}
    with torch.no_grad():
        step_logits = _torch_stepped(model, inputs_t)

    errors = {
        "logits": relative_error(logits, ref_logits),
        "loss": relative_error(loss, ref_loss),
        **{f"state_{name}": relative_error(value, np.asarray(ref_value))
           for name, value, ref_value in zip(state._fields, state, ref_state)},
        "stepwise_torch": relative_error(step_logits, logits.detach().cpu().numpy()),
        "stepwise_reference": relative_error(ref_step_logits, ref_logits),
    }
    tol = parity_tolerance(config, dtype)
    checks = {"outputs": max(errors.values()) <= tol["output"]}
    skipped = []
    missing, key_mismatch, grad_errors, step_errors = [], [], {}, {}
    if differentiable:
        grad_errors, missing, key_mismatch = gradient_errors(grads, ref_grads, dtype)
        checks["gradients"] = (not missing and not key_mismatch and bool(grad_errors)
                               and max(grad_errors.values()) <= tol["gradient"])

        # one AdamW step in each tree from each tree's own gradients
        eps = ADAM_EPS[dtype]
        optimizer = TorchAdamW(model.parameters(), lr=ADAMW_LR, eps=eps, weight_decay=ADAMW_WEIGHT_DECAY)
        optimizer.step()
        stepped = ReferenceAdamW(lr=ADAMW_LR, eps=eps, weight_decay=ADAMW_WEIGHT_DECAY).step(params, ref_grads)
        after = dict(model.named_parameters())
        step_errors = {key: relative_error(after[key], stepped[key]) for key in stepped}
        checks["optimizer_step"] = max(step_errors.values()) <= tol["gradient"]
    else:
        skipped = ["gradients", "optimizer_step"]
    return {
        "model": "mlstm",
        "config": {key: getattr(config, key) for key in config.__dataclass_fields__},
        "seed": seed, "dtype": dtype, "batch": batch, "length": length, "device": str(device),
        "chunk_size": chunk_size,
        "errors": errors,
        "gradient_errors": grad_errors,
        "gradient_keys": {"missing_in_torch": missing, "mismatched": key_mismatch},
        "optimizer_step_errors": step_errors,
        "skipped": skipped,
        "tolerances": dict(tol),
        "checks": checks,
        "pass": all(checks.values()),
    }


def parity_tolerance(config, dtype):
    """``{"output": .., "gradient": ..}`` for ``config`` in ``dtype`` (quintic NS: see tolerances)."""
    if config.read == "ns" and config.ns_coeffs == "quintic":
        return PARITY_NS_QUINTIC[dtype]
    return PARITY[dtype]


def _reference_stepped(reference, params, inputs):
    """Reference logits computed one token at a time, threading the state."""
    state, logits = None, []
    for t in range(inputs.shape[1]):
        step_logits, state = reference.forward(params, inputs[:, t:t + 1], state=state)
        logits.append(step_logits)
    return np.concatenate(logits, axis=1)


def _torch_stepped(model, inputs):
    """Torch logits computed one token at a time, threading the state."""
    state, logits = None, []
    for t in range(inputs.shape[1]):
        step_logits, state = model(inputs[:, t:t + 1], state=state)
        logits.append(step_logits)
    return torch.cat(logits, dim=1)
