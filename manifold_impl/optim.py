"""Optimizers: geoopt's Riemannian ones, which train the ``GroupManifold`` parameters of every
group, and torch's AdamW for Euclidean models. ``reference/optim.py`` writes their math out for
step parity."""

import geoopt.optim
import torch
from geoopt.optim import RiemannianSGD
from torch.optim import AdamW

__all__ = ["AdamW", "RiemannianAdam", "RiemannianSGD"]


class RiemannianAdam(geoopt.optim.RiemannianAdam):
    """geoopt's RiemannianAdam, resumable exactly.

    geoopt counts steps in a Python int, but ``load_state_dict`` runs ``torch.optim.Adam``'s
    ``__setstate__``, which turns every ``state["step"]`` into a float32 tensor; the bias
    corrections 1 − βᵗ are then computed in float32 and a resumed run leaves the uninterrupted
    one. Here the count is an int again after loading (exact: a float32 holds every count < 2²⁴).

    ``amsgrad=True`` is refused for complex parameters (U, SU, T): geoopt keeps their second
    moments in the parameter's complex dtype and cannot take their running maximum.
    """

    def add_param_group(self, param_group):
        params = param_group["params"]
        param_group["params"] = [params] if isinstance(params, torch.Tensor) else list(params)
        if param_group.get("amsgrad", self.defaults["amsgrad"]):
            for index, parameter in enumerate(param_group["params"]):
                if parameter.is_complex():
                    raise ValueError(f"RiemannianAdam(amsgrad=True) does not support complex parameters, and "
                                     f"parameter {index} of this group is {parameter.dtype} (the groups U, SU "
                                     "and T): use amsgrad=False")
        super().add_param_group(param_group)

    def __setstate__(self, state):
        super().__setstate__(state)
        for parameter_state in self.state.values():
            step = parameter_state.get("step")
            if step is not None and not isinstance(step, int):
                parameter_state["step"] = int(step)
