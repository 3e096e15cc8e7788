"""A training step captured in CUDA graphs (``experiments.cuda_graphs.CapturedStep``), checked on the CPU:
capturable optimizers that train as the eager ones and resume each other, a step that never makes
the host wait while it is captured (the meta device standing in for CUDA, as in ``test_devices``),
and the captured run's bookkeeping (warm-up, capture, replays) with the graphs replaced by calls.

torch refuses ``capturable=True`` on a CPU or meta tensor; the tests let it through, since the
update's arithmetic is the same on every device.
"""

import collections
import contextlib
import importlib
import tempfile

import pytest
import torch

import manifold_impl.validation
from experiments.training import loop
from experiments.models import build_model
from experiments.training import cuda_graphs, optim
from experiments.training.config import TrainConfig, build_config
from manifold_impl.group_rnn import GroupRNN
from parity_tests.test_devices import ATTENTION_AND_BASELINES, GROUP_CHECK, GROUPS, TOKEN_CHECK, HostWaits, _read_at
from reference.config import GroupRNNConfig, map_lr_scales


@pytest.fixture
def capturable_anywhere(monkeypatch):
    monkeypatch.setattr(importlib.import_module("torch.optim.adam"), "_get_capturable_supported_devices",
                        lambda supports_xla=True: ["cuda", "cpu", "meta"])


# O(30): the maps get rates of their own (n-aware), so AdamW has three groups; the prototypes are group-valued
CONFIG = GroupRNNConfig(vocab_size=7, group="O", n=30, embedding_dim=5, readout="prototype")
TRAIN = TrainConfig(model="group_rnn", steps=8, warmup=2, lr=3e-3, weight_decay=0.1)


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
    optimizers = optim.Optimizers(model, TRAIN, capturable=capturable)
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
    expected = [rate * optim.learning_rate_factor(TRAIN, 5) for rate in (3e-3, *(s * 3e-3 for s in
                map_lr_scales(CONFIG)), 3e-3)]
    assert all(group["lr"].dtype == torch.float32 for group in groups)  # the parameters' dtype
    assert _rates(captured_optimizers) == pytest.approx(expected, rel=1e-7)
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
    optimizers = optim.Optimizers(model, TRAIN, capturable=True)
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


def _group_rnn(group, n):
    return lambda **kw: GroupRNN(vocab_size=7, group=group, n=n, embedding_dim=3, readout="prototype", **kw)


CAPTURED_MODELS = {**{f"group_rnn-{group}{n}": _group_rnn(group, n) for group, n in GROUPS}, **ATTENTION_AND_BASELINES}


@pytest.mark.parametrize("kind", list(CAPTURED_MODELS))
def test_every_model_steps_without_a_host_wait_while_captured(kind, capturable_anywhere, monkeypatch):
    """Every group's RNN (fused recurrence), the attention models and the baselines: a training step
    with capturable optimizers, after a warm-up step, makes no host wait while a graph is captured."""
    model = CAPTURED_MODELS[kind](device="meta", generator=torch.Generator().manual_seed(0))
    optimizers = optim.Optimizers(model, TRAIN, capturable=True)
    tokens = torch.zeros(3, 5, dtype=torch.long, device="meta")
    with HostWaits():
        _step(model, optimizers, tokens)
    monkeypatch.setattr(manifold_impl.validation, "_traced", lambda tensor: True)
    with HostWaits() as captured:
        _step(model, optimizers, tokens)
    assert captured.waits == collections.Counter(), captured.waits


def test_cuda_graphs_need_a_cuda_device_and_the_eager_step():
    for device in ("cuda", "cuda:1"):
        assert TrainConfig(model="lstm", device=device, cuda_graphs=True).cuda_graphs
    with pytest.raises(ValueError, match="needs a CUDA device"):
        TrainConfig(model="lstm", cuda_graphs=True)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="got device 'auto' on a machine without CUDA"):
            TrainConfig(model="lstm", device="auto", cuda_graphs=True)
    with pytest.raises(ValueError, match="choose compile or cuda_graphs"):
        TrainConfig(model="lstm", device="cuda", cuda_graphs=True, compile="inductor")
    with pytest.raises(ValueError, match="true or false"):
        TrainConfig(model="lstm", device="cuda", cuda_graphs="yes")


class Graphs:
    """CUDA graphs on another device: a capture runs nothing and returns a replay that runs the
    function again (``inside``: the context both run in); captures, replays and side-stream runs counted."""

    def __init__(self, inside=contextlib.nullcontext):
        self.inside, self.counts = inside, collections.Counter()

    def capture(self, function):
        self.counts["captures"] += 1

        def replay():
            self.counts["replays"] += 1
            with self.inside():
                function()
        return replay

    def side_stream(self, function):
        self.counts["side-stream runs"] += 1
        function()


def _captured_run(directory, options, graphs, monkeypatch, warmup):
    """A ``loop.Run`` whose steps ``cuda_graphs.CapturedStep`` runs from ``graphs``."""
    monkeypatch.setattr(cuda_graphs, "capture", graphs.capture)
    monkeypatch.setattr(cuda_graphs, "on_side_stream", graphs.side_stream)
    run = loop.Run(directory, build_config("group_rnn", "lm", options))
    run.optimizers = optim.Optimizers(run.model, run.train, capturable=True)
    run.captured = cuda_graphs.CapturedStep(run.model, run.training_loss, run.optimizers, run.train.clip, warmup=warmup)
    return run


RUN_OPTIONS = {"dataset": "ptb_char", "batch": 2, "length": 6, "eval_every": 3, "checkpoint_every": 100,
               "eval_tokens": 40, "warmup": 2, "group": "O", "n": 8, "embedding_dim": 4, "readout": "prototype"}


def test_a_captured_run_trains_as_the_eager_one_bit_for_bit(capturable_anywhere, monkeypatch, tmp_path):
    """Two warm-up steps, the capture, then replays: the same parameters and metrics as the eager
    steps with the same (capturable) optimizers."""
    options = {**RUN_OPTIONS, "steps": 6, "device": "cpu"}
    (tmp_path / "captured").mkdir(), (tmp_path / "eager").mkdir()
    graphs = Graphs()
    captured = _captured_run(tmp_path / "captured", options, graphs, monkeypatch, warmup=2)
    captured.fit()
    eager = loop.Run(tmp_path / "eager", build_config("group_rnn", "lm", options))
    eager.optimizers = optim.Optimizers(eager.model, eager.train, capturable=True)
    eager.fit()
    assert graphs.counts == {"captures": 2, "replays": 8, "side-stream runs": 4}
    for name, value in eager.model.state_dict().items():
        assert torch.equal(captured.model.state_dict()[name], value), name
    assert (tmp_path / "captured" / "metrics.jsonl").read_text() == (tmp_path / "eager" / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match=r"replays the shapes of the first batch, \(2, 6\), and the task gave \(2, 5\)"):
        captured.backward(*(batch[:, :5] for batch in captured.task.train_batch(captured.rng, 2, 6)))


def test_a_captured_run_resumes_bit_for_bit(capturable_anywhere, monkeypatch, tmp_path):
    """Killed after the checkpoint of step 4 (2 warm-up steps, the capture, a replay) and resumed for
    2 steps (a warm-up again): the parameters and metrics of the uninterrupted captured run."""
    options = {**RUN_OPTIONS, "steps": 6, "checkpoint_every": 2, "device": "cpu"}
    for name in ("whole", "resumed"):
        (tmp_path / name).mkdir()
    graphs = {name: Graphs() for name in ("whole", "first", "resumed")}
    whole = _captured_run(tmp_path / "whole", options, graphs["whole"], monkeypatch, warmup=2)
    whole.fit()
    first = _captured_run(tmp_path / "resumed", options, graphs["first"], monkeypatch, warmup=2)
    save = first.save_checkpoint

    def killed_after_step_four():
        save()
        if first.step == 4:
            raise KeyboardInterrupt  # as a kill right after the checkpoint

    first.save_checkpoint = killed_after_step_four
    with pytest.raises(KeyboardInterrupt):
        first.fit()
    resumed = _captured_run(tmp_path / "resumed", options, graphs["resumed"], monkeypatch, warmup=2)
    resumed.load_checkpoint()
    assert resumed.step == 4
    resumed.fit()
    assert {name: g.counts for name, g in graphs.items()} == {  # the patched graphs ran every step
        "whole": {"side-stream runs": 4, "captures": 2, "replays": 8},  # steps 1-2 warm up, 3-6 replay
        "first": {"side-stream runs": 4, "captures": 2, "replays": 4},  # killed after step 4
        "resumed": {"side-stream runs": 4}}  # steps 5-6 warm up again: the last step is not captured
    for name, value in whole.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name
    assert (tmp_path / "resumed" / "metrics.jsonl").read_text() == (tmp_path / "whole" / "metrics.jsonl").read_text()


@pytest.mark.parametrize("capturable", [False, True])
def test_a_finished_run_resumed_for_more_steps_follows_the_new_schedule(capturable_anywhere, tmp_path, capturable):
    """A cosine run of 4 steps ends at rate 0; resumed with 6, step 5 takes the 6-step schedule's
    rate (a capturable Adam given 0 divides by it: NaN where a second moment is 0, as in the
    embedding's unseen rows)."""
    def make(steps):
        run = loop.Run(tmp_path, build_config("group_rnn", "lm", {**RUN_OPTIONS, "steps": steps, "device": "cpu"}))
        run.optimizers = optim.Optimizers(run.model, run.train, capturable=capturable)
        return run

    make(4).fit()
    resumed = make(6)
    resumed.load_checkpoint()
    assert _rates(resumed.optimizers) == pytest.approx([1e-3 * optim.learning_rate_factor(resumed.train, 4)] * 2)
    resumed.fit()
    assert all(torch.isfinite(value).all() for value in resumed.model.state_dict().values())


def test_a_captured_step_makes_the_host_wait_once_for_the_loss(capturable_anywhere, monkeypatch):
    """On the meta device, with the checks asserting on the device while a graph is captured or
    replayed: no host wait in a capture, and one per replayed step, the loss's read."""
    traced, replaying = manifold_impl.validation._traced, [False]
    monkeypatch.setattr(manifold_impl.validation, "_traced", lambda tensor: replaying[0] or traced(tensor))

    @contextlib.contextmanager
    def in_a_graph():
        replaying[0] = True
        with HostWaits() as mode:
            yield
        replaying[0] = False
        assert mode.waits == collections.Counter(), mode.waits

    waits = []
    for steps in (3, 5):
        with tempfile.TemporaryDirectory() as directory:
            options = {**RUN_OPTIONS, "steps": steps, "eval_every": 100, "device": "meta"}
            run = _captured_run(directory, options, Graphs(in_a_graph), monkeypatch, warmup=1)
            with HostWaits() as mode:
                run.fit()
        waits.append(mode.waits)
    loss_read = _read_at(cuda_graphs, "return self.loss.item()")
    assert waits[1] - waits[0] == collections.Counter({loss_read: 2}), waits
