"""Models on a device other than the CPU, with the meta device standing in for CUDA.

Every draw happens on the generator's device and is copied, as CUDA requires (a CPU generator cannot
fill a CUDA tensor). The recurrence makes the host wait nowhere: no value read back, no device-to-host
copy and no blocking host-to-device copy per time step, forward or backward; the per-forward checks
(token ids, parameters on their groups) cost one read each, and ids from the host none. A training
step of ``Run.fit`` waits at most twice (the loss, the group check), after a resume too, and an
evaluation no more for longer windows. On the meta device a CPU operand that is not a scalar
already fails, as on CUDA.
"""

import collections
import tempfile
import traceback
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import manifold_impl.manifolds
import manifold_impl.validation
from experiments.baselines import GPTLanguageModel, LSTMLanguageModel
from experiments.training import loop, rundir
from experiments.training.config import build_config
from manifold_impl.group_rnn import GroupRNN, GroupRNNLayer
from manifold_impl.group_transformer import GroupTransformer
from manifold_impl.groups import get_group
from manifold_impl.linalg import _fixed_count, _taylor_exp, expm
from manifold_impl.mlstm import MLSTM
from reference.config import GROUP_NAMES


def _read_at(module, marker):
    """``"a read at <file>:<line>"`` for the one line of ``module`` that holds ``marker``."""
    path = Path(module.__file__)
    (line,) = [number for number, text in enumerate(path.read_text().splitlines(), 1) if marker in text]
    return f"a read at {path.name}:{line}"


TOKEN_CHECK = _read_at(manifold_impl.validation, "elif ((low < 0) | (high >= vocab_size)).item()")
GROUP_CHECK = _read_at(manifold_impl.manifolds, "if not off:")


class DrawsOnTheGeneratorsDevice(TorchDispatchMode):
    """Fails on a random op whose generator lives on another device than the tensors it fills."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        generator = kwargs.get("generator")
        if generator is not None:
            devices = {leaf.device for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)}
            if kwargs.get("device") is not None:
                devices.add(torch.device(kwargs["device"]))
            assert devices <= {generator.device}, f"{func}: a {generator.device} generator fills a tensor on {devices}"
        return func(*args, **kwargs)


class HostWaits(TorchDispatchMode):
    """Counts, by source line, what makes the host wait for a meta tensor: a value read back
    (``.item()``, ``bool()``: answered 0 or False, the answer of a check that passes), a copy to the
    host (``.tolist()``, ``.cpu()``: answered with zeros) and a blocking copy from the host."""

    def __init__(self):
        super().__init__()
        self.waits = collections.Counter()

    def _count(self, kind):
        frames = [frame for frame in traceback.extract_stack()[:-2]
                  if "site-packages" not in frame.filename and "test_devices" not in frame.filename]
        where = f"{frames[-1].filename.rsplit('/', 2)[-1]}:{frames[-1].lineno}" if frames else "?"
        self.waits[f"{kind} at {where}"] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
            self._count("a read")
            return False if args[0].dtype == torch.bool else 0
        if func is torch.ops.aten._to_copy.default:
            source, target = args[0].device.type, torch.device(kwargs.get("device") or args[0].device).type
            if (source, target) == ("meta", "cpu"):
                self._count("a copy to the host")
                return torch.zeros(args[0].shape, dtype=kwargs.get("dtype") or args[0].dtype)
            if (source, target) == ("cpu", "meta") and not kwargs.get("non_blocking"):
                self._count("a blocking copy from the host")
        if (func is torch.ops.aten.copy_.default and args[1].device.type == "cpu" and args[0].device.type == "meta"
                and not (args[2:] and args[2])):
            self._count("a blocking copy from the host")
        return func(*args, **kwargs)


def test_the_count_sees_every_kind_of_host_wait():
    x = torch.ones(3, device="meta")
    with HostWaits() as mode:
        x.sum().item(), bool(x[0] > 0), x.tolist(), torch.ones(3).to("meta"), x.copy_(torch.ones(3))
        torch.ones(3).to("meta", non_blocking=True)
    assert sum(mode.waits.values()) == 5, mode.waits


def test_the_check_refuses_a_cpu_generator_filling_a_tensor_elsewhere():
    with pytest.raises(AssertionError, match="a cpu generator fills a tensor on"), DrawsOnTheGeneratorsDevice():
        torch.nn.init.normal_(torch.empty(3, device="meta"), generator=torch.Generator())


MODELS = {
    "layer": lambda group, **kw: GroupRNNLayer(3, group, 4, mixing="lowrank", mixing_rank=2, **kw),
    "group_rnn": lambda group, **kw: GroupRNN(vocab_size=7, group=group, n=4, embedding_dim=3, readout="prototype",
                                              **kw),
    "group_rnn_spread": lambda group, **kw: GroupRNN(vocab_size=7, group=group, n=4, embedding_dim=3,
                                                     input_init="spread", **kw),
    "group_transformer": lambda group, **kw: GroupTransformer(vocab_size=7, group=group, n=4, num_layers=1,
                                                              mixing="lowrank", mixing_rank=2, **kw),
    "group_transformer_similarity": lambda group, **kw: GroupTransformer(vocab_size=7, group=group, n=4,
                                                                         num_layers=1, attention="similarity", **kw),
}
OTHERS = {
    "mlstm": lambda **kw: MLSTM(vocab_size=7, embedding_dim=16, num_heads=2, **kw),
    "lstm": lambda **kw: LSTMLanguageModel(vocab_size=7, hidden_size=8, **kw),
    "gpt": lambda **kw: GPTLanguageModel(vocab_size=7, width=8, num_heads=2, num_layers=1, max_length=16, **kw),
}


@pytest.mark.parametrize("group, kind", [(group, kind) for group in GROUP_NAMES for kind in MODELS
                                         if not (kind == "group_rnn_spread" and group == "GL")])  # spread: compact only
def test_a_group_model_builds_on_another_device_than_its_generator(group, kind):
    with DrawsOnTheGeneratorsDevice():
        model = MODELS[kind](group, device="meta", generator=torch.Generator().manual_seed(0))
    assert {p.device.type for p in model.parameters()} == {"meta"}


@pytest.mark.parametrize("kind", list(OTHERS))
def test_the_other_models_build_on_another_device_than_their_generator(kind):
    with DrawsOnTheGeneratorsDevice():
        model = OTHERS[kind](device="meta", generator=torch.Generator().manual_seed(0))
    assert {p.device.type for p in model.parameters()} == {"meta"}


def _waits_of_a_training_step(model, length):
    """Host waits of one forward and backward pass over ``[2, length]`` tokens on the meta device."""
    tokens = torch.zeros(2, length, dtype=torch.long, device="meta")
    with HostWaits() as mode:
        out = model(tokens)
        (out[0] if isinstance(out, tuple) else out).float().sum().backward()
    return mode.waits


# closed forms (O(2), SO(3), SU(2), BO(8)), the elementwise T, and the general exponential
GROUPS = [("O", 2), ("SO", 3), ("SU", 2), ("T", 16), ("BO", 8), ("O", 8), ("O", 24), ("U", 8), ("SU", 4), ("GL", 4)]


RECURRENCES = {"fused": {}, "loop": {"recurrence": "loop"}, "scan": {"recurrence": "scan", "recurrent": False},
               "rebuilt": {"keep_state_every": 2}, "reprojected": {"reproject_every": 2}}


@pytest.mark.parametrize("group, n, recurrence", [(group, n, recurrence) for group, n in GROUPS for recurrence in RECURRENCES
                                                  if not (group == "GL" and recurrence == "rebuilt")])  # compact only
def test_a_group_rnn_makes_the_host_wait_once_per_check_and_never_per_time_step(group, n, recurrence):
    model = GroupRNN(vocab_size=7, group=group, n=n, embedding_dim=3, **RECURRENCES[recurrence], device="meta",
                     generator=torch.Generator().manual_seed(0))
    _waits_of_a_training_step(model, 2)  # the first call puts the group's index tensors on the device
    waits = _waits_of_a_training_step(model, 6)
    assert waits == collections.Counter({TOKEN_CHECK: 1, GROUP_CHECK: 1}), waits


ATTENTION_AND_BASELINES = {
    "group_transformer": lambda **kw: GroupTransformer(vocab_size=7, group="T", n=4, num_layers=1, **kw),
    "group_transformer_similarity": lambda **kw: GroupTransformer(vocab_size=7, group="BO", n=4, num_layers=1,
                                                                  attention="similarity", **kw),
    "mlstm_ns": lambda **kw: MLSTM(vocab_size=7, embedding_dim=16, num_heads=2, read="ns", **kw),
    **OTHERS,
}


@pytest.mark.parametrize("kind", list(ATTENTION_AND_BASELINES))
def test_the_other_models_make_the_host_wait_once_per_check_and_never_per_position(kind):
    model = ATTENTION_AND_BASELINES[kind](device="meta", generator=torch.Generator().manual_seed(0))
    _waits_of_a_training_step(model, 2)
    checks = collections.Counter({TOKEN_CHECK: 1})
    if kind.startswith("group"):
        checks[GROUP_CHECK] = 1
    assert _waits_of_a_training_step(model, 6) == checks


@pytest.mark.parametrize("kind", ["group_rnn", "mlstm"])
def test_token_ids_from_the_host_are_checked_there_and_copied_without_blocking(kind):
    model = {"group_rnn": lambda **kw: GroupRNN(vocab_size=7, group="O", n=4, embedding_dim=3, **kw),
             **OTHERS}[kind](device="meta", generator=torch.Generator().manual_seed(0))
    with HostWaits():  # the first call puts the group's index tensors on the device
        model(torch.zeros(2, 5, dtype=torch.long))
    with HostWaits() as mode:
        logits, _ = model(torch.zeros(2, 5, dtype=torch.long))
    assert logits.device.type == "meta"
    assert mode.waits == (collections.Counter({GROUP_CHECK: 1}) if kind == "group_rnn"
                          else collections.Counter())
    with pytest.raises(ValueError, match="token id 7 is out of range"):
        model(torch.full((2, 5), 7))


# a model with group-valued parameters (the prototype readout's), a group Transformer and the LSTM
FIT_MODELS = {"group_rnn": {"group": "O", "n": 8, "embedding_dim": 4, "readout": "prototype"},
              "group_transformer": {"group": "T", "n": 4, "num_layers": 1},
              "lstm": {"hidden_size": 8}}


def _fit_options(model, steps, device="meta", length=6):
    return {"dataset": "ptb_char", "steps": steps, "batch": 2, "length": length, "eval_every": 100,
            "checkpoint_every": 100, "eval_tokens": 40, "device": device, **FIT_MODELS[model]}


def _waits_of_a_run(model, steps, checkpoint=None):
    """Host waits of ``Run.fit`` on the meta device for ``steps`` steps and one evaluation, the last;
    with ``checkpoint``, resumed from that file."""
    with tempfile.TemporaryDirectory() as directory:
        run = loop.Run(directory, build_config(model, "lm", _fit_options(model, steps)))
        if checkpoint is not None:
            run.load_checkpoint(rundir.load_checkpoint_file(checkpoint))
        with HostWaits() as mode:
            run.fit()
    return mode.waits


@pytest.mark.parametrize("model", list(FIT_MODELS))
def test_a_training_step_makes_the_host_wait_at_most_twice(model):
    """Two more steps of ``Run.fit`` (the evaluation at the end is the same): one read of the loss
    each (its value and finiteness at once) and the parameters' check; the ids are checked on the host."""
    extra = _waits_of_a_run(model, 4) - _waits_of_a_run(model, 2)
    expected = collections.Counter({_read_at(loop, "return distributed.mean_loss(loss).item()"): 2})
    if model != "lstm":
        expected[GROUP_CHECK] = 2
    assert extra == expected, extra


@pytest.mark.filterwarnings("ignore:for .*copying from a non-meta parameter")  # the meta device holds no values
@pytest.mark.parametrize("model", list(FIT_MODELS))
def test_a_resumed_run_makes_the_host_wait_as_often_as_a_fresh_one(model, tmp_path):
    """A run trained on the CPU to step 2 and resumed on the device for 2 more steps waits like the
    first 2 steps of a fresh run: the optimizers' step counts stay on the host, where AdamW reads them."""
    run = loop.Run(tmp_path, build_config(model, "lm", _fit_options(model, 2, device="cpu")))
    run.fit()
    assert run.checkpoint_path.exists()
    assert _waits_of_a_run(model, 4, run.checkpoint_path) == _waits_of_a_run(model, 2)


@pytest.mark.parametrize("model", list(FIT_MODELS))
def test_an_evaluation_makes_the_host_wait_no_more_for_longer_windows(model):
    """The same number of windows, three times as long: the same waits (none per position)."""
    waits = []
    for length in (4, 12):
        with tempfile.TemporaryDirectory() as directory:
            run = loop.Run(directory, build_config(model, "lm", _fit_options(model, 2, length=length)))
            with HostWaits():  # the first call puts the group's index tensors on the device
                run.evaluate("valid")
            with HostWaits() as mode:
                run.evaluate("valid")
        waits.append(mode.waits)
    assert waits[0] == waits[1], waits


@pytest.mark.parametrize("name, dtype", [("O", torch.float32), ("O", torch.float64), ("U", torch.float32),
                                         ("GL", torch.float64)])
def test_the_fixed_squarings_of_a_device_give_the_same_bits_within_their_bound_and_nan_beyond(name, dtype):
    group = get_group(name, 8)
    generator = torch.Generator().manual_seed(0)
    coordinates = torch.randn(5, group.dim, generator=generator, dtype=dtype)
    scales = torch.tensor([0.01, 1.0, 30.0, 100.0, 1e5], dtype=dtype)[:, None]  # α up to ≈ 700, then ≈ 7e5
    a = group.hat(coordinates * scales).requires_grad_()
    read_back, fixed = expm(a), expm(a, fixed_squarings=True)
    assert torch.isnan(fixed[4]).all()  # where the read-back count gives a value (a compact group's) or overflows
    assert torch.isfinite(read_back[4]).all() or not group.is_compact
    assert torch.equal(fixed[:4], read_back[:4])
    expected = scipy.linalg.expm(a[:4].detach().to(torch.complex128).numpy())
    error = np.abs(fixed[:4].detach().numpy() - expected).max(axis=(-2, -1))
    assert (error <= 1e3 * torch.finfo(dtype).eps * np.maximum(1.0, np.abs(expected).max(axis=(-2, -1)))).all(), error
    weights = torch.randn(4, 8, 8, generator=generator, dtype=dtype).to(fixed.dtype)
    grads = [torch.autograd.grad((y[:4] * weights).real.sum(), a)[0] for y in (read_back, fixed)]
    assert torch.equal(grads[0][:4], grads[1][:4])


def test_a_lower_fixed_count_gives_the_same_bits_where_it_suffices_and_nan_where_it_does_not():
    """``linalg._fixed_count(k)``: the fixed path runs k squarings (what compiled steps on the CPU set)."""
    group = get_group("O", 8)
    coordinates = torch.randn(4, group.dim, generator=torch.Generator().manual_seed(0))
    a = group.hat(coordinates * torch.tensor([0.01, 1.0, 4.0, 30.0])[:, None])
    needed = [_taylor_exp(a[i:i + 1], False)[2] for i in range(4)]  # each matrix's own count, read back
    assert needed[0] == 0 and needed[-1] > needed[1] > 0
    read_back = expm(a)
    for count in sorted(set(needed)):
        with _fixed_count(count):
            fixed = expm(a, fixed_squarings=True)
        enough = torch.tensor(needed) <= count
        assert torch.equal(fixed[enough], read_back[enough]) and torch.isnan(fixed[~enough]).all()
