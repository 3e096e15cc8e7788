"""Optimizers: geoopt's Riemannian ones, which train the ``GroupManifold`` parameters of every
group, and torch's AdamW for Euclidean models. ``reference/optim.py`` writes their math out for
step parity."""

import geoopt.optim
from geoopt.optim import RiemannianSGD
from torch.optim import AdamW

__all__ = ["AdamW", "RiemannianAdam", "RiemannianSGD"]


class RiemannianAdam(geoopt.optim.RiemannianAdam):
    """geoopt's RiemannianAdam, resumable exactly.

    geoopt counts steps in a Python int, but ``load_state_dict`` runs ``torch.optim.Adam``'s
    ``__setstate__``, which turns every ``state["step"]`` into a float32 tensor; the bias
    corrections 1 − βᵗ are then computed in float32 and a resumed run leaves the uninterrupted
    one. Here the count is an int again after loading (exact: a float32 holds every count < 2²⁴).
    """

    def __setstate__(self, state):
        super().__setstate__(state)
        for parameter_state in self.state.values():
            step = parameter_state.get("step")
            if step is not None and not isinstance(step, int):
                parameter_state["step"] = int(step)
