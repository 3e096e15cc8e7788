"""``torch.compile(fullgraph=True)`` of the group RNN's cell step and of a training step with the
fused recurrence, and the fused recurrence's compiled steps (``compile_steps``, ``train --compile``),
on the CPU.

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
                         # the closed forms, T and BO under make test-slow (their cell step compiles above)
                         [pytest.param("aot_eager", *case, marks=[] if case[2] else [pytest.mark.slow])
                          for case in TRAINING] + [("inductor", "O", 8, {})],
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


# compile_steps: a complex group with a bound, T, and the variants with loop paths of their own
# (memory-flat rebuilt states with a re-projection, input-driven updates); under make test-slow also
# the closed forms, BO, low-rank mixing and truncation
STEPS = [("U", 4, {"update_bound": 1.0}), ("T", 8, {}), ("O", 8, {"keep_state_every": 3, "reproject_every": 2}),
         ("O", 8, {"recurrent": False})]
STEPS_SLOW = [("O", 3, {}), ("BO", 8, {}), ("O", 8, {"mixing": "lowrank", "mixing_rank": 2}),
              ("O", 8, {"truncate_every": 2})]


@pytest.mark.parametrize("group_name, n, options",
                         STEPS + [pytest.param(*case, marks=pytest.mark.slow) for case in STEPS_SLOW],
                         ids=[f"{g}{n}-{','.join(o) or 'default'}" for g, n, o in STEPS + STEPS_SLOW])
def test_compiled_steps_give_the_eager_bits_at_every_length_from_one_graph_each(group_name, n, options):
    """``compile_steps`` through ``aot_eager``: the same loss and gradients as eager, bit for bit,
    under a compiled caller too (which does not trace the recurrence); each function compiles once
    for a model, whatever the step or the length (input-driven: once per length, the exponentials of
    all steps in one call), and a second model's steps compile for it alone."""
    torch._dynamo.reset()
    graphs = []

    def counting(graph, inputs):  # aot_eager, counting the graphs dynamo hands it
        graphs.append(graph)
        return torch._dynamo.backends.registry.lookup_backend("aot_eager")(graph, inputs)

    def build():
        return GroupRNN(vocab_size=7, group=group_name, n=n, embedding_dim=3, **options,
                        generator=torch.Generator().manual_seed(0))

    models, reference = [build(), build()], build()
    for model in models:
        model.cell.compile_steps(counting)

    def loss_of(model, tokens):
        logits, _ = model(tokens[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    counts = []
    for model, length in ((models[0], 5), (models[0], 9), (models[1], 9)):
        tokens = torch.randint(0, 7, (2, length + 1), generator=torch.Generator().manual_seed(length))
        eager = _loss_and_gradients(reference, lambda tokens: loss_of(reference, tokens), tokens)
        compiled = _loss_and_gradients(model, lambda tokens: loss_of(model, tokens), tokens)
        if model is models[1]:
            caller = torch.compile(lambda tokens: loss_of(model, tokens), backend="aot_eager")
            compiled = (compiled, _loss_and_gradients(model, caller, tokens))
        for got in compiled if model is models[1] else (compiled,):
            for value, expected in zip(got, eager, strict=True):
                assert torch.equal(value, expected)
        counts.append(len(graphs))
    if options.get("recurrent", True):  # the step and its VJP (+ the exponentials of rebuilt states)
        steps = 3 if "keep_state_every" in options else 2
        assert counts == [steps, steps, 2 * steps]
    else:  # input-driven: the exponentials of all steps at once and their VJP, for each length
        assert counts == [2, 4, 6]


def test_compiled_steps_on_the_cpu_run_again_with_the_squarings_a_large_update_needs():
    """Traced, the exponential runs a fixed count of squarings; on the CPU the compiled steps start at
    0 and run a step again with more where its update came out NaN (a matrix needed more): updates
    that need squarings give the eager bits, and the count stops short of the device's 10."""
    torch._dynamo.reset()

    def build():
        model = GroupRNN(vocab_size=7, group="O", n=8, embedding_dim=3, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            model.cell.input_map.weight.mul_(30.0)  # generators of norm ≈ 10: a few squarings
        return model

    compiled, eager = build(), build()
    compiled.cell.compile_steps("aot_eager")
    tokens = torch.randint(0, 7, (2, 6), generator=torch.Generator().manual_seed(1))

    def loss_of(model):
        logits, _ = model(tokens[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    got = _loss_and_gradients(compiled, lambda tokens: loss_of(compiled), tokens)
    expected = _loss_and_gradients(eager, lambda tokens: loss_of(eager), tokens)
    for value, reference in zip(got, expected, strict=True):
        assert torch.equal(value, reference)
    assert 0 < compiled.cell._steps.squarings < 10


def test_compile_steps_needs_the_fused_recurrence():
    model = GroupRNN(vocab_size=7, group="O", n=4, embedding_dim=3, recurrence="loop")
    with pytest.raises(ValueError, match="fused recurrence.*'loop'"):
        model.cell.compile_steps("aot_eager")


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
    from experiments.training import loop
    from experiments.training.config import build_config

    torch._dynamo.reset()
    options = {"dataset": "ptb_char", "group": "O", "n": 4, "embedding_dim": 4, "steps": 3, "batch": 2,
               "length": 6, "eval_tokens": 16, "eval_every": 3, "compile": "aot_eager"}
    compiled = loop.Run(tmp_path / "compiled", build_config("group_rnn", "lm", options))
    eager = loop.Run(tmp_path / "eager", build_config("group_rnn", "lm", {**options, "compile": None}))
    for run in (compiled, eager):
        run.directory.mkdir()
        run.fit()
    assert compiled.training_loss is not compiled._loss and eager.training_loss == eager._loss
    assert compiled.model.cell._steps != eager.model.cell._steps  # the recurrence's steps compiled
    for (name, got), expected in zip(compiled.model.state_dict().items(), eager.model.state_dict().values(),
                                     strict=True):
        assert torch.equal(got, expected), name
    with pytest.raises(ValueError, match="unknown compile backend 'inductr'.*inductor"):
        build_config("group_rnn", "lm", {**options, "compile": "inductr"})
