"""What a training step captured in a CUDA graph needs, checked on the CPU: capturable optimizers
that train as the eager ones and resume each other, and a step that never makes the host wait while
it is captured (the meta device standing in for CUDA, as in ``test_devices``).

torch refuses ``capturable=True`` on a CPU or meta tensor; the tests let it through, since the
update's arithmetic is the same on every device.
"""

import collections
import importlib

import pytest
import torch

import manifold_impl.validation
from experiments import train
from experiments.models import build_model
from parity_tests.test_devices import GROUP_CHECK, TOKEN_CHECK, HostWaits
from reference.config import GroupRNNConfig


@pytest.fixture
def capturable_anywhere(monkeypatch):
    monkeypatch.setattr(importlib.import_module("torch.optim.adam"), "_get_capturable_supported_devices",
                        lambda supports_xla=True: ["cuda", "cpu", "meta"])


# O(30): the maps get rates of their own (n-aware), so AdamW has three groups; the prototypes are group-valued
CONFIG = GroupRNNConfig(vocab_size=7, group="O", n=30, embedding_dim=5, readout="prototype")
TRAIN = train.TrainConfig(model="group_rnn", steps=8, warmup=2, lr=3e-3, weight_decay=0.1)


def _model(device="cpu"):
    return build_model(CONFIG, device=device, generator=torch.Generator().manual_seed(0))


def _step(model, optimizers, tokens):
    logits, _ = model(tokens)
    loss = logits.square().mean()
    optimizers.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizers.step()


# Adam divides by the root of the second moment, so where a gradient is near zero its rounding moves
# the update by a visible part of a step: the kinds agree to a hundredth of one step (lr), not to the bit
STEP_TOLERANCE = {"rtol": 0.0, "atol": 1e-2 * TRAIN.lr}
TOKENS = torch.randint(0, 7, (3, 5), generator=torch.Generator().manual_seed(1))


def _trained(capturable, steps, start=None):
    """A model and its optimizers after ``steps`` steps; from ``start`` (model and optimizer state) if given."""
    model = _model()
    optimizers = train.Optimizers(model, TRAIN, capturable=capturable)
    if start is not None:
        model.load_state_dict(start[0])
        optimizers.load_state_dict(start[1])
    for _ in range(steps):
        _step(model, optimizers, TOKENS)
    return model, optimizers


def _rates(optimizers):
    return [float(group["lr"]) for optimizer in optimizers.optimizers for group in optimizer.param_groups]


def test_capturable_optimizers_keep_their_rates_on_the_device_and_train_as_the_eager_ones(capturable_anywhere):
    (eager, eager_optimizers), (captured, captured_optimizers) = _trained(False, 5), _trained(True, 5)
    groups = [group for optimizer in captured_optimizers.optimizers for group in optimizer.param_groups]
    assert len(groups) == 4 and all(isinstance(group["lr"], torch.Tensor) for group in groups)
    expected = [rate * train.learning_rate_factor(TRAIN, 5) for rate in (3e-3, *(s * 3e-3 for s in
                train.map_lr_scales(CONFIG)), 3e-3)]
    assert _rates(captured_optimizers) == pytest.approx(expected, rel=1e-12)
    assert _rates(eager_optimizers) == pytest.approx(expected, rel=1e-12)
    for name, value in eager.state_dict().items():
        torch.testing.assert_close(captured.state_dict()[name], value, **STEP_TOLERANCE, msg=name)


@pytest.mark.parametrize("saved_capturable", [False, True])
def test_capturable_and_eager_optimizers_resume_each_other(capturable_anywhere, saved_capturable):
    """A run checkpointed in one kind and resumed in the other goes on as the uninterrupted run."""
    model, optimizers = _trained(saved_capturable, 3)
    start = ({k: v.clone() for k, v in model.state_dict().items()}, optimizers.state_dict())
    resumed, resumed_optimizers = _trained(not saved_capturable, 3, start)
    uninterrupted, _ = _trained(not saved_capturable, 6)
    kinds = {type(group["lr"]) for optimizer in resumed_optimizers.optimizers for group in optimizer.param_groups}
    assert kinds == {torch.Tensor if not saved_capturable else float}
    for name, value in uninterrupted.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value, **STEP_TOLERANCE, msg=name)


def test_a_step_captured_on_a_device_never_makes_the_host_wait(capturable_anywhere, monkeypatch):
    """Forward, backward, clipping and both capturable optimizers, as a CUDA graph captures them:
    the checks assert on the device (what they do while a graph is captured) and nothing is read back.
    After a first step (a warm-up: it puts the group's index tensors on the device), the same step
    uncaptured reads the two checks' verdicts (ids, parameters on their groups)."""
    model = _model("meta")
    optimizers = train.Optimizers(model, TRAIN, capturable=True)
    tokens = torch.zeros(3, 5, dtype=torch.long, device="meta")
    with HostWaits():
        _step(model, optimizers, tokens)
    with HostWaits() as eager:
        _step(model, optimizers, tokens)
    assert eager.waits == collections.Counter({TOKEN_CHECK: 1, GROUP_CHECK: 1}), eager.waits
    monkeypatch.setattr(manifold_impl.validation, "_traced", lambda tensor: True)
    with HostWaits() as captured:
        _step(model, optimizers, tokens)
    assert captured.waits == collections.Counter(), captured.waits
