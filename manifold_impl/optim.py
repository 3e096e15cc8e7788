"""Optimizers: geoopt's Riemannian ones, which train the ``GroupManifold`` parameters of every
group, and torch's AdamW for Euclidean models. ``reference/optim.py`` writes their math out for
step parity."""

import geoopt.optim
import torch
from geoopt.optim import RiemannianSGD
from torch.optim import AdamW

__all__ = ["AdamW", "RiemannianAdam", "RiemannianSGD"]


class RiemannianAdam(geoopt.optim.RiemannianAdam):
    """geoopt's RiemannianAdam, resumable exactly, and capturable in a CUDA graph on request.

    geoopt counts steps in a Python int, but ``load_state_dict`` runs ``torch.optim.Adam``'s
    ``__setstate__``, which turns every ``state["step"]`` into a float32 tensor; the bias
    corrections 1 − βᵗ are then computed in float32 and a resumed run leaves the uninterrupted
    one. Here the count is an int again after loading (exact: a float32 holds every count < 2²⁴).

    ``capturable=True`` keeps the count as a float64 tensor on the parameter's device and computes
    the bias corrections there (the same float64 values as geoopt's, so the same steps bit for
    bit), and takes ``lr`` as a tensor too: every step then runs the same operations with the same
    constants, so one captured step replays all later ones. It refuses ``stabilize`` (a count read
    on the host) and a mix of capturable and other parameter groups.

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
        if param_group.get("capturable", self.defaults["capturable"]) != self.defaults["capturable"]:
            raise ValueError("RiemannianAdam takes capturable for all its parameter groups or for none")
        if self.defaults["capturable"] and param_group.get("stabilize", self._stabilize) is not None:
            raise ValueError("RiemannianAdam(capturable=True) cannot stabilize: it would read the step count "
                             "on the host every step; use stabilize=None")
        super().add_param_group(param_group)

    def __setstate__(self, state):
        super().__setstate__(state)
        for parameter, parameter_state in self.state.items():
            step = parameter_state.get("step")
            if step is None:
                continue
            if self.defaults.get("capturable"):
                parameter_state["step"] = torch.as_tensor(step, dtype=torch.float64, device=parameter.device)
            elif not isinstance(step, int):
                parameter_state["step"] = int(step)

    def step(self, closure=None):
        if not self.defaults["capturable"]:
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            for group in self.param_groups:
                for point in group["params"]:
                    if point.grad is not None:
                        self._capturable_update(group, point)
        return loss

    def _capturable_update(self, group, point):
        """geoopt's update of one parameter, with the count and the bias corrections on its device."""
        (beta1, beta2), amsgrad = group["betas"], group["amsgrad"]
        manifold = point.manifold if isinstance(point, (geoopt.ManifoldParameter, geoopt.ManifoldTensor)) \
            else self._default_manifold
        state = self.state[point]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float64, device=point.device)
            state["exp_avg"] = torch.zeros_like(point)
            state["exp_avg_sq"] = torch.zeros_like(point)
            if amsgrad:
                state["max_exp_avg_sq"] = torch.zeros_like(point)
        step, exp_avg, exp_avg_sq = state["step"], state["exp_avg"], state["exp_avg_sq"]
        step.add_(1)
        grad = manifold.egrad2rgrad(point, point.grad.add_(point, alpha=group["weight_decay"]))
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).add_(manifold.component_inner(point, grad), alpha=1 - beta2)
        second = torch.maximum(state["max_exp_avg_sq"], exp_avg_sq, out=state["max_exp_avg_sq"]) if amsgrad \
            else exp_avg_sq
        denom = second.div(1 - beta2 ** step).sqrt_()
        direction = exp_avg.div(1 - beta1 ** step) / denom.add_(group["eps"])
        new_point, exp_avg_new = manifold.retr_transp(point, -group["lr"] * direction, exp_avg)
        point.copy_(new_point)
        exp_avg.copy_(exp_avg_new)
