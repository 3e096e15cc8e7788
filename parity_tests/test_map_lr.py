"""The n-aware learning rates of the group RNN's maps: the rule against its closed
form, the optimizer's parameter groups and schedule, and the plain update kept exactly."""

import math

import geoopt
import pytest
import torch

from experiments.models import build_model
from experiments.training import optim
from experiments.training.config import RunConfig, TrainConfig, build_config
from manifold_impl.optim import RiemannianAdam
from reference.config import GroupRNNConfig, map_lr_scales

# dim g by hand: O(16) 16·15/2 = 120, O(30) 30·29/2 = 435, U(21) 21² = 441, T(203) 203,
# BO(280, 2) 140 blocks × 1 = 140, BO(64, 4) 16 blocks × 6 = 96, T(32) 32.
REF = 16 * math.sqrt(120)  # n₀·√dim g₀ of O(16)
SCALES = [
    (("O", 16, None), (1.0, 1.0)),
    (("O", 30, None), (math.sqrt(120 / 435), REF / (30 * math.sqrt(435)))),
    (("U", 21, None), (math.sqrt(120 / 441), REF / (21 * 21))),
    (("T", 203, None), (math.sqrt(120 / 203), REF / 203 ** 1.5)),
    (("BO", 280, None), (math.sqrt(120 / 140), REF / (280 * math.sqrt(140)))),
    (("BO", 64, 4), (1.0, REF / (64 * math.sqrt(96)))),       # dim 96 < 120: W capped at 1
    (("T", 32, None), (1.0, REF / 32 ** 1.5)),                # W capped, U just below 1
    (("O", 8, None), (1.0, 1.0)),                              # below the reference: both capped
    (("T", 31, None), (1.0, 1.0)),
    (("SO", 16, None), (1.0, 1.0)),
]


@pytest.mark.parametrize("shape, expected", SCALES, ids=[f"{g}{n}" + (f"b{b}" if b else "") for (g, n, b), _ in SCALES])
def test_the_scales_are_the_closed_form(shape, expected):
    group, n, block = shape
    got = map_lr_scales(GroupRNNConfig(vocab_size=5, group=group, n=n, block=block))
    assert got == pytest.approx(expected, rel=1e-12, abs=0)


def test_the_scales_match_the_probes_factors_and_refuse_other_configs():
    assert map_lr_scales(GroupRNNConfig(vocab_size=5, group="O", n=30)) == pytest.approx((0.525, 0.280), abs=5e-4)
    assert map_lr_scales(GroupRNNConfig(vocab_size=5, group="U", n=21)) == pytest.approx((0.52, 0.40), abs=5e-3)
    with pytest.raises(TypeError, match="GroupRNNConfig"):
        map_lr_scales({"group": "O", "n": 30})


def _model(n, seed=0, recurrent=True):
    config = GroupRNNConfig(vocab_size=7, group="O", n=n, embedding_dim=5, recurrent=recurrent)
    return build_model(config, generator=torch.Generator().manual_seed(seed))


def _cosine_factor(step, warmup, steps):  # the schedule written out: linear warm-up, then cosine to 0
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (steps - warmup)))


def test_the_optimizer_gives_each_scaled_map_its_rate_at_every_schedule_step():
    model = _model(30)
    config = TrainConfig(model="group_rnn", steps=10, warmup=2, lr=2e-3, schedule="cosine")
    optimizers = optim.Optimizers(model, config)
    adamw = optimizers.optimizers[0]
    w, u = model.cell.input_map.weight, model.cell.state_map.weight
    s_w, s_u = math.sqrt(120 / 435), REF / (30 * math.sqrt(435))
    assert [len(g["params"]) for g in adamw.param_groups] == [4, 1, 1]
    assert adamw.param_groups[1]["params"][0] is w and adamw.param_groups[2]["params"][0] is u
    others = {id(p) for p in adamw.param_groups[0]["params"]}
    assert id(w) not in others and id(u) not in others and id(model.cell.input_map.bias) in others
    assert isinstance(optimizers.optimizers[1], RiemannianAdam)
    for step in range(6):
        factor = _cosine_factor(step, 2, 10)
        rates = [g["lr"] for g in adamw.param_groups]
        assert rates == pytest.approx([2e-3 * factor, 2e-3 * s_w * factor, 2e-3 * s_u * factor], rel=1e-12), step
        assert optimizers.optimizers[1].param_groups[0]["lr"] == pytest.approx(2e-3 * factor, rel=1e-12)
        optimizers.step()  # no gradients: the parameters stay, the schedules advance


def test_the_first_step_moves_each_map_by_its_scaled_rate():
    """Adam's first step is lr·g/(|g| + ε) ≈ lr·sign(g) per entry: W moves by s_W·lr, U by s_U·lr."""
    model = _model(30)
    optimizers = optim.Optimizers(model, TrainConfig(model="group_rnn", steps=5, lr=1e-3, schedule="constant"))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    logits, _ = model(torch.randint(0, 7, (3, 6), generator=torch.Generator().manual_seed(1)))
    logits.square().mean().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    optimizers.step()
    for name, scale in (("cell.input_map.weight", math.sqrt(120 / 435)),
                        ("cell.state_map.weight", REF / (30 * math.sqrt(435))),
                        ("cell.input_map.bias", 1.0), ("readout.weight", 1.0), ("embedding.weight", 1.0)):
        step = dict(model.named_parameters())[name].detach() - before[name]
        g = grads[name]
        expected = -1e-3 * scale * g / (g.abs() + 1e-8)
        torch.testing.assert_close(step, expected, rtol=1e-3, atol=1e-9, msg=name)


def _hand_built(model, lr, weight_decay):
    """Today's optimizer, written out: one AdamW over the Euclidean parameters, RiemannianAdam on the rest."""
    manifold = [p for p in model.parameters() if isinstance(p, geoopt.ManifoldParameter)]
    euclidean = [p for p in model.parameters() if not isinstance(p, geoopt.ManifoldParameter)]
    return [torch.optim.AdamW(euclidean, lr=lr, weight_decay=weight_decay), RiemannianAdam(manifold, lr=lr)]


@pytest.mark.parametrize("n, map_lr", [(30, "plain"), (16, "n_aware"), (12, "n_aware")])
def test_plain_and_the_reference_size_reproduce_the_single_rate_optimizer(n, map_lr):
    ours, theirs = _model(n), _model(n)
    config = TrainConfig(model="group_rnn", steps=3, lr=3e-3, weight_decay=0.01, schedule="constant",
                         map_lr=map_lr)
    optimizers, hand = optim.Optimizers(ours, config), _hand_built(theirs, 3e-3, 0.01)
    assert len(optimizers.optimizers[0].param_groups) == 1
    tokens = torch.randint(0, 7, (3, 6), generator=torch.Generator().manual_seed(2))
    for _ in range(3):
        for model in (ours, theirs):
            logits, _ = model(tokens)
            logits.square().mean().backward()
        optimizers.step()
        optimizers.zero_grad()
        for optimizer in hand:
            optimizer.step()
            optimizer.zero_grad()
    for (name, got), expected in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.equal(got, expected), name
    assert not torch.equal(ours.cell.state_map.weight, _model(n).cell.state_map.weight)  # it did train


def test_n_aware_above_the_reference_differs_from_plain_only_in_the_maps():
    models = {rule: _model(30) for rule in ("plain", "n_aware")}
    tokens = torch.randint(0, 7, (3, 6), generator=torch.Generator().manual_seed(3))
    for rule, model in models.items():
        optimizers = optim.Optimizers(model, TrainConfig(model="group_rnn", steps=1, map_lr=rule))
        logits, _ = model(tokens)
        logits.square().mean().backward()
        optimizers.step()
    plain, aware = (dict(models[rule].named_parameters()) for rule in ("plain", "n_aware"))
    for name in plain:
        same = torch.equal(plain[name], aware[name])
        assert same == (name not in ("cell.input_map.weight", "cell.state_map.weight")), name


def test_a_model_without_a_state_map_scales_only_w():
    model = _model(30, recurrent=False)
    groups = optim.Optimizers(model, TrainConfig(model="group_rnn")).optimizers[0].param_groups
    assert [len(g["params"]) for g in groups] == [4, 1] and groups[1]["params"][0] is model.cell.input_map.weight
    assert groups[1]["lr"] == pytest.approx(1e-3 * math.sqrt(120 / 435), rel=1e-12)


def test_map_lr_is_validated_and_old_run_records_read_as_plain():
    assert TrainConfig(model="group_rnn").map_lr == "n_aware"
    with pytest.raises(ValueError, match="unknown map_lr 'fast'"):
        TrainConfig(model="group_rnn", map_lr="fast")
    record = build_config("group_rnn", "lm", {"dataset": "ptb_char", "n": 30}).to_json()
    assert record["train"]["map_lr"] == "n_aware"
    del record["train"]["map_lr"]  # a config.json written before the option existed
    assert RunConfig.from_json(record).train.map_lr == "plain"


def test_a_group_rnn_layer_inside_another_model_gets_the_rates():
    from manifold_impl.group_rnn import GroupRNNLayer

    model = torch.nn.Sequential(torch.nn.Linear(2, 3), GroupRNNLayer(3, "O", 30, generator=torch.Generator()))
    groups = optim.Optimizers(model, TrainConfig(model="group_rnn")).optimizers[0].param_groups
    cell = model[1].cell
    assert len(groups) == 3 and groups[1]["params"][0] is cell.input_map.weight
    assert groups[2]["params"][0] is cell.state_map.weight
    assert [g["lr"] for g in groups[1:]] == pytest.approx([1e-3 * math.sqrt(120 / 435),
                                                          1e-3 * REF / (30 * math.sqrt(435))], rel=1e-12)


def test_rates_give_named_parameters_their_own_scheduled_rate_in_place_of_map_lr():
    model = _model(30)
    config = TrainConfig(model="group_rnn", steps=10, lr=2e-3, warmup=2)
    optimizers = optim.Optimizers(model, config, rates={"cell.state_map.weight": 5e-5, "readout.bias": 1e-2})
    groups = optimizers.optimizers[0].param_groups
    w, u, bias = model.cell.input_map.weight, model.cell.state_map.weight, model.readout.bias
    assert [[id(p) for p in g["params"]] for g in groups[1:]] == [[id(w)], [id(u)], [id(bias)]]
    assert id(u) not in {id(p) for p in groups[0]["params"]} and id(bias) not in {id(p) for p in groups[0]["params"]}
    for step in range(3):
        factor = _cosine_factor(step, 2, 10)
        assert [g["lr"] for g in groups] == pytest.approx(
            [2e-3 * factor, 2e-3 * math.sqrt(120 / 435) * factor, 5e-5 * factor, 1e-2 * factor], rel=1e-12), step
        optimizers.step()


def test_rates_refuse_a_name_the_model_lacks_or_a_group_valued_parameter():
    model = _model(8)
    config = TrainConfig(model="group_rnn")
    with pytest.raises(ValueError, match=r"rates name no Euclidean parameter of the model: \['cell.initial_state', 'nope'\]"):
        optim.Optimizers(model, config, rates={"nope": 1.0, "cell.initial_state": 1.0})
