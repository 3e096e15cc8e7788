"""Data-parallel training under torchrun (``experiments.training.distributed``): two gloo processes on
the CPU train what one process trains with the same global batch, rank 0 alone writes, and the
group-valued parameters stay the same bits on every rank and on their group."""

import json
import os
import subprocess

import pytest

from experiments.training import distributed, loop
from experiments.training.config import build_config
from experiments.training.launch import ROOT, TORCHRUN_VARIABLES, child_environment, torchrun_command

ARGS = ["--model", "group_rnn", "--dataset", "tinyshakespeare", "--group", "O", "--n", "8", "--steps", "30",
        "--batch", "8", "--eval_every", "30"]


def _torchrun(*command):
    environment = {**child_environment(), "PYTHONFAULTHANDLER": "1"}  # a rank that aborts prints its Python stacks
    done = subprocess.run(torchrun_command(2, *command), cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


OPTIONS = {"dataset": "tinyshakespeare", "group": "O", "n": 8, "batch": 8, "eval_every": 10, "checkpoint_every": 10,
           "schedule": "constant"}  # a learning rate that does not depend on the steps asked for: a resume continues it


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The single-process run of 30 steps that the resumed runs must reproduce."""
    directory = tmp_path_factory.mktemp("one")
    return loop.run(build_config("group_rnn", "lm", {**OPTIONS, "steps": 30, "eval_every": 30}), directory), directory


def _same_bits(final, single):
    for key in ("valid_bits", "test_bits_per_token"):
        assert final[key] == pytest.approx(single[key], rel=1e-4), key
    assert final["steps"] == single["steps"] == 30


def test_two_processes_train_what_one_trains_with_the_same_global_batch_and_rank_0_alone_writes(tmp_path):
    """The acceptance command at 30 steps: validation and test bits within 1e-4 relative of one process."""
    single_directory = tmp_path / "one"
    single = loop.run(build_config("group_rnn", "lm", {"dataset": "tinyshakespeare", "group": "O", "n": 8,
                                                       "steps": 30, "batch": 8, "eval_every": 30}), single_directory)
    done = _torchrun("-m", "experiments.train", "--", *ARGS, "--run-dir", str(tmp_path / "two"))
    two = json.loads((tmp_path / "two" / "final.json").read_text())
    _same_bits(two, single)
    assert two["best_step"] == 30
    assert [json.loads(line)["step"] for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()] == [30]
    assert done.stdout.count('"valid_bits"') == 1  # the final record printed once, by rank 0
    assert json.loads((tmp_path / "two" / "config.json").read_text())["world_size"] == 2
    assert json.loads((single_directory / "config.json").read_text())["world_size"] == 1


def test_a_run_resumes_under_another_number_of_processes_where_the_global_batch_stream_left_off(tmp_path, one_process):
    """20 steps on two processes continued to 30 on one, and 20 on one continued on two: both are the
    30-step single-process run (the checkpoint holds the one global stream's position)."""
    single, _ = one_process
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in OPTIONS.items()]
    _torchrun("-m", "experiments.train", "--", "--model", "group_rnn", *flags, "--steps", "20",
              "--run-dir", str(tmp_path / "two-then-one"))
    _same_bits(loop.run(build_config("group_rnn", "lm", {**OPTIONS, "steps": 30}), tmp_path / "two-then-one"), single)
    loop.run(build_config("group_rnn", "lm", {**OPTIONS, "steps": 20}), tmp_path / "one-then-two")
    _torchrun("-m", "experiments.train", "--", "--resume", str(tmp_path / "one-then-two"), "--steps", "30")
    _same_bits(json.loads((tmp_path / "one-then-two" / "final.json").read_text()), single)
    resumes = [json.loads(line) for line in (tmp_path / "one-then-two" / "resumes.jsonl").read_text().splitlines()]
    assert [r["step"] for r in resumes] == [20]
    assert json.loads((tmp_path / "one-then-two" / "config.json").read_text())["world_size"] == 2


WORKER = '''"""Trains a group RNN with group-valued H_0 and prototypes under torchrun and, after every update,
checks on every rank that those parameters are the same bits on every rank and on their group; rank 0
writes what it saw to --out as JSON."""

import argparse
import json
from pathlib import Path

import torch
import torch.distributed as dist

from experiments.training import distributed, loop
from experiments.training.config import build_config
from experiments.training.loop import compact_group_parameters

OPTIONS = {"dataset": "tinyshakespeare", "group": "O", "n": 6, "embedding_dim": 4, "readout": "prototype",
           "steps": 6, "batch": 4, "length": 16, "eval_every": 6, "checkpoint_every": 6, "eval_tokens": 64,
           "lr": 0.03, "warmup": 0}

parser = argparse.ArgumentParser()
parser.add_argument("--run-dir", required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()
Path(args.run_dir).mkdir(parents=True, exist_ok=True)
run = loop.Run(args.run_dir, build_config("group_rnn", "lm", OPTIONS))
seen = {"steps": 0, "identical": True, "max_distance": 0.0, "world_size": dist.get_world_size()}
update = run.update


def checked_update():
    update()
    parameters = compact_group_parameters(run.model)
    flat = torch.cat([p.detach().reshape(-1) for p in parameters])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    seen["steps"] += 1
    seen["identical"] &= all(torch.equal(other, flat) for other in gathered)
    seen["max_distance"] = max(seen["max_distance"], *(p.manifold.group.distance(p.detach()).max().item()
                                                       for p in parameters))
    seen["parameters"] = len(parameters)


run.update = checked_update
run.fit()
if dist.get_rank() == 0:
    Path(args.out).write_text(json.dumps(seen))
distributed.stop()
'''


def test_group_valued_parameters_stay_the_same_on_every_rank_and_on_their_group(tmp_path):
    (tmp_path / "worker.py").write_text(WORKER)
    _torchrun(str(tmp_path / "worker.py"), "--run-dir", str(tmp_path / "run"), "--out", str(tmp_path / "seen.json"))
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["world_size"] == 2 and seen["steps"] == 6 and seen["parameters"] >= 2  # H_0 and the prototypes
    assert seen["identical"] and seen["max_distance"] < 1e-5


RUNS = '''"""Trains each run of a JSON list ``[[name, model, {option: value}], ...]`` (``loop.run`` on the lm
task) into --root/name, one after another in the same torchrun processes."""

import argparse
import json
from pathlib import Path

from experiments.training import distributed, loop
from experiments.training.config import build_config

parser = argparse.ArgumentParser()
parser.add_argument("--runs", required=True)
parser.add_argument("--root", required=True)
args = parser.parse_args()
distributed.start("cpu")  # joined once, for every run
for name, model, options in json.loads(Path(args.runs).read_text()):
    loop.run(build_config(model, "lm", options), Path(args.root) / name)
distributed.stop()
'''
SMALL = {"dataset": "tinyshakespeare", "steps": 10, "batch": 8, "length": 32, "eval_every": 10, "eval_tokens": 512}
MODELS = [
    ("lstm", "lstm", {"hidden_size": 16}),
    ("gpt", "gpt", {"width": 16, "num_heads": 2, "num_layers": 1}),
    ("exprnn", "exprnn", {"hidden_size": 16}),
    ("mlstm", "mlstm", {"embedding_dim": 16, "num_heads": 2}),
    ("group_transformer", "group_transformer", {"n": 4, "num_heads": 2, "num_layers": 1}),
    ("group_rnn-compiled", "group_rnn", {"group": "O", "n": 8, "compile": "aot_eager"}),  # its fused steps compiled
    ("lstm-compiled", "lstm", {"hidden_size": 16, "compile": "aot_eager"}),
]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """Every run of ``MODELS`` trained by two processes under torchrun (one launch for all of them)."""
    root = tmp_path_factory.mktemp("models")
    (root / "runs.py").write_text(RUNS)
    (root / "runs.json").write_text(json.dumps([[name, model, {**SMALL, **options}] for name, model, options in MODELS]))
    _torchrun(str(root / "runs.py"), "--runs", str(root / "runs.json"), "--root", str(root))
    return root


@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")  # dynamo, tracing
@pytest.mark.parametrize("name, model, options", MODELS, ids=[name for name, _, _ in MODELS])
def test_every_model_trains_under_two_processes_what_it_trains_in_one(name, model, options, two_processes, tmp_path):
    """The baselines, the mLSTM and the group Transformer under DDP, and ``--compile`` under DDP: the
    validation and test bits of one process with the same global batch, within 1e-4 relative."""
    single = loop.run(build_config(model, "lm", {**SMALL, **options}), tmp_path / "one")
    two = json.loads((two_processes / name / "final.json").read_text())
    for key in ("valid_bits", "test_bits_per_token"):
        assert two[key] == pytest.approx(single[key], rel=1e-4), key
    assert two["steps"] == single["steps"] == 10
    assert json.loads((two_processes / name / "config.json").read_text())["world_size"] == 2


def test_a_batch_the_processes_cannot_share_or_cuda_graphs_are_refused_before_any_work(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"--batch 7 does not split across 2 processes"):
        distributed.check_training(build_config("group_rnn", "lm", {"dataset": "ptb_char", "batch": 7}).train)
    graphs = build_config("group_rnn", "lm", {"dataset": "ptb_char", "batch": 8, "device": "cuda", "cuda_graphs": True}).train
    for world_size in ("2", "1"):  # under torchrun, one process too
        monkeypatch.setenv("WORLD_SIZE", world_size)
        with pytest.raises(ValueError, match=r"--cuda-graphs trains one process started without torchrun"):
            distributed.check_training(graphs)
    distributed.check_training(build_config("group_rnn", "lm", {"dataset": "ptb_char", "batch": 7}).train)  # one process: any batch
    monkeypatch.delenv("WORLD_SIZE")
    distributed.check_training(graphs)


def test_each_rank_takes_its_own_rows_of_the_global_batch(monkeypatch):
    import torch

    batch = torch.arange(8 * 3).reshape(8, 3)
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, first in ((0, 0), (1, 4)):
        monkeypatch.setenv("RANK", str(rank))
        assert torch.equal(distributed.rows(batch), batch[first:first + 4])
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    assert torch.equal(distributed.rows(batch), batch)


def test_a_child_training_process_starts_its_own_world_and_imports_this_checkout(monkeypatch):
    """``child_environment``: no torchrun variable of a rank that launches it, this checkout first on
    PYTHONPATH, the threads asked for; ``torchrun_command`` runs torch's launcher standalone."""
    for key in TORCHRUN_VARIABLES:
        monkeypatch.setenv(key, "1")
    monkeypatch.setenv("PYTHONPATH", "elsewhere")
    environment = child_environment(threads=3)
    assert not set(TORCHRUN_VARIABLES) & set(environment)
    assert environment["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "elsewhere"]
    assert environment["OMP_NUM_THREADS"] == "3"
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert "OMP_NUM_THREADS" not in child_environment()
    assert torchrun_command(2, "-m", "x")[1:] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                                  "-m", "x"]


def test_leaving_the_process_group_first_frees_the_ddp_wrappers_that_finished_runs_left(tmp_path):
    """A run's DDP wrapper outlives it in a reference cycle; ``stop`` collects it before the group is
    destroyed, so it is not freed in the interpreter's finalization (where gloo's work can abort)."""
    import gc

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    def wrappers():
        return sum(type(thing) is DistributedDataParallel for thing in gc.get_objects())

    gc.disable()  # only stop's collection may free it
    try:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # a world of one, in this process
        loop.run(build_config("lstm", "lm", {**SMALL, "steps": 2, "eval_every": 2, "hidden_size": 8}), tmp_path / "run")
        assert wrappers() == 1
        distributed.stop()
        assert wrappers() == 0 and not dist.is_initialized()
    finally:
        gc.enable()
        if dist.is_initialized():
            dist.destroy_process_group()
