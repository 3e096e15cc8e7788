"""Mixed precision (``--precision``): under bfloat16 autocast the maps and readouts compute in
bfloat16 while the group product, the exponential and the state stay float32, so the state stays on
its group within the float32 membership tolerance; every model trains under autocast to nearly the
float32 bits; fp16's gradient scaler skips a step with an inf and otherwise takes the plain one."""

import json

import pytest
import torch

from experiments.baselines import ExpRNNLanguageModel
from experiments.training import loop
from experiments.training.config import TrainConfig, build_config
from experiments.training.optim import Optimizers, clip_and_step
from experiments.training.precision import Precision
from manifold_impl.group_rnn import GroupRNN, GroupRNNLayer
from manifold_impl.group_transformer import GroupTransformer
from manifold_impl.linalg import default_atol
from manifold_impl.losses import cross_entropy
from manifold_impl.mlstm import MLSTM

TOKENS = torch.randint(0, 20, (4, 128), generator=torch.Generator().manual_seed(0))
BF16 = {"device_type": "cpu", "dtype": torch.bfloat16}


def _on_group(group, states):
    """Every state of ``states: [..., n, n]`` on ``group`` within float32's membership tolerance."""
    real = states.real.dtype if states.is_complex() else states.dtype
    assert real == torch.float32
    assert group.distance(states.detach()).max().item() <= default_atol(torch.float32, group.n)


GROUP_RNNS = [{"group": "O", "n": 8}, {"group": "SO", "n": 8}, {"group": "U", "n": 6}, {"group": "SU", "n": 6},
              {"group": "T", "n": 8}, {"group": "BO", "n": 8, "block": 4},
              {"group": "O", "n": 8, "forget": "gate", "forget_alpha": 0.4}, {"group": "O", "n": 8, "num_layers": 2}]


CASES = [(options, recurrence) for options in GROUP_RNNS for recurrence in ("loop", "fused", "scan")
         if not (recurrence == "scan" and "forget" in options)]  # the scan is input-driven: no gate


@pytest.mark.parametrize("options, recurrence", CASES,
                         ids=["-".join(str(v) for v in (*o.values(), r)) for o, r in CASES])
def test_a_group_rnn_state_stays_on_its_group_under_bf16_autocast(options, recurrence):
    """128 steps of bfloat16 group products would leave the group by about 1e-2; the readout, not
    the state, is bfloat16, and the gradients are finite."""
    extra = {"recurrent": False} if recurrence == "scan" else {}
    model = GroupRNN(vocab_size=20, embedding_dim=16, recurrence=recurrence, **options, **extra,
                     generator=torch.Generator().manual_seed(1))
    with torch.autocast(**BF16):
        logits, cache = model(TOKENS)
    assert logits.dtype == torch.bfloat16
    cross_entropy(logits.float(), TOKENS).backward()
    _on_group(model.group, cache.states)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_the_drop_in_layer_and_the_group_transformer_keep_their_states_on_the_group_under_bf16_autocast():
    layer = GroupRNNLayer(16, "O", 8, batch_first=True, generator=torch.Generator().manual_seed(2))
    transformer = GroupTransformer(vocab_size=20, group="O", n=6, num_heads=2, num_layers=2,
                                   generator=torch.Generator().manual_seed(2))
    with torch.autocast(**BF16):
        output, state = layer(torch.randn(4, 128, 16, generator=torch.Generator().manual_seed(3)))
        logits, cache = transformer(TOKENS)
    _on_group(layer.group, state)
    assert logits.dtype == torch.bfloat16
    _on_group(transformer.group, cache.past)  # every sublayer's states at every position


def test_the_exprnn_and_mlstm_recurrences_stay_float32_under_bf16_autocast():
    exprnn = ExpRNNLanguageModel(vocab_size=20, hidden_size=16)
    mlstm = MLSTM(vocab_size=20, embedding_dim=16, num_heads=2)
    with torch.autocast(**BF16):
        exprnn_logits, exprnn_cache = exprnn(TOKENS)
        mlstm_logits, mlstm_cache = mlstm(TOKENS)
        transition = exprnn.transition()
    assert exprnn_logits.dtype == mlstm_logits.dtype == torch.bfloat16
    assert exprnn_cache.hidden.dtype == torch.float32
    assert all(part.dtype == torch.float32 for part in mlstm_cache.state[1:])  # memory, normalizer, stabilizer
    identity = torch.eye(16)
    assert (transition.T @ transition - identity).abs().max().item() <= default_atol(torch.float32, 16)


SMALL = {"dataset": "tinyshakespeare", "steps": 20, "batch": 8, "length": 32, "eval_every": 20, "eval_tokens": 2048,
         "lr": 1e-2}
MODELS = [
    ("group_rnn", {"group": "O", "n": 8}),
    ("group_rnn", {"group": "U", "n": 4, "recurrence": "loop"}),
    ("lstm", {"hidden_size": 16}),
    ("gpt", {"width": 16, "num_heads": 2, "num_layers": 1}),
    ("exprnn", {"hidden_size": 16}),
    ("mlstm", {"embedding_dim": 16, "num_heads": 2}),
    ("group_transformer", {"n": 4, "num_heads": 2, "num_layers": 1}),
]


@pytest.mark.parametrize("model, options", MODELS, ids=[f"{m}-{'-'.join(map(str, o.values()))}" for m, o in MODELS])
def test_every_model_trains_under_bf16_autocast_to_nearly_its_float32_bits(model, options, tmp_path):
    """20 steps: below the untrained model's validation bits, within 0.05 bits of the float32 run
    (bfloat16 keeps 8 bits of mantissa), and not the same digits (autocast did act)."""
    finals = {}
    for precision in ("float32", "bf16"):
        config = build_config(model, "lm", {**SMALL, **options, "precision": precision})
        if precision == "bf16":
            untrained = loop.Run(tmp_path / "untrained", config).evaluate("valid")["valid_bits"]
        finals[precision] = loop.run(config, tmp_path / precision)
    bits, reference = finals["bf16"]["valid_bits"], finals["float32"]["valid_bits"]
    assert bits < untrained - 0.1
    assert bits == pytest.approx(reference, abs=0.05)
    assert bits != reference
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["train"]["precision"] == "bf16"
    assert finals["bf16"]["drift"] <= default_atol(torch.float32, options.get("n", 1))


def _scaled_and_plain_steps(poison=False):
    """One step of a small group RNN through fp16's scaler (on the CPU, without autocast) and one
    without it, from the same start; ``poison`` puts an inf into one gradient of the scaled step."""
    steps = []
    for precision in ("fp16", "float32"):
        model = GroupRNN(vocab_size=20, group="O", n=4, embedding_dim=8, generator=torch.Generator().manual_seed(4))
        optimizers = Optimizers(model, TrainConfig(model="group_rnn", lr=1e-2))
        scaling = Precision(precision, "cpu")
        logits, _ = model(TOKENS[:, :16])
        loss = cross_entropy(logits, TOKENS[:, :16])
        optimizers.zero_grad()
        if poison and scaling.scaler is not None:
            loss = loss + 0 * model.embedding.weight.sum() * float("inf")
        scaling.backward(loss, optimizers)
        clip_and_step(model, optimizers, 1.0, scaling.scaler)
        steps.append((model, scaling))
    return steps


def test_the_gradient_scaler_takes_the_plain_step_and_skips_a_step_with_an_inf():
    (scaled, scaling), (plain, _) = _scaled_and_plain_steps()
    initial = GroupRNN(vocab_size=20, group="O", n=4, embedding_dim=8, generator=torch.Generator().manual_seed(4))
    for (name, a), b, start in zip(scaled.named_parameters(), plain.parameters(), initial.parameters()):
        assert not torch.equal(b, start), name  # the plain step moved every parameter
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    (skipped, scaling), _ = _scaled_and_plain_steps(poison=True)
    for (name, a), start in zip(skipped.named_parameters(), initial.parameters()):
        assert torch.equal(a, start), name
    assert scaling.scaler.get_scale() < 2.0 ** 16  # the scale shrank from its start


@pytest.mark.parametrize("fields, message", [
    ({"precision": "bfloat16"}, "unknown precision"),
    ({"precision": "bf16", "dtype": "float64"}, "needs dtype float32"),
    ({"precision": "fp16"}, "fp16 .* is for CUDA devices"),
    ({"precision": "bf16", "cuda_graphs": True, "device": "cuda"}, "cuda_graphs replays a float32 step"),
])
def test_a_precision_that_cannot_run_is_refused_before_any_work(fields, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(model="group_rnn", **fields)
