"""Independent computations the tests compare both trees against (NumPy only, float64)."""

from __future__ import annotations

import numpy as np


def taylor_expm(a, terms=30):
    """exp(a) by scaling and squaring around a truncated Taylor series (not scipy, not torch).

    ``a: [..., n, n]``: each matrix is scaled by 2^-s so that its 1-norm is ≤ 1/2, the series is
    summed to ``terms`` terms (remainder < 2^-terms / terms!), then squared s times.
    """
    a = np.asarray(a, dtype=np.result_type(a, np.float64))
    out = np.empty_like(a)
    for index in np.ndindex(a.shape[:-2]):
        m = a[index]
        norm = np.max(np.sum(np.abs(m), axis=0), initial=0.0)
        s = max(0, int(np.ceil(np.log2(norm))) + 1) if norm > 0 else 0
        m = m / 2.0 ** s
        term, total = np.eye(m.shape[-1], dtype=m.dtype), np.eye(m.shape[-1], dtype=m.dtype)
        for k in range(1, terms):
            term = term @ m / k
            total = total + term
        for _ in range(s):
            total = total @ total
        out[index] = total
    return out


def algebra_violation(name, a, block=None):
    """How far ``a: [..., n, n]`` is from the Lie algebra ``name`` (max-abs; 0 inside).

    Written from the algebras' definitions (docs/design.md, Groups), independent of either tree's ``proj``.
    """
    a = np.asarray(a)
    ah = np.conj(np.swapaxes(a, -1, -2))
    if name == "GL":
        return float(np.max(np.abs(np.imag(a)), initial=0.0))
    parts = [np.abs(a + ah), *_pattern_violations(name, a, block)]  # skew-Hermitian, the pattern
    if name == "SU":
        parts.append(np.abs(np.trace(a, axis1=-2, axis2=-1))[..., None, None])
    return float(max(np.max(p, initial=0.0) for p in parts))


def _pattern_violations(name, x, block):
    """The entries of ``x: [..., n, n]`` (absolute values) that the sparsity and realness pattern of
    ``name`` forbids, one array per rule: imaginary parts on O, SO, BO; off-diagonal entries on T;
    entries off the diagonal blocks on BO. Shared by the group and its algebra."""
    n = x.shape[-1]
    parts = []
    if name in ("O", "SO", "BO"):
        parts.append(np.abs(np.imag(x)))
    if name == "T":
        parts.append(np.abs(x * (1 - np.eye(n))))
    if name == "BO":
        mask = np.kron(np.eye(n // block), np.ones((block, block)))
        parts.append(np.abs(x * (1 - mask)))
    return parts


def unitarity_defect(x):
    """max |xᴴx − I| of each matrix ``x: [..., n, n] -> [...]``."""
    x = np.asarray(x)
    gram = np.conj(np.swapaxes(x, -1, -2)) @ x
    return np.max(np.abs(gram - np.eye(x.shape[-1])), axis=(-2, -1), initial=0.0)


def group_violation(name, x, block=None):
    """How far ``x: [..., n, n]`` is from the group ``name`` (max-abs; 0 on it), from definitions."""
    x = np.asarray(x)
    if name == "GL":
        return 0.0 if np.all(np.linalg.svd(x, compute_uv=False)[..., -1] > 1e-8) else np.inf
    parts = [unitarity_defect(x), *_pattern_violations(name, x, block)]
    if name in ("SO", "SU"):
        parts.append(np.abs(np.linalg.det(x) - 1)[..., None, None])
    return float(max(np.max(p, initial=0.0) for p in parts))


def state_features(name, x, block=None):
    """features(x) of docs/design.md (Models) for one matrix ``x: [n, n]``, entry by entry: the entries the group
    ``name`` allows to be non-zero (all; T the diagonal; BO the diagonal blocks, block by block,
    row-major inside), real parts, then (U, SU, T) imaginary parts."""
    x = np.asarray(x)
    n = x.shape[-1]
    if name == "T":
        entries = [x[i, i] for i in range(n)]
    elif name == "BO":
        entries = [x[j + r, j + c] for j in range(0, n, block) for r in range(block) for c in range(block)]
    else:
        entries = [x[i, j] for i in range(n) for j in range(n)]
    entries = np.array(entries)
    if name in ("U", "SU", "T"):
        return np.concatenate([entries.real, entries.imag])
    return entries.real
