"""Optimizers: geoopt's Riemannian ones, which train the ``GroupManifold`` parameters of every
group, and torch's AdamW for Euclidean models. ``reference/optim.py`` writes their math out for
step parity."""

from geoopt.optim import RiemannianAdam, RiemannianSGD
from torch.optim import AdamW

__all__ = ["AdamW", "RiemannianAdam", "RiemannianSGD"]
