"""``make demo`` writes ordinary run directories: resumable, reportable, with finite steps."""

import json

from experiments import demo, report, train


def test_the_demos_runs_are_runs_that_resume_and_report(tmp_path, capsys):
    out = tmp_path / "demo"
    assert demo.main(["--minutes", "0.05", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    steps = {result["model"]: result["steps"] for result in summary["results"]}
    assert steps["group_rnn"] == steps["lstm"] >= 1
    for name in ("group_rnn", "lstm"):
        directory = out / name
        config = json.loads((directory / "config.json").read_text())
        final = json.loads((directory / "final.json").read_text())
        assert config["train"]["steps"] == final["steps"] == steps[name]
        assert (directory / "checkpoint.pt").exists() and (directory / "best.pt").exists()
        before = {path.name: path.read_bytes() for path in directory.iterdir()}
        capsys.readouterr()
        assert train.main(["--resume", str(directory)]) == 0
        assert "nothing to train" in capsys.readouterr().err
        assert {path.name: path.read_bytes() for path in directory.iterdir()} == before
    markdown = report.report(out)
    assert "| group_rnn | 1 |" in markdown and "| lstm | 1 |" in markdown
