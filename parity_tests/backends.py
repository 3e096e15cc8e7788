"""One contract, two trees: adapters that let a test run against ``reference`` or ``manifold_impl``.

Each backend converts NumPy arrays in and out and provides a seeded generator, so a test body
is written once and checks both implementations against an independent computation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

import manifold_impl.groups
import reference.groups


@dataclass(frozen=True)
class Backend:
    name: str
    dtype: str  # working precision: "float64" or "float32"

    @property
    def groups(self):
        return reference.groups if self.name == "reference" else manifold_impl.groups

    def group(self, name, n, block=None):
        return self.groups.get_group(name, n, block)

    def generator(self, seed):
        if self.name == "reference":
            return np.random.default_rng(seed)
        return torch.Generator().manual_seed(seed)

    def real_dtype(self):
        if self.name == "reference":
            return np.dtype(self.dtype)
        return {"float32": torch.float32, "float64": torch.float64}[self.dtype]

    def array(self, x):
        """NumPy array -> backend array in the working precision (complex stays complex)."""
        x = np.asarray(x)
        if self.name == "reference":
            return x
        tensor = torch.from_numpy(x)
        if tensor.is_complex():
            return tensor.to(torch.complex64 if self.dtype == "float32" else torch.complex128)
        return tensor.to(self.real_dtype())

    def numpy(self, x):
        return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


BACKENDS = [Backend("reference", "float64"), Backend("torch", "float64"), Backend("torch", "float32")]
BACKEND_IDS = [f"{b.name}-{b.dtype}" for b in BACKENDS]
