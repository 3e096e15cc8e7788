"""The v2 study's verdict table: seed-paired differences, the unigram level and the convergence flags."""

import json
import math

import numpy as np
import pytest
import scipy.stats

from experiments.analysis.stats import paired
from experiments.studies.charlm_v2.claims import CLAIM_3, claims, ngram_bits, probe_shape, reshaped_arm, unigram_bits


def test_the_unigram_level_is_the_add_one_cross_entropy():
    # train counts (2, 1, 0) of 3 symbols, add-one: p = (3, 2, 1) / 6; test [0, 1, 2]
    expected = -(math.log2(3 / 6) + math.log2(2 / 6) + math.log2(1 / 6)) / 3
    assert unigram_bits([0, 0, 1], [0, 1, 2], 3) == pytest.approx(expected, abs=1e-15)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        unigram_bits([0, 3], [0], 3)
    with pytest.raises(ValueError, match="non-empty"):
        unigram_bits([], [0], 3)


def _ngram_by_hand(train, test, vocab_size, order, strength):
    """The interpolated Dirichlet n-gram model, counted and applied one position at a time."""
    def count(gram):
        return sum(tuple(train[i:i + len(gram)]) == gram for i in range(len(train) - len(gram) + 1))

    total = 0.0
    for t in range(order - 1, len(test)):
        p = 1.0 / vocab_size
        for k in range(1, order + 1):
            gram = tuple(test[t - k + 1:t + 1])
            followed = sum(count(gram[:-1] + (v,)) for v in range(vocab_size))  # the context, then any token
            p = (count(gram) + strength * p) / (followed + strength)
        total -= math.log2(p)
    return total / (len(test) - order + 1)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_the_ngram_level_equals_counting_by_hand(order):
    generator = np.random.default_rng(order)
    train, test = generator.integers(0, 4, size=60), generator.integers(0, 4, size=25)
    assert ngram_bits(train, test, 4, order, 1.5) == pytest.approx(_ngram_by_hand(list(train), list(test), 4, order, 1.5),
                                                                    abs=1e-12)
    with pytest.raises(ValueError, match="order"):
        ngram_bits(train, test, 4, 0, 1.0)


def _run(root, arm, seed, windowed, carried=None, best_step=400, steps=400, valid=(), lr=1e-3):
    run = root / f"{arm}-seed{seed}"
    run.mkdir(parents=True)
    run.joinpath("metrics.jsonl").write_text("".join(json.dumps({"step": 100 * (i + 1), "valid_bits": v}) + "\n"
                                                     for i, v in enumerate(valid)))
    run.joinpath("config.json").write_text(json.dumps(
        {"train": {"model": arm, "task": "lm", "seed": seed, "lr": lr},
         "task": {"dataset": "tinyshakespeare"}, "model": {"vocab_size": 65}}))
    final = {"steps": steps, "best_step": best_step, "test_bits_per_token": windowed, "valid_bits": windowed - 0.05,
             "parameters": 10,
             "tokens_per_second": 1.0}
    if carried is not None:
        final["test_carried_bits_per_token"] = carried
    run.joinpath("final.json").write_text(json.dumps(final))


def test_the_claims_pair_arms_by_seed_and_check_each_arm_against_the_unigram(tmp_path):
    folder = tmp_path / "tinyshakespeare"
    lstm = {0: 2.0, 1: 2.2, 2: 2.1}
    o_fix = {0: 2.5, 1: 2.6, 3: 9.9}  # seed 3 has no LSTM twin: left out of the pairing
    for seed, bits in lstm.items():
        _run(folder, "lstm", seed, bits, carried=bits - 0.1, best_step=300, valid=(3.0, bits, bits + 0.01 * seed))
    for seed, bits in o_fix.items():
        _run(folder, "rnn-O-naware", seed, bits, carried=bits - 0.2, valid=(3.0, 5.5) if seed == 3 else (3.0, bits))
    _run(folder, "gpt", 0, 2.3)  # no carried score: that column reads —
    markdown = claims(tmp_path)
    record = json.loads((tmp_path / "claims.json").read_text())["tinyshakespeare"]

    rows = {row["comparison"]: row for row in record["comparisons"]}
    windowed = rows["rnn-O-naware − lstm"]["windowed"]
    differences = np.array([0.5, 0.4])
    assert windowed["seeds"] == [0, 1]
    assert windowed["difference"] == pytest.approx(0.45)
    assert windowed["half_width"] == pytest.approx(scipy.stats.t.ppf(0.975, 1) * differences.std(ddof=1) / math.sqrt(2))
    assert windowed["relative_percent"] == pytest.approx(np.mean(100 * differences / np.array([2.0, 2.2])))
    assert rows["rnn-O-naware − lstm"]["carried"]["difference"] == pytest.approx(0.35)
    assert rows["rnn-O-naware − gpt"]["carried"] is None
    assert math.isnan(rows["rnn-O-naware − gpt"]["windowed"]["half_width"])  # one paired seed
    assert "rnn-O − rnn-GL" not in rows  # arms without runs are not compared

    checks = record["checks"]
    assert 4.5 < record["unigram_bits"] < 5.0  # Tiny Shakespeare's characters
    assert checks["lstm"]["below_unigram"] and not checks["rnn-O-naware"]["below_unigram"]  # seed 3: 9.9 bits
    assert 4.5 < record["valid_unigram_bits"] < 5.0
    assert checks["lstm"]["ends_below_unigram"] and not checks["rnn-O-naware"]["ends_below_unigram"]  # seed 3 ends at 5.5
    assert checks["lstm"]["rise_from_best"] == pytest.approx([0.0, 0.01, 0.02])
    assert "| rnn-O-naware | 9.9000 | NO | 5.5000 (+2.500) | NO | 400†, 400†, 400† |" in markdown
    assert "| lstm | 2.2000 | yes | 2.2100 (+0.020) | yes | 300, 300, 300 |" in markdown
    assert "| gpt | 2.3000 | yes | — | NO |" in markdown  # no evaluations recorded


def test_a_diverged_seed_is_left_out_of_the_pairing_and_fails_the_unigram_check(tmp_path):
    folder = tmp_path / "tinyshakespeare"
    for seed, bits in ((0, 2.0), (1, float("nan"))):
        _run(folder, "rnn-O", seed, bits)
        _run(folder, "rnn-GL", seed, 2.5)
    claims(tmp_path)
    record = json.loads((tmp_path / "claims.json").read_text(), parse_constant=float)["tinyshakespeare"]
    assert paired({}, "rnn-O", "rnn-GL", "test_bits_per_token") is None
    row = next(r for r in record["comparisons"] if r["comparison"] == "rnn-O − rnn-GL")
    assert row["windowed"]["seeds"] == [0] and row["windowed"]["difference"] == pytest.approx(-0.5)
    assert record["checks"]["rnn-O"]["below_unigram"] is False


def test_a_run_stopped_by_a_nan_loss_does_not_end_below_the_unigram(tmp_path):
    folder = tmp_path / "tinyshakespeare"
    _run(folder, "rnn-GL", 0, 3.0, best_step=200, steps=222, valid=(3.5, 3.1, 3.05))
    final = json.loads((folder / "rnn-GL-seed0" / "final.json").read_text())
    (folder / "rnn-GL-seed0" / "final.json").write_text(json.dumps({**final, "stopped": "training loss not finite"}))
    markdown = claims(tmp_path)
    check = json.loads((tmp_path / "claims.json").read_text(), parse_constant=float)["tinyshakespeare"]["checks"]["rnn-GL"]
    assert check["below_unigram"] and not check["ends_below_unigram"]  # its best model is fine; its training was not
    assert "| rnn-GL | 3.0000 | yes | not finite | NO | 200 (NaN at step 223) |" in markdown


def test_claims_need_finished_runs(tmp_path):
    with pytest.raises(ValueError, match="no finished runs"):
        claims(tmp_path)


def test_longer_training_sits_beside_the_study_run_with_the_change_in_test_bits(tmp_path):
    folder = tmp_path / "tinyshakespeare"
    _run(folder, "lstm", 0, 2.30, best_step=400, steps=400)
    _run(folder / "convergence", "lstm-steps800", 0, 2.25, best_step=700, steps=800)
    _run(folder / "convergence", "lstm-steps1600", 0, 2.26, best_step=1600, steps=1600)
    _run(folder / "convergence", "lstm-lr0.0003-steps1600", 0, 2.20, best_step=1600, steps=1600, lr=3e-4)
    _run(folder / "convergence", "gpt-steps800", 0, 2.0, steps=800)  # no study run gpt-seed0: left out
    markdown = claims(tmp_path)
    record = json.loads((tmp_path / "claims.json").read_text())["tinyshakespeare"]["longer_training"]
    assert list(record) == ["lstm-seed0"]
    assert [(r["lr"], r["steps"]) for r in record["lstm-seed0"]] == [(1e-3, 400), (1e-3, 800), (1e-3, 1600),
                                                                     (3e-4, 1600)]
    assert record["lstm-seed0"][1] == {"lr": 1e-3, "steps": 800, "best_step": 700, "valid_bits": pytest.approx(2.20),
                                       "test_bits": 2.25}
    assert "| lstm | 0 | 0.001 | 400 | 400 | 2.2500 | 2.3000 |  |" in markdown
    assert "| lstm | 0 | 0.001 | 800 | 700 | 2.2000 | 2.2500 | -0.0500 |" in markdown
    assert "| lstm | 0 | 0.001 | 1,600 | 1,600 | 2.2100 | 2.2600 | +0.0100 |" in markdown
    assert "| lstm | 0 | 0.0003 | 1,600 | 1,600 | 2.1500 | 2.2000 | -0.1000 |" in markdown  # against the study run


def test_a_probe_outside_the_study_is_paired_with_the_study_arms_in_a_table_of_its_own(tmp_path):
    folder = tmp_path / "ptb_char"
    for seed, (study, lstm, probe) in enumerate(((2.5, 1.8, 2.3), (2.4, 1.7, 2.3))):
        _run(folder, "rnn-O-naware", seed, study, carried=study)
        _run(folder, "lstm", seed, lstm, carried=lstm)
        _run(folder / "o_width", "rnn-O22-e225-naware-lr0.001", seed, probe, carried=probe - 0.1, valid=(3.0, probe))
    _run(folder / "o_width", "rnn-O22-e225-naware-lr0.001", 5, 1.0)  # no study twin: left out of the pairing
    markdown = claims(tmp_path)
    record = json.loads((tmp_path / "claims.json").read_text())["ptb_char"]
    assert "rnn-O22-e225-naware-lr0.001" not in record["checks"]  # not a study arm
    rows = {row["comparison"]: row for row in record["probes"]["o_width"]}
    probe = "rnn-O22-e225-naware-lr0.001"
    assert list(rows) == [f"{probe} − rnn-O-naware", f"{probe} − lstm"]  # its own arm first; no U, no GPT runs here
    assert rows[f"{probe} − rnn-O-naware"]["windowed"]["seeds"] == [0, 1]
    assert rows[f"{probe} − rnn-O-naware"]["windowed"]["difference"] == pytest.approx(-0.15)
    assert rows[f"{probe} − lstm"]["carried"]["difference"] == pytest.approx(0.45)
    assert "Outside the study (`o_width/`" in markdown
    assert (folder / "o_width" / "curves.png").stat().st_size > 0
    assert "| the O shape: n and the embedding width | rnn-O22-e225-naware-lr0.001 − rnn-O-naware | 2 | -0.1500 ± " in markdown


def test_probes_of_two_study_arms_at_one_shape_repeat_the_study_comparison_between_them(tmp_path):
    folder = tmp_path / "ptb_char"
    for seed, (fix, mix, wide_mix) in enumerate(((2.4, 2.2, 2.0), (2.2, 2.1, 1.9))):
        _run(folder, "rnn-O-naware", seed, 2.5)
        _run(folder / "o_width", "rnn-O23-e128-naware-lr0.001", seed, fix, carried=fix)
        _run(folder / "o_width", "rnn-O23-e128-mix-scalar-lr0.001", seed, mix, carried=mix)
        _run(folder / "o_width", "rnn-O22-e225-mix-scalar-lr0.001", seed, wide_mix)  # another shape: no O-naware twin
        _run(folder / "o_width", "rnn-O23-e128-naware-lr0.003", seed, 5.0, lr=3e-3)  # not the study's rate: left out
    claims(tmp_path)
    rows = json.loads((tmp_path / "claims.json").read_text())["ptb_char"]["probes"]["o_width"]
    repeated = [row for row in rows if ", at " in row["claim"]]
    assert [(row["claim"], row["comparison"]) for row in repeated] == [
        (f"{CLAIM_3}, at O23-e128", "rnn-O23-e128-mix-scalar-lr0.001 − rnn-O23-e128-naware-lr0.001")]
    assert repeated[0]["windowed"]["difference"] == pytest.approx(-0.15)
    assert repeated[0]["windowed"]["relative_percent"] == pytest.approx(100 * (-0.2 / 2.4 - 0.1 / 2.2) / 2)


def test_a_probe_arm_names_its_shape():
    assert probe_shape("rnn-O23-e128-mix-scalar-lr0.001") == "O23-e128"
    assert probe_shape("rnn-BO268-e160-lr0.01") == "BO268-e160"
    assert probe_shape("rnn-T207-e32-bound3.1416-lr0.01") == "T207-e32-bound3.1416"


@pytest.mark.parametrize("probe, arm", [("rnn-O22-e225-naware-lr0.001", "rnn-O-naware"), ("rnn-T189-e160-lr0.01", "rnn-T"),
                                        ("rnn-BO268-e160-lr0.01", "rnn-BO"), ("rnn-O23-e97-mix-scalar-lr1e-3",
                                                                              "rnn-O-mix-scalar"),
                                        ("rnn-BO288-e32-bound4.4429-lr0.01", "rnn-BO"),
                                        ("rnn-O23-e128-mix-scalar-bound2-lr0.001", "rnn-O-mix-scalar")])
def test_a_probe_arm_names_the_study_arm_it_reshapes(probe, arm):
    assert reshaped_arm(probe) == arm


def test_a_probe_arm_of_another_name_is_refused():
    with pytest.raises(ValueError, match="probe arm"):
        reshaped_arm("rnn-O-naware-wide")
