"""The optimizers of a training run and its learning-rate schedule: AdamW on the Euclidean
parameters and RiemannianAdam on the group-valued ones, stepped together (``Optimizers``), the
n-aware rates of a group RNN's maps (``map_lr_groups``), the warm-up and decay
(``learning_rate_factor``) and one update (``clip_and_step``).
"""

from __future__ import annotations

import math

import geoopt
import torch

from manifold_impl.group_rnn import GroupRNNCell
from manifold_impl.optim import RiemannianAdam
from reference.config import map_lr_scales


def map_lr_groups(model, map_lr):
    """``[(scale, [W or U])]``: the maps of every group RNN cell in ``model`` whose learning rate
    ``map_lr`` scales by a factor other than 1 (``reference.config.map_lr_scales``), one entry per
    such map; empty for ``plain``, for models without a cell and for cells at O(16) or below."""
    if map_lr == "plain":
        return []
    groups = []
    for cell in model.modules():
        if isinstance(cell, GroupRNNCell):
            maps = (cell.input_map.weight, None if cell.state_map is None else cell.state_map.weight)
            groups += [(scale, [weight]) for scale, weight in zip(map_lr_scales(cell.config), maps)
                       if weight is not None and scale != 1.0]
    return groups


class Optimizers:
    """AdamW on Euclidean parameters and RiemannianAdam on group-valued ones, stepped together.

    With ``train.map_lr == "n_aware"`` each group RNN map whose rate is scaled (``map_lr_groups``)
    is an AdamW parameter group of its own at ``scale · lr``; ``rates`` (``{parameter name: lr}``,
    Euclidean parameters only) gives a parameter a rate of its own in the same way, in place of
    ``map_lr``'s. The schedule multiplies every group's rate. Without such a parameter the
    optimizers are the plain ones (one AdamW group).

    ``capturable=True`` (``train.cuda_graphs``) builds both optimizers capturable: their step counts
    and every group's rate are tensors on the parameters' device, which the schedule fills in place,
    so one captured step replays every later one (``CapturedStep``). The schedule's
    base rates stay floats, so it never reads a rate back.

    Raises:
        ValueError: ``rates`` names a parameter the model lacks or a group-valued one.
    """

    def __init__(self, model, train, rates=None, capturable=False):
        group_valued = [p for p in model.parameters() if isinstance(p, geoopt.ManifoldParameter)]
        named = dict(model.named_parameters())
        rates = rates or {}
        wrong = sorted(name for name in rates if name not in named or isinstance(named[name], geoopt.ManifoldParameter))
        if wrong:
            raise ValueError(f"rates name no Euclidean parameter of the model: {wrong}")
        chosen = {id(named[name]) for name in rates}
        scaled = [(scale * train.lr, params) for scale, params in map_lr_groups(model, train.map_lr)
                  if not any(id(p) in chosen for p in params)]
        scaled += [(rates[name], [p]) for name, p in named.items() if name in rates]
        separate = {id(p) for _, params in scaled for p in params}
        euclidean = [p for p in model.parameters()
                     if not isinstance(p, geoopt.ManifoldParameter) and id(p) not in separate]
        self.train, self.capturable = train, capturable
        self.device, self.dtype = next(model.parameters()).device, getattr(torch, train.dtype)
        param_groups = [{"params": euclidean}] + [{"params": params, "lr": lr} for lr, params in scaled]
        self.optimizers = [torch.optim.AdamW(param_groups, lr=train.lr, weight_decay=train.weight_decay,
                                             capturable=capturable)]
        if group_valued:
            self.optimizers.append(RiemannianAdam(group_valued, lr=train.lr, capturable=capturable))
        self._place_rates()
        self.schedules = [torch.optim.lr_scheduler.LambdaLR(o, lambda step: learning_rate_factor(train, step))
                          for o in self.optimizers]

    def _place_rates(self):
        """Every group's ``lr``: a tensor of the parameters' real dtype on their device where capturable
        (AdamW's fused arithmetic takes it as is), else a float; ``initial_lr`` (the schedule's base
        rate) a float in both."""
        for optimizer in self.optimizers:
            for group in optimizer.param_groups:
                rate = float(group["lr"])  # a read of a device tensor, at construction and loading only
                group["lr"] = torch.tensor(rate, dtype=self.dtype, device=self.device) if self.capturable else rate
                group["initial_lr"] = float(group.get("initial_lr", rate))

    def step(self):
        """Step the optimizers, then their schedules."""
        self.step_optimizers()
        self.step_schedules()

    def step_optimizers(self):
        for optimizer in self.optimizers:
            optimizer.step()

    def step_schedules(self):
        for schedule in self.schedules:
            schedule.step()

    def zero_grad(self):
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)

    def state_dict(self):
        return {"optimizers": [o.state_dict() for o in self.optimizers],
                "schedules": [s.state_dict() for s in self.schedules]}

    def load_state_dict(self, state):
        """Load ``state_dict()``'s record, capturable or not (either resumes the other). The rates of
        the next step are this schedule's at the saved step: the saved ones where ``train`` is
        unchanged, and the new schedule's where a resume changed ``steps`` (a finished cosine run
        saved a rate of 0, on which a capturable Adam divides)."""
        for optimizer, saved in zip(self.optimizers, state["optimizers"]):
            optimizer.load_state_dict(saved)
        for optimizer, schedule, saved in zip(self.optimizers, self.schedules, state["schedules"]):
            schedule.load_state_dict(saved)
            factor = learning_rate_factor(self.train, schedule.last_epoch)
            for group, base in zip(optimizer.param_groups, schedule.base_lrs):
                group["lr"] = base * factor
        self._place_rates()


def clip_and_step(model, optimizers, clip, scaler=None):
    """Clip the gradients of ``model`` to norm ``clip`` (none: no clipping) and step ``optimizers``
    (``Optimizers``), not their schedules: what ``CapturedStep`` captures. With a
    ``torch.amp.GradScaler`` (fp16; the gradients already unscaled, ``Precision.backward``) a step
    with an inf or a nan in any gradient is skipped by every optimizer (a scaler alone would let
    an optimizer whose own gradients are finite step, on gradients the joint clipping made nan),
    and the scale shrinks; the check is one host read per step."""
    if scaler is not None:
        gradients = [p.grad for p in model.parameters() if p.grad is not None]
        if not torch.isfinite(torch.nn.utils.get_total_norm(gradients)):
            scaler.update()
            return
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    if scaler is None:
        optimizers.step_optimizers()
        return
    for optimizer in optimizers.optimizers:
        scaler.step(optimizer)
    scaler.update()


def learning_rate_factor(train, step):
    """Multiplier of ``lr`` at ``step`` (0-based): linear warm-up, then constant or cosine to 0."""
    if step < train.warmup:
        return (step + 1) / train.warmup
    if train.schedule == "constant":
        return 1.0
    progress = (step - train.warmup) / max(1, train.steps - train.warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
