"""Model parity (docs/design.md, Parity and tolerances) for the group RNN: reference (float64) vs torch (float64 and float32)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import parity_tests.harness
from manifold_impl.group_rnn import GroupRNN as TorchGroupRNN
from parity_tests import check
from parity_tests.harness import parity, to_torch
from parity_tests.tolerances import SAMPLING_SIGMAS
from reference.config import GROUP_NAMES, GroupRNNConfig
from reference.group_rnn import GroupRNN
from reference.params import init_params

VARIANTS = {
    "linear": {},
    "prototype-lowrank-reproject": {"readout": "prototype", "mixing": "lowrank", "mixing_rank": 2,
                                    "reproject_every": 2},
    "scalar-nonrecurrent": {"mixing": "scalar", "recurrent": False},
    "scalar-bound": {"mixing": "scalar", "update_bound": 0.5},
    "scalar-truncate": {"mixing": "scalar", "truncate_every": 2},
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_group_rnn_parity(group, variant, dtype):
    config = GroupRNNConfig(vocab_size=11, group=group, n=4, embedding_dim=6, **VARIANTS[variant])
    report = parity(config, seed=3, dtype=dtype, batch=2, length=6)
    assert report["pass"], json.dumps(report, indent=1)


@pytest.mark.parametrize("readout", ["linear", "prototype"])
@pytest.mark.parametrize("mixing", ["none", "scalar", "lowrank"])
@pytest.mark.parametrize("recurrent", [True, False], ids=["recurrent", "input-driven"])
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_state_dict_has_the_reference_keys_shapes_and_dtypes(group, readout, mixing, recurrent):
    config = GroupRNNConfig(vocab_size=9, group=group, n=4, readout=readout, mixing=mixing, recurrent=recurrent,
                            mixing_rank=3 if mixing == "lowrank" else None)
    spec = GroupRNN(config).param_spec()
    state = TorchGroupRNN(config, dtype=torch.float64).state_dict()
    assert list(state) == list(spec)
    for key, tensor in state.items():
        assert tuple(tensor.shape) == tuple(spec[key].shape), key
        group_valued = spec[key].group is not None
        assert tensor.is_complex() == (group_valued and config.is_complex), key


@pytest.mark.parametrize("group", GROUP_NAMES)
def test_torch_initialization_follows_the_reference_distributions(group):
    """Same init law in both trees: group-valued H_0 = I, biases 0, and matching spreads."""
    config = GroupRNNConfig(vocab_size=50, group=group, n=6, embedding_dim=40, readout="prototype")
    reference = GroupRNN(config)
    expected = init_params(reference.param_spec(), np.random.default_rng(0))
    actual = TorchGroupRNN(config, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).state_dict()
    for key, value in expected.items():
        got = actual[key].numpy()
        if key in ("cell.initial_state", "readout.prototypes"):
            assert reference.group.is_member(got), key
            if key == "cell.initial_state":
                np.testing.assert_array_equal(got, value)
        else:
            spread, sigmas = np.std(value), SAMPLING_SIGMAS  # two samples of one law
            assert np.mean(got) == pytest.approx(np.mean(value), abs=sigmas * spread * np.sqrt(2 / value.size)), key
            assert np.std(got) == pytest.approx(spread, rel=sigmas / np.sqrt(value.size)), key


@pytest.mark.parametrize("group", GROUP_NAMES)
def test_scalar_mixing_at_init_equals_no_mixing_exactly(group):
    base = GroupRNNConfig(vocab_size=9, group=group, n=4)
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 9, size=(2, 7)))
    plain = TorchGroupRNN(base, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for mode, rank in (("scalar", None), ("lowrank", 2)):
        mixed = TorchGroupRNN(GroupRNNConfig(vocab_size=9, group=group, n=4, mixing=mode, mixing_rank=rank),
                              dtype=torch.float64)
        mixed.load_state_dict({**mixed.state_dict(), **plain.state_dict()})
        with torch.no_grad():
            torch.testing.assert_close(mixed(tokens)[0], plain(tokens)[0], rtol=0, atol=0)


def test_loading_an_off_group_parameter_is_refused():
    config = GroupRNNConfig(vocab_size=9, group="SO", n=3)
    model = TorchGroupRNN(config, dtype=torch.float64)
    reference = GroupRNN(config)
    params = init_params(reference.param_spec(), np.random.default_rng(0))
    params["cell.initial_state"] = np.diag([1.0, 1.0, -1.0])  # in O(3), not in SO(3)
    with pytest.raises(ValueError, match="cell.initial_state.*det"):
        model.load_state_dict(to_torch(params, torch.float64, "cpu"))
    with pytest.raises(ValueError, match="cell.initial_state.*det"):
        reference.check_params(params)
    params["cell.initial_state"] = 1.01 * np.eye(3)
    with pytest.raises(ValueError, match="not unitary"):
        model.load_state_dict(to_torch(params, torch.float64, "cpu"))


def test_cli_prints_one_json_object_and_passes():
    result = subprocess.run(
        [sys.executable, "-m", "parity_tests.check", "--model", "group_rnn", "--group", "SU", "--n", "3",
         "--seed", "5", "--dtype", "float32", "--readout", "prototype"],
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["pass"] is True and report["dtype"] == "float32"
    assert set(report["gradient_errors"]) == set(GroupRNN(GroupRNNConfig(
        vocab_size=13, group="SU", n=3, embedding_dim=16, readout="prototype")).param_spec())


def test_cli_exit_codes(monkeypatch, capsys):
    assert check.main(["--group", "O", "--n", "1"]) == 2  # 0-dimensional algebra: refused
    assert "0-dimensional" in json.loads(capsys.readouterr().out)["error"]
    monkeypatch.setattr(parity_tests.harness, "parity", lambda *a, **k: {"pass": False})
    assert check.main(["--group", "O", "--n", "3"]) == 1


def test_cli_runs_the_mlstm_parity(capsys):
    assert check.main(["--model", "mlstm", "--read", "ns", "--ns-steps", "3", "--vocab-size", "96", "--length", "5",
                       "--dtype", "float32"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pass"] is True and report["model"] == "mlstm" and report["config"]["ns_steps"] == 3


@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 13])
def test_prefix_products_scan_equals_the_running_product(length):
    """The associative scan of the input-driven RNN vs a left-to-right loop (non-commuting U(3) factors)."""
    from manifold_impl.group_rnn import _prefix_products
    from manifold_impl.groups import get_group as torch_group

    group = torch_group("U", 3)
    factors = group.random((2, length), generator=torch.Generator().manual_seed(length), dtype=torch.float64)
    expected, running = [], factors[:, 0]
    for t in range(length):
        running = factors[:, 0] if t == 0 else running @ factors[:, t]
        expected.append(running)
    torch.testing.assert_close(_prefix_products(group, factors), torch.stack(expected, dim=1), rtol=0, atol=1e-13)


@pytest.mark.parametrize("model", list(check.MODELS))
def test_every_field_of_a_models_config_is_an_option_of_the_check(model):
    import dataclasses

    parser = check.build_parser(model)
    flags = {flag for action in parser._actions for flag in action.option_strings}
    assert {"--" + field.name.replace("_", "-") for field in dataclasses.fields(check.MODELS[model])} <= flags


def test_the_check_checks_the_options_one_trains_with(capsys):
    argv = ["--group", "O", "--n", "3", "--embedding-dim", "4", "--update-bound", "0.5", "--truncate-every", "3",
            "--keep-state-every", "2", "--input-init", "spread", "--length", "6"]
    config, _ = check.configure(argv)
    assert (config.update_bound, config.truncate_every, config.keep_state_every, config.input_init,
            config.embedding_dim) == (0.5, 3, 2, "spread", 4)
    assert check.configure(["--recurrence", "loop", "--no-recurrent"])[0].recurrence == "loop"
    assert check.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pass"] is True and report["config"]["update_bound"] == 0.5


def test_the_check_takes_a_runs_config_and_checks_its_model(tmp_path, capsys):
    from experiments import train

    run = tmp_path / "run"
    assert train.main(["--model", "group_rnn", "--dataset", "ptb_char", "--group", "SO", "--n", "3",
                       "--embedding-dim", "4", "--truncate-every", "4", "--update-bound", "0.7", "--steps", "1",
                       "--batch", "1", "--length", "8", "--eval-tokens", "20", "--run-dir", str(run)]) == 0
    saved = json.loads((run / "config.json").read_text())["model"]
    capsys.readouterr()
    for given in (run / "config.json", run):
        assert check.main(["--config", str(given), "--length", "5"]) == 0
        assert json.loads(capsys.readouterr().out)["config"] == saved
    config, _ = check.configure(["--config", str(run), "--update-bound", "0.3"])  # an option overrides the run's
    assert config.update_bound == 0.3 and config.vocab_size == saved["vocab_size"]


def test_the_check_refuses_a_config_of_a_model_without_a_reference_twin_or_a_missing_one(tmp_path, capsys):
    from experiments import train

    run = tmp_path / "lstm"
    assert train.main(["--model", "lstm", "--dataset", "ptb_char", "--hidden-size", "4", "--steps", "1",
                       "--batch", "1", "--length", "8", "--eval-tokens", "20", "--run-dir", str(run)]) == 0
    capsys.readouterr()
    for config, message in [(run, "its model 'lstm' has no reference twin"), (tmp_path / "absent.json", "no such file")]:
        with pytest.raises(SystemExit) as stop:
            check.main(["--config", str(config)])
        assert stop.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("recurrence", ["fused", "loop"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("block, n", [(4, 8), (8, 16)], ids=["2-heads-of-O4", "2-heads-of-O8"])
def test_parity_of_multi_head_states(block, n, dtype, recurrence):
    """Heads are BO with a larger block: k = n/b independent O(b) states, each rotated by its own
    coordinates of the update (the fused recurrence's written-out gradients against the
    reference's autograd)."""
    config = GroupRNNConfig(vocab_size=7, group="BO", n=n, block=block, embedding_dim=5, recurrence=recurrence)
    report = parity(config, seed=1, dtype=dtype, batch=2, length=4)
    assert report["pass"], report
