"""Riemannian optimizers: geoopt's own, which train the ``GroupManifold`` parameters of every
group. The reference (``reference/optim.py``) writes their math out for step parity."""

from geoopt.optim import RiemannianAdam, RiemannianSGD

__all__ = ["RiemannianAdam", "RiemannianSGD"]
