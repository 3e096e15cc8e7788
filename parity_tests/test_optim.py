"""Reference optimizers (reference/optim.py) against geoopt's / torch's, over several steps, on
every group: the moment transport between steps is exercised here, not only the first step."""

import numpy as np
import pytest
import torch

from manifold_impl.groups import get_group as torch_group
from manifold_impl.manifolds import group_parameter
from manifold_impl.optim import AdamW as TorchAdamW
from manifold_impl.optim import RiemannianAdam as TorchRiemannianAdam
from manifold_impl.optim import RiemannianSGD as TorchRiemannianSGD
from parity_tests.harness import relative_error
from parity_tests.tolerances import PARITY
from reference.config import GROUP_NAMES
from reference.groups import get_group
from reference.optim import AdamW, RiemannianAdam, RiemannianSGD
from reference.params import ParamSpec

STEPS = 3


def problem(name, seed=0):
    """A group-valued point, a Euclidean vector, and STEPS ambient gradients for each."""
    group = get_group(name, 4)
    rng = np.random.default_rng(seed)
    point = group.random((2,), generator=rng)
    vector = rng.standard_normal(5)
    shape = point.shape
    grads = [{"x": rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if group.is_complex else 0),
              "w": rng.standard_normal(5)} for _ in range(STEPS)]
    specs = {"x": ParamSpec(shape, group=group), "w": ParamSpec((5,))}
    return group, specs, {"x": point, "w": vector}, grads


def run_torch(name, params, grads, make_optimizer):
    x = group_parameter(torch.from_numpy(params["x"]).clone(), torch_group(name, 4))  # params stay as given
    w = torch.nn.Parameter(torch.from_numpy(params["w"]).clone())
    optimizer = make_optimizer([x, w])
    for g in grads:
        x.grad, w.grad = torch.from_numpy(g["x"]).clone(), torch.from_numpy(g["w"]).clone()
        optimizer.step()
    return {"x": x.detach().numpy(), "w": w.detach().numpy()}


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("name", GROUP_NAMES)
def test_riemannian_adam_matches_geoopt_over_several_steps(name, weight_decay):
    group, specs, params, grads = problem(name)
    reference = RiemannianAdam(specs, lr=0.05, weight_decay=weight_decay)
    ours = dict(params)
    for g in grads:
        ours = reference.step(ours, g)
    theirs = run_torch(name, params, grads,
                       lambda p: TorchRiemannianAdam(p, lr=0.05, weight_decay=weight_decay))
    for key in ours:
        assert relative_error(theirs[key], ours[key]) <= PARITY["float64"]["gradient"], key
    assert group.is_member(ours["x"])


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_riemannian_adam_resumes_bitwise_from_its_state_dict(name):
    """One step, then a fresh optimizer loads its state_dict and takes two more: bit for bit the
    uninterrupted three. (torch's Adam.__setstate__ turns geoopt's int step count into a float32
    tensor, and the bias corrections 1 − βᵗ with it, unless the count is cast back.)"""
    _, _, params, grads = problem(name, seed=2)
    saved = {}

    def keep(p):
        saved["optimizer"] = TorchRiemannianAdam(p, lr=0.05)
        return saved["optimizer"]

    def resume(p):
        optimizer = TorchRiemannianAdam(p, lr=0.05)
        optimizer.load_state_dict(saved["optimizer"].state_dict())
        return optimizer

    uninterrupted = run_torch(name, params, grads, lambda p: TorchRiemannianAdam(p, lr=0.05))
    resumed = run_torch(name, run_torch(name, params, grads[:1], keep), grads[1:], resume)
    for key in uninterrupted:
        np.testing.assert_array_equal(resumed[key], uninterrupted[key], err_msg=key)


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_riemannian_sgd_matches_geoopt_over_several_steps(name):
    group, specs, params, grads = problem(name, seed=1)
    reference = RiemannianSGD(specs, lr=0.05, weight_decay=0.1)
    ours = dict(params)
    for g in grads:
        ours = reference.step(ours, g)
    theirs = run_torch(name, params, grads, lambda p: TorchRiemannianSGD(p, lr=0.05, weight_decay=0.1))
    for key in ours:
        assert relative_error(theirs[key], ours[key]) <= PARITY["float64"]["gradient"], key


def test_adamw_matches_torch_over_several_steps():
    rng = np.random.default_rng(2)
    params = {"w": rng.standard_normal((3, 4))}
    grads = [{"w": rng.standard_normal((3, 4))} for _ in range(STEPS)]
    reference = AdamW(lr=0.05, weight_decay=0.1)
    ours = dict(params)
    for g in grads:
        ours = reference.step(ours, g)
    w = torch.nn.Parameter(torch.from_numpy(params["w"]))
    optimizer = TorchAdamW([w], lr=0.05, weight_decay=0.1)
    for g in grads:
        w.grad = torch.from_numpy(g["w"]).clone()
        optimizer.step()
    assert relative_error(w.detach(), ours["w"]) <= PARITY["float64"]["gradient"]


@pytest.mark.parametrize("group", ["U", "SU", "T"])
def test_amsgrad_is_refused_clearly_for_complex_groups(group):
    g, real = torch_group(group, 3), torch_group("O", 3)
    x = group_parameter(g.identity((2,)), g)
    with pytest.raises(ValueError, match=r"amsgrad=True.*complex.*use amsgrad=False"):
        TorchRiemannianAdam([x], lr=1e-2, amsgrad=True)
    optimizer = TorchRiemannianAdam([group_parameter(real.identity((2,)), real)], lr=1e-2, amsgrad=True)
    with pytest.raises(ValueError, match=r"amsgrad=True.*complex"):  # a group added later is checked too
        optimizer.add_param_group({"params": [x]})


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("name, amsgrad", [(name, False) for name in GROUP_NAMES] + [  # amsgrad: real groups only
    (name, True) for name in GROUP_NAMES if not torch_group(name, 4).is_complex])
def test_a_capturable_riemannian_adam_takes_geoopts_steps_bit_for_bit(name, amsgrad, weight_decay):
    _, _, params, grads = problem(name, seed=3)
    options = {"lr": 0.05, "weight_decay": weight_decay, "amsgrad": amsgrad}
    theirs = run_torch(name, params, grads, lambda p: TorchRiemannianAdam(p, **options))
    ours = run_torch(name, params, grads, lambda p: TorchRiemannianAdam(p, capturable=True, **options))
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_a_capturable_riemannian_adam_resumes_bitwise_with_its_count_on_the_device(name):
    _, _, params, grads = problem(name, seed=4)
    saved = {}

    def keep(p):
        saved["optimizer"] = TorchRiemannianAdam(p, lr=0.05, capturable=True)
        return saved["optimizer"]

    def resume(p):
        optimizer = TorchRiemannianAdam(p, lr=0.05, capturable=True)
        optimizer.load_state_dict(saved["optimizer"].state_dict())
        steps = [state["step"] for state in optimizer.state.values()]
        assert all(isinstance(s, torch.Tensor) and s.dtype == torch.float64 and s.item() == 1 for s in steps)
        return optimizer

    uninterrupted = run_torch(name, params, grads, lambda p: TorchRiemannianAdam(p, lr=0.05))
    resumed = run_torch(name, run_torch(name, params, grads[:1], keep), grads[1:], resume)
    for key in uninterrupted:
        np.testing.assert_array_equal(resumed[key], uninterrupted[key], err_msg=key)


class _Operations(torch.utils._python_dispatch.TorchDispatchMode):
    """Records each dispatched operation with its arguments, tensors by shape, dtype and device only."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace != "profiler":  # record_function markers, not computation
            self.calls.append((func, torch.utils._pytree.tree_map(self._describe, (args, kwargs))))
        return func(*args, **kwargs)

    @staticmethod
    def _describe(value):
        if isinstance(value, torch.Tensor):
            return f"tensor{tuple(value.shape)} {value.dtype} on {value.device}"
        return repr(value) if isinstance(value, float) else value  # NaN equal to NaN


def _operations_of_steps(capturable, name, steps=3):
    """The operations of each optimizer step after the first, on the meta device (a value read
    there fails), with the rate as a tensor under a warm-up schedule (stepped between the steps)."""
    group = torch_group(name, 4)
    point = group_parameter(group.identity(dtype=torch.float64, device="meta").expand(2, -1, -1).clone(), group)
    weight = torch.nn.Parameter(torch.zeros(5, dtype=torch.float64, device="meta"))
    optimizer = TorchRiemannianAdam([point, weight], lr=0.05, capturable=capturable)
    if capturable:  # set after construction, whose range check reads the rate (once, where it can)
        optimizer.param_groups[0]["lr"] = torch.tensor(0.05, dtype=torch.float64, device="meta")
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 10))
    recorded = []
    for _ in range(steps):
        point.grad, weight.grad = torch.empty_like(point), torch.empty_like(weight)
        with _Operations() as operations:
            optimizer.step()
        schedule.step()  # outside the captured step: it sets the rate tensor in place
        recorded.append(operations.calls)
    return recorded[1:]


@pytest.mark.parametrize("name", ["O", "U", "T", "BO"])
def test_every_capturable_step_runs_the_same_operations_with_the_same_constants(name):
    """What a CUDA graph needs: a step captured once replays every later one. geoopt's own step
    passes its bias corrections and the schedule's rate as changing Python numbers, and fails."""
    second, third = _operations_of_steps(True, name)
    assert second == third
    tensors = [leaf for _, arguments in second for leaf in torch.utils._pytree.tree_leaves(arguments)
               if isinstance(leaf, str) and leaf.startswith("tensor")]
    assert tensors and all(t.endswith(" on meta") for t in tensors)  # no host tensor a launch would read
    second, third = _operations_of_steps(False, name)
    assert second != third


def test_capturable_refuses_stabilize_and_a_mix_of_groups():
    group = torch_group("O", 3)
    point = group_parameter(group.identity(dtype=torch.float64), group)
    with pytest.raises(ValueError, match="cannot stabilize"):
        TorchRiemannianAdam([point], capturable=True, stabilize=10)
    with pytest.raises(ValueError, match="for all its parameter groups or for none"):
        TorchRiemannianAdam([{"params": [point], "capturable": False}], capturable=True)
