"""``torch.compile(fullgraph=True)`` of the group RNN's cell step and of a training step with the
fused recurrence (``train --compile``), on the CPU.

Each is one graph, forward and backward: the exponential runs its fixed number of squarings
wherever it is traced (no count read back), the fused recurrence's backward is written out (no
autograd inside), and the value checks are assertions in the graph. Through ``aot_eager``
(dynamo's capture and AOT autograd, no code generation) the eager bits, values and gradients;
through inductor, the eager values to float32 rounding.
"""

import pytest
import torch

from manifold_impl.group_rnn import GroupRNN

# what torch 2.13's compiler itself warns of: dynamo instantiates an autograd.Function and reads
# .grad of its non-leaf inputs while it traces one, inductor imports deprecated torch.jit parts
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")]

# closed forms (O(2), SO(3), SU(2), BO(8)), the elementwise T, and the general exponential
GROUPS = [("O", 2), ("SO", 3), ("SU", 2), ("T", 8), ("BO", 8), ("O", 8), ("U", 4), ("GL", 4)]


def _step_and_gradients(cell, step, group):
    """The step at a random state and drive, and the gradients of a random projection of it with
    respect to the state, the drive and U."""
    state = group.pack(group.random((2,), generator=torch.Generator().manual_seed(1))).requires_grad_()
    drive = torch.randn(2, group.dim, generator=torch.Generator().manual_seed(2)).requires_grad_()
    out = step(state, drive)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(3)).to(out.dtype)
    return (out, *torch.autograd.grad((out * weights).real.sum(), [state, drive, cell.state_map.weight]))


@pytest.mark.parametrize("backend, group_name, n", [("aot_eager", *pair) for pair in GROUPS] + [("inductor", "O", 8)])
def test_the_cell_step_compiles_to_one_graph_forward_and_backward(backend, group_name, n):
    torch._dynamo.reset()
    model = GroupRNN(vocab_size=7, group=group_name, n=n, embedding_dim=3, generator=torch.Generator().manual_seed(0))
    cell = model.cell
    compiled = _step_and_gradients(cell, torch.compile(cell.step, fullgraph=True, backend=backend), model.group)
    eager = _step_and_gradients(cell, cell.step, model.group)
    for got, expected in zip(compiled, eager):
        if backend == "aot_eager":
            assert torch.equal(got, expected)
        else:
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def _loss_and_gradients(model, loss_of, tokens):
    """``loss_of(tokens)`` and the gradients of every parameter, by ``.backward()``."""
    model.zero_grad()
    loss = loss_of(tokens)
    loss.backward()
    return [loss.detach()] + [param.grad.clone() for param in model.parameters()]


# the fused recurrence for the closed forms, T, BO, a dense real and a complex group, with a bound
TRAINING = [("O", 3, {}), ("SU", 2, {}), ("T", 8, {}), ("BO", 8, {}), ("O", 8, {"mixing": "lowrank", "mixing_rank": 2}),
            ("U", 4, {"update_bound": 1.0})]


@pytest.mark.parametrize("backend, group_name, n, options",
                         [("aot_eager", *case) for case in TRAINING] + [("inductor", "O", 8, {})],
                         ids=[f"aot_eager-{g}{n}" for g, n, _ in TRAINING] + ["inductor-O8"])
def test_a_training_step_of_the_fused_recurrence_compiles_to_one_graph(backend, group_name, n, options):
    """The model's loss (checks, embedding, the fused recurrence, readout, cross-entropy) as one
    graph, its backward (the fused recurrence's written-out VJPs) compiled with it; the same loss
    and gradients as eager (bits through ``aot_eager``)."""
    torch._dynamo.reset()
    model = GroupRNN(vocab_size=7, group=group_name, n=n, embedding_dim=3, **options,
                     generator=torch.Generator().manual_seed(0))
    assert model.config.recurrence == "fused"
    tokens = torch.randint(0, 7, (2, 5), generator=torch.Generator().manual_seed(1))  # 4 steps: the loop unrolls

    def loss_of(tokens):
        logits, _ = model(tokens[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    compiled = _loss_and_gradients(model, torch.compile(loss_of, fullgraph=True, backend=backend), tokens)
    eager = _loss_and_gradients(model, loss_of, tokens)
    for got, expected in zip(compiled, eager, strict=True):
        if backend == "aot_eager":
            assert torch.equal(got, expected)
        else:
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_a_compiled_call_still_refuses_out_of_range_tokens_and_off_group_parameters():
    """The value checks run in the graph as assertions (no host read)."""
    torch._dynamo.reset()
    model = GroupRNN(vocab_size=7, group="O", n=4, embedding_dim=3, generator=torch.Generator().manual_seed(0))
    compiled = torch.compile(lambda tokens: model(tokens)[0], fullgraph=True, backend="aot_eager")
    compiled(torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(RuntimeError, match="out of range"):
        compiled(torch.full((1, 3), 7))
    with torch.no_grad():
        model.cell.initial_state.mul_(2)
    with pytest.raises(RuntimeError, match="off its group"):
        compiled(torch.zeros(1, 3, dtype=torch.long))


def test_a_run_with_compile_takes_the_eager_runs_steps(tmp_path):
    """``--compile aot_eager``: the same parameters after three steps of ``Run.fit`` as eager, bit for
    bit; an unknown backend is refused with the choices."""
    from experiments import train

    torch._dynamo.reset()
    options = {"dataset": "ptb_char", "group": "O", "n": 4, "embedding_dim": 4, "steps": 3, "batch": 2,
               "length": 6, "eval_tokens": 16, "eval_every": 3, "compile": "aot_eager"}
    compiled = train.Run(tmp_path / "compiled", train.build_config("group_rnn", "lm", options))
    eager = train.Run(tmp_path / "eager", train.build_config("group_rnn", "lm", {**options, "compile": None}))
    for run in (compiled, eager):
        run.directory.mkdir()
        run.fit()
    assert compiled.training_loss is not compiled._loss and eager.training_loss == eager._loss
    for (name, got), expected in zip(compiled.model.state_dict().items(), eager.model.state_dict().values(),
                                     strict=True):
        assert torch.equal(got, expected), name
    with pytest.raises(ValueError, match="unknown compile backend 'inductr'.*inductor"):
        train.build_config("group_rnn", "lm", {**options, "compile": "inductr"})
