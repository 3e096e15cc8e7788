"""The A5/S5 probe (experiments.studies.state_tracking.words_probe) trains, resumes and measures accuracy by position."""

import json

import numpy as np

from experiments.studies.state_tracking import words_probe


def test_probe_trains_skips_finished_runs_and_scores_every_position(tmp_path):
    runs = words_probe.probe_runs(cells=("S3",), arms=("lstm",), short_arms=("lstm",))
    curriculum = {"train_min_length": 2, "curriculum_steps": words_probe.CURRICULUM_STEPS}
    assert runs == {"S3-lstm": ("S3-lstm-seed0", {}), "S5-lstm-max4": ("S5-lstm-seed0", {"train_max_length": 4}),
                    f"S3-lstm-curriculum{words_probe.CURRICULUM_STEPS}": ("S3-lstm-seed0", curriculum)}
    runs = {"S3-lstm": runs["S3-lstm"]}
    words_probe.train(tmp_path, runs, steps=2, eval_every=2)
    final = (tmp_path / "S3-lstm" / "final.json").read_text()
    words_probe.train(tmp_path, runs, steps=2, eval_every=2)  # finished: not retrained
    assert (tmp_path / "S3-lstm" / "final.json").read_text() == final
    (tmp_path / "S3-lstm" / "checkpoint.pt").unlink()  # as on a fresh clone: trained again, to the same result
    words_probe.train(tmp_path, runs, steps=2, eval_every=2)
    again, first = (json.loads(t) for t in ((tmp_path / "S3-lstm" / "final.json").read_text(), final))
    timing = ("tokens_per_second", "train_seconds")
    assert {k: v for k, v in again.items() if k not in timing} == {k: v for k, v in first.items() if k not in timing}
    result = words_probe.analyse(tmp_path, runs, words=8, length=5)
    accuracy = result["S3-lstm"]["accuracy"]
    assert len(accuracy) == 5 and all(0 <= a <= 1 for a in accuracy)
    assert all(a * 8 == round(a * 8) for a in accuracy)  # a fraction of the 8 words at each position
    assert result["S3-lstm"]["curve"][-1][0] == 2
    saved = json.loads((tmp_path / "words_probe.json").read_text())
    assert np.allclose(saved["runs"]["S3-lstm"]["accuracy"], accuracy)
    assert (tmp_path / "words_probe.png").stat().st_size > 0
