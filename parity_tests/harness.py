"""Parity of the two trees on one configuration of any model (docs/design.md, Parity and tolerances), shared by pytest and the CLI.

From one NumPy-generated parameter set (keys and shapes of the torch ``state_dict``) both trees
compute logits, loss, their caches and the gradient of every parameter (a key missing from either
tree, or left without a gradient, fails the check); each tree also runs token by token, feeding
back the cache it returned, which must reproduce the full-sequence logits and the final cache;
both take one optimizer step from their own gradients; models on a group check that every hidden
state, and every group-valued parameter after the step, lies on G. The reference always runs in
float64; torch runs in ``dtype``.

Every model follows one contract, ``forward(tokens, cache=None) -> (logits, cache)`` (the
reference's forward takes the parameter dict first). What differs between models is an
``Adapter``: its two classes, what of its cache a next call reads, where its hidden states are,
its optimizer, and which reads cannot be differentiated.

Gradient errors are max|g_torch − g_ref| / max(max|g_ref|, floor) per parameter, with floor =
``GRADIENT_FLOOR[dtype]`` · the largest |g_ref| entry of any parameter (0 in float64, so there
they are plain relative errors; see tolerances.GRADIENT_FLOOR for why float32 needs it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import autograd
import numpy as np
import torch

import manifold_impl.group_rnn
import manifold_impl.group_transformer
import manifold_impl.mlstm
import reference.group_rnn
import reference.group_transformer
import reference.mlstm
from manifold_impl.losses import cross_entropy as torch_cross_entropy
from manifold_impl.optim import AdamW as TorchAdamW
from manifold_impl.optim import RiemannianAdam as TorchRiemannianAdam
from parity_tests.tolerances import ADAM_EPS, GRADIENT_FLOOR, MEMBERSHIP_ATOL, PARITY, PARITY_NS_QUINTIC
from reference.config import GroupRNNConfig, GroupTransformerConfig, MLSTMConfig
from reference.losses import cross_entropy as reference_cross_entropy
from reference.optim import AdamW as ReferenceAdamW
from reference.optim import RiemannianAdam as ReferenceRiemannianAdam
from reference.optim import ambient_gradients
from reference.params import random_params

DTYPES = {"float32": torch.float32, "float64": torch.float64}
ADAM_LR = 1e-2
ADAMW_WEIGHT_DECAY = 0.01


# --- per-model adapters ---------------------------------------------------------------------------

def _plain_tolerance(config, dtype):
    return PARITY[dtype]


def _mlstm_tolerance(config, dtype):
    """Quintic Newton–Schulz amplifies float32 rounding (see tolerances.PARITY_NS_QUINTIC)."""
    if config.read == "ns" and config.ns_coeffs == "quintic":
        return PARITY_NS_QUINTIC[dtype]
    return PARITY[dtype]


@dataclass(frozen=True)
class Adapter:
    """What the parity procedure needs to know about one model.

    Attributes:
        name: the report's ``"model"``.
        reference, torch: the model classes of the two trees.
        length: default sequence length.
        continuation: cache -> ``{name: array}``, what a next call reads from the cache (compared
            between the trees, and between the stepped and the full-sequence run of each tree).
        hidden_states: cache -> every hidden state of the call that returned it ``[..., n, n]``
            (compared between the trees and checked on G); None for a model without a group.
        optimizer: ``"riemannian"`` (Riemannian Adam, group-valued parameters on G) or ``"adamw"``.
        differentiable: config -> whether gradients and the optimizer step are checked.
        tolerance: (config, dtype) -> ``{"output": .., "gradient": ..}``.
        torch_options: keyword arguments of the torch class's constructor (performance knobs).
    """

    name: str
    reference: type
    torch: type
    length: int
    continuation: Callable
    hidden_states: Callable | None
    optimizer: str
    differentiable: Callable = lambda config: True
    tolerance: Callable = _plain_tolerance
    torch_options: dict = field(default_factory=dict)


ADAPTERS = {
    GroupRNNConfig: Adapter(
        "group_rnn", reference.group_rnn.GroupRNN, manifold_impl.group_rnn.GroupRNN, length=8,
        continuation=lambda cache: {"state": cache.state}, hidden_states=lambda cache: cache.states,
        optimizer="riemannian"),
    GroupTransformerConfig: Adapter(
        "group_transformer", reference.group_transformer.GroupTransformer,
        manifold_impl.group_transformer.GroupTransformer, length=6,
        continuation=lambda cache: {"past": cache.past}, hidden_states=lambda cache: cache.past,
        optimizer="riemannian"),
    # chunk_size 3: a short sequence spans several chunks, so the state is carried across chunk boundaries
    MLSTMConfig: Adapter(
        "mlstm", reference.mlstm.MLSTM, manifold_impl.mlstm.MLSTM, length=8,
        continuation=lambda cache: {f"state.{key}": value for key, value in cache.state._asdict().items()},
        hidden_states=None, optimizer="adamw", differentiable=lambda config: config.read != "polar",
        tolerance=_mlstm_tolerance, torch_options={"chunk_size": 3}),
}


def adapter_for(config):
    """The ``Adapter`` of ``config``'s model; TypeError for a config no adapter knows."""
    adapter = ADAPTERS.get(type(config))
    if adapter is None:
        names = ", ".join(cls.__name__ for cls in ADAPTERS)
        raise TypeError(f"no parity adapter for {type(config).__name__} (known: {names})")
    return adapter


# --- comparisons ----------------------------------------------------------------------------------

def as_numpy(x):
    """A torch tensor or array-like as a NumPy array."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def relative_error(actual, expected, floor=0.0):
    """max|actual − expected| / max(max|expected|, floor) (absolute when that scale is 0)."""
    actual, expected = as_numpy(actual), as_numpy(expected)
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
    states = as_numpy(states)
    if not group.is_compact:
        return 0.0
    gram = np.conj(np.swapaxes(states, -1, -2)) @ states
    return float(np.max(np.abs(gram - np.eye(group.n)), initial=0.0))


# --- the two runs ---------------------------------------------------------------------------------

def draw_problem(reference_model, vocab_size, seed, batch, length):
    """Generic parameters of ``reference_model``'s spec and a batch of tokens, all from ``seed``:
    ``(params, inputs [batch, length], targets [batch, length])``."""
    rng = np.random.default_rng(seed)
    params = random_params(reference_model.param_spec(), rng)
    tokens = rng.integers(0, vocab_size, size=(batch, length + 1))
    return params, tokens[:, :-1], tokens[:, 1:]


def reference_loss_and_grads(reference_model, params, inputs, targets):
    """The reference's cross-entropy and its ambient gradients (autograd, conjugation undone)."""
    def loss(p):
        return reference_cross_entropy(reference_model.forward(p, inputs)[0], targets)

    value, grads = autograd.value_and_grad(loss)(params)
    return value, ambient_gradients(grads)


def run_stepped(forward, tokens, concatenate):
    """``forward`` one token at a time, each call given the cache the previous one returned:
    (the logits joined along time by ``concatenate``, the last cache)."""
    cache, logits = None, []
    for t in range(tokens.shape[1]):
        step_logits, cache = forward(tokens[:, t:t + 1], cache)
        logits.append(step_logits)
    return concatenate(logits, 1), cache


class Run(NamedTuple):
    """One tree's results: the full-sequence call and the token-by-token one."""

    logits: object
    loss: object
    cache: tuple
    step_logits: object
    step_cache: tuple


def reference_run(adapter, reference_model, params, inputs, targets):
    """The reference's ``Run`` and its ambient gradients (``{}`` when not differentiable)."""
    logits, cache = reference_model.forward(params, inputs)
    loss, grads = reference_cross_entropy(logits, targets), {}
    if adapter.differentiable(reference_model.config):
        loss, grads = reference_loss_and_grads(reference_model, params, inputs, targets)
    step_logits, step_cache = run_stepped(functools.partial(reference_model.forward, params), inputs, np.concatenate)
    return Run(logits, loss, cache, step_logits, step_cache), grads


def torch_run(adapter, model, inputs, targets):
    """Torch's ``Run``; the gradients are left in the parameters' ``.grad``."""
    differentiable = adapter.differentiable(model.config)
    with torch.set_grad_enabled(differentiable):
        logits, cache = model(inputs)
        loss = torch_cross_entropy(logits, targets)
    if differentiable:
        loss.backward()
    with torch.no_grad():
        step_logits, step_cache = run_stepped(model, inputs, torch.cat)
    return Run(logits, loss, cache, step_logits, step_cache)


def output_pairs(adapter, run, ref_run):
    """``{quantity: (actual, expected)}``: torch against the reference (logits, loss, hidden
    states, what the cache carries on), and in each tree the stepped run against the full one."""
    pairs = {"logits": (run.logits, ref_run.logits), "loss": (run.loss, ref_run.loss)}
    if adapter.hidden_states is not None:
        pairs["states"] = (adapter.hidden_states(run.cache), adapter.hidden_states(ref_run.cache))
    carried, ref_carried = adapter.continuation(run.cache), adapter.continuation(ref_run.cache)
    pairs |= {f"cache.{key}": (value, ref_carried[key]) for key, value in carried.items()}
    for tree, tree_run, full in (("torch", run, carried), ("reference", ref_run, ref_carried)):
        pairs[f"stepwise_{tree}"] = (tree_run.step_logits, tree_run.logits)
        pairs |= {f"stepwise_{tree}:cache.{key}": (value, full[key])
                  for key, value in adapter.continuation(tree_run.step_cache).items()}
    return pairs


def optimizer_step(adapter, model, spec, params, ref_grads, dtype):
    """One step of the adapter's optimizer in each tree from each tree's own gradients (torch's
    in ``model``'s ``.grad``): ``{key: relative error after the step}``."""
    eps = ADAM_EPS[dtype]
    if adapter.optimizer == "riemannian":
        TorchRiemannianAdam(model.parameters(), lr=ADAM_LR, eps=eps).step()
        stepped = ReferenceRiemannianAdam(spec, lr=ADAM_LR, eps=eps).step(params, ref_grads)
    else:
        TorchAdamW(model.parameters(), lr=ADAM_LR, eps=eps, weight_decay=ADAMW_WEIGHT_DECAY).step()
        stepped = ReferenceAdamW(lr=ADAM_LR, eps=eps, weight_decay=ADAMW_WEIGHT_DECAY).step(params, ref_grads)
    after = dict(model.named_parameters())
    return {key: relative_error(after[key], stepped[key]) for key in stepped}


def parity(config, seed=0, dtype="float64", batch=2, length=None, device="cpu", **torch_options):
    """Compare the reference and torch model of ``config``; returns a JSON-ready dict.

    ``length``: default the adapter's; ``torch_options`` override the adapter's (e.g. the mLSTM's
    ``chunk_size``, None for one chunk).
    """
    adapter = adapter_for(config)
    length = adapter.length if length is None else length
    torch_options = {**adapter.torch_options, **torch_options}
    reference_model = adapter.reference(config)
    spec = reference_model.param_spec()
    params, inputs, targets = draw_problem(reference_model, config.vocab_size, seed, batch, length)
    ref_run, ref_grads = reference_run(adapter, reference_model, params, inputs, targets)  # float64
    model = adapter.torch(config, device=device, dtype=DTYPES[dtype], **torch_options)
    model.load_state_dict(to_torch(params, DTYPES[dtype], device))
    run = torch_run(adapter, model, torch.from_numpy(inputs).to(device), torch.from_numpy(targets).to(device))

    pairs = output_pairs(adapter, run, ref_run)
    shapes_differ = sorted(name for name, (actual, expected) in pairs.items()
                           if as_numpy(actual).shape != as_numpy(expected).shape)
    errors = {name: relative_error(*pair) for name, pair in pairs.items() if name not in shapes_differ}
    positions = {"torch": run.cache.position, "reference": ref_run.cache.position,
                 "stepwise_torch": run.step_cache.position, "stepwise_reference": ref_run.step_cache.position}
    tol = adapter.tolerance(config, dtype)
    checks = {"outputs": not shapes_differ and max(errors.values()) <= tol["output"],
              "cache_positions": all(position == length for position in positions.values())}

    skipped, grad_errors, missing, key_mismatch, step_errors = [], {}, [], [], {}
    if adapter.differentiable(config):
        grads = {key: p.grad for key, p in model.named_parameters()}
        grad_errors, missing, key_mismatch = gradient_errors(grads, ref_grads, dtype)
        checks["gradients"] = (not missing and not key_mismatch and len(grad_errors) == len(spec)
                               and max(grad_errors.values()) <= tol["gradient"])
        step_errors = optimizer_step(adapter, model, spec, params, ref_grads, dtype)
        checks["optimizer_step"] = max(step_errors.values()) <= tol["gradient"]
    else:
        skipped = ["gradients", "optimizer_step"]

    membership = {}
    if adapter.hidden_states is not None:  # every hidden state, and every group-valued parameter after the step
        after = dict(model.named_parameters())
        membership = {
            "states_torch": max_membership_error(model.group, adapter.hidden_states(run.cache)),
            "states_reference": max_membership_error(reference_model.group, adapter.hidden_states(ref_run.cache)),
            **{f"after_step_torch:{key}": max_membership_error(model.group, after[key])
               for key, s in spec.items() if s.group is not None},
        }
        checks["on_group"] = max(membership.values()) <= MEMBERSHIP_ATOL[dtype]
    return {
        "model": adapter.name,
        "config": {key: getattr(config, key) for key in config.__dataclass_fields__},
        "seed": seed, "dtype": dtype, "batch": batch, "length": length, "device": str(device),
        "torch_options": torch_options,
        "errors": errors,
        "shapes_differ": shapes_differ,
        "cache_positions": positions,
        "gradient_errors": grad_errors,
        "gradient_keys": {"missing_in_torch": missing, "mismatched": key_mismatch},
        "optimizer_step_errors": step_errors,
        "membership_errors": membership,
        "skipped": skipped,
        "tolerances": {**tol, **({"membership": MEMBERSHIP_ATOL[dtype]} if membership else {})},
        "checks": checks,
        "pass": bool(all(checks.values())),
    }
