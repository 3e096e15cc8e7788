"""``python -m experiments.bench.device_check --device cuda``: the measured half of ``gpu_check.sh``.

* Host syncs of a training step of a group RNN (copy task) per group, after a warm-up step, with
  ``torch.cuda.set_sync_debug_mode("warn")``: at most 2 expected (the loss, the group check).
* Training tokens/s of O(24), U(24), T and BO (``bench.group_rnn``'s configurations) at batch 32
  and 256 × 128: eager; at batch 32 compiled as ``train --compile inductor`` compiles them
  (compile seconds recorded); on CUDA from CUDA graphs as ``train --cuda-graphs`` runs them. Each
  against ``nn.LSTM`` at matched parameters (cuDNN on CUDA); a step that fails is its row's error.
* Replays against eager steps, per group: a capturable ``RiemannianAdam`` step captured in a CUDA
  graph (the same bits expected; off CUDA replayed uncaptured), and on CUDA whole training steps
  (``cuda_graphs.CapturedStep``: no further from eager than eager runs are from each other).

Saves ``--out``/``device_check.json`` after every measurement (a stopped run keeps what it measured)
and prints a short table last (``--parity``: a file of ``label pass|FAIL`` lines, summarized first).
"""

from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path

import torch

from experiments.training import loop
from experiments.bench.compiled_step import compiled_step
from experiments.bench.group_rnn import lstm_matched_cases, matched_contenders
from experiments.bench.timing import alternate, save_record
from experiments.cli import CommandParser
from experiments.training import cuda_graphs, optim
from experiments.training.config import TrainConfig, build_config
from manifold_impl.group_rnn import GroupRNN
from manifold_impl.groups import get_group
from manifold_impl.losses import cross_entropy
from manifold_impl.manifolds import group_parameter
from manifold_impl.optim import RiemannianAdam
from reference.config import GROUP_NAMES, GroupRNNConfig

MAX_SYNCS = 2  # per training step: the loss read and the group check


def syncs_of_a_training_step(group, device, quick=False):
    """``{"group", "syncs", "sources"}``: the host syncs CUDA reports in one training step of a group
    RNN on ``group`` (n = 8, BO in 2×2 blocks) after a warm-up step; ``syncs`` None off CUDA."""
    options = {"group": group, "n": 8, "embedding_dim": 16, "batch": 8, "delay": 10 if quick else 100,
               "device": str(device), **({"block": 2} if group == "BO" else {})}
    with tempfile.TemporaryDirectory() as directory:
        run = loop.Run(directory, build_config("group_rnn", "copy", options))
        batches = [run.task.train_batch(run.rng, run.train.batch, step) for step in range(2)]
        run.backward(*batches[0])
        run.update()
        if torch.device(device).type != "cuda":
            run.backward(*batches[1])
            run.update()
            return {"group": group, "syncs": None, "sources": []}
        torch.cuda.synchronize(device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                run.backward(*batches[1])
                run.update()
            finally:
                torch.cuda.set_sync_debug_mode("default")
    sources = [str(w.message).splitlines()[0][:120] for w in caught if "synchroniz" in str(w.message)]
    return {"group": group, "syncs": len(sources), "sources": sources}


def throughput_cases(quick=False):
    """``(label, config, batch, length)``: O(24), U(24), T and BO at batch 32 and 256 × 128 (quick: small)."""
    cases = [case for case in lstm_matched_cases(quick) if not case[0].startswith("demo")]
    batches = (8,) if quick else (32, 256)
    return [(label, config, batch, length) for label, config, _, length, _ in cases for batch in batches]


def throughput(device, quick=False):
    """Training tokens/s of each case: eager; at batch 32 compiled (a compile takes tens of seconds;
    quick: the first case, through aot_eager); on CUDA from CUDA graphs; and of its matched LSTM,
    timed alternately. The rows, yielded as each case is measured."""
    backend = "aot_eager" if quick else "inductor"
    for index, (label, config, batch, length) in enumerate(throughput_cases(quick)):
        contenders, lstm = matched_contenders(config, batch, length, device)
        tokens = torch.randint(0, config.vocab_size, (batch, length + 1), generator=torch.Generator().manual_seed(0))
        extra = {}  # mode: its record, with the step to time under "step" until timed
        if (index == 0) if quick else (batch == 32):
            extra["compiled"] = compiled_contender(config, tokens.to(device), backend, device)
        if device.type == "cuda":
            extra["captured"] = captured_contender(config, tokens, device)
        contenders.update({mode: record.pop("step") for mode, record in extra.items() if "step" in record})
        seconds = alternate(contenders, repeats=2 if quick else 3, device=device)
        per_second = {name: batch * length / value for name, value in seconds.items()}
        for mode, name in (("eager", "group_rnn"), *((mode, mode) for mode in extra)):
            value = per_second.get(name)
            yield {"model": label, "batch": batch, "length": length, "mode": mode,
                   "tokens_per_second": value, "lstm_tokens_per_second": per_second["lstm"],
                   "ratio_to_lstm": None if value is None else value / per_second["lstm"],
                   "ratio_to_eager": None if value is None else value / per_second["group_rnn"],
                   "lstm_hidden": lstm.hidden_size, **extra.get(mode, {})}


def compiled_contender(config, tokens, backend, device):
    """``{"step", "backend", "compile_seconds"}``: ``compiled_step``'s training step after its first
    call (which compiles), or ``{"backend", "error"}`` where compiling or that call failed."""
    torch._dynamo.reset()
    start = time.perf_counter()
    try:
        step = compiled_step(config, tokens, backend, device)
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as error:  # recorded: the eager rows and the other checks still run
        return {"backend": backend, "error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    return {"step": step, "backend": backend, "compile_seconds": time.perf_counter() - start}


def captured_training_step(config, device, warmup=cuda_graphs.CAPTURE_WARMUP):
    """``(model, step)``: a fresh group RNN of ``config`` on ``device``, and ``step(tokens)``, one
    training step of it on ``tokens`` (``[batch, length + 1]`` on the host, the same shape at every
    call) as ``train --cuda-graphs`` runs it: ``cuda_graphs.CapturedStep`` with capturable
    ``optim.Optimizers`` (lr 1e-3, clip 1), its first ``warmup`` calls eager, the next captured."""
    model = GroupRNN(config, device=device, generator=torch.Generator().manual_seed(0))
    optimizers = optim.Optimizers(model, TrainConfig(model="group_rnn", steps=10**6), capturable=True)

    def loss(inputs, targets):
        logits, _ = model(inputs)
        return cross_entropy(logits, targets)

    captured = cuda_graphs.CapturedStep(model, loss, optimizers, clip=1.0, warmup=warmup)

    def step(tokens):
        captured.backward(tokens[:, :-1], tokens[:, 1:])
        captured.update()

    return model, step


def captured_contender(config, tokens, device):
    """``{"step", "capture_seconds"}``: ``captured_training_step``'s step after its warm-up and capture
    (their seconds), or ``{"error"}`` where they failed."""
    start = time.perf_counter()
    try:
        _, step = captured_training_step(config, device)
        for _ in range(cuda_graphs.CAPTURE_WARMUP + 1):
            step(tokens)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as error:  # recorded: the other rows and checks still run
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    return {"step": lambda: step(tokens), "capture_seconds": time.perf_counter() - start}


def captured_training_steps(group, device, steps=6):
    """``{"group", "max_difference", "eager_difference", "error"}``: ``steps`` training steps of a group
    RNN on ``group`` (n = 8, BO in 2×2 blocks; batch 4 × 16), captured after 2 eager ones, against the
    same steps all eager (``warmup`` = ``steps``), twice: ``max_difference`` the largest |difference| of
    the parameters captured from eager, ``eager_difference`` of the two eager runs (the kernels' own
    nondeterminism: the captured run should differ by no more)."""
    config = GroupRNNConfig(vocab_size=11, group=group, n=8, embedding_dim=8, block=2 if group == "BO" else None)
    tokens = torch.randint(0, 11, (steps, 4, 17), generator=torch.Generator().manual_seed(0))
    result = {"group": group, "max_difference": None, "eager_difference": None, "error": None}
    parameters = []
    try:
        for warmup in (2, steps, steps):
            model, step = captured_training_step(config, device, warmup=warmup)
            for batch in tokens:
                step(batch)
            parameters.append(torch.cat([(torch.view_as_real(p) if p.is_complex() else p).detach().reshape(-1)
                                         for p in model.parameters()]))
    except RuntimeError as error:  # a step that cannot be captured: recorded, the other checks still run
        return {**result, "error": str(error).splitlines()[0][:200]}
    return {**result, "max_difference": (parameters[0] - parameters[1]).abs().max().item(),
            "eager_difference": (parameters[1] - parameters[2]).abs().max().item()}


def replayable(step, device):
    """Run ``step`` once (on a side stream on CUDA: the first optimizer step allocates its moments)
    and return its replay: on CUDA a CUDA graph captured from a second call (capture runs nothing),
    elsewhere ``step`` itself."""
    if device.type != "cuda":
        step()
        return step
    with torch.cuda.device(device):
        cuda_graphs.on_side_stream(step)
        return cuda_graphs.capture(step)


def captured_optimizer_steps(group, device, steps=5):
    """``{"group", "captured", "max_difference", "error"}``: ``steps`` steps of a capturable
    ``RiemannianAdam`` (rate as a device tensor) on 4 float32 points of ``group`` (n = 8, BO in 2×2
    blocks), the first run once and every later one a replay (``replayable``; captured on CUDA only)
    with new gradients copied in, against the same steps run plainly; ``max_difference`` the largest
    |difference| of the points after them (0: the same bits), ``error`` why a capture failed."""
    device = torch.device(device)
    manifold_group = get_group(group, 8, block=2 if group == "BO" else None)
    generator = torch.Generator().manual_seed(0)
    start = manifold_group.random((4,), generator=generator, dtype=torch.float32)
    grads = [torch.randn(start.shape, generator=generator, dtype=start.dtype).to(device) for _ in range(steps)]

    def fresh():
        point = group_parameter(start.to(device), manifold_group)
        optimizer = RiemannianAdam([point], lr=1e-2, capturable=True)
        optimizer.param_groups[0]["lr"] = torch.tensor(1e-2, dtype=torch.float64, device=device)
        return point, optimizer

    plain, optimizer = fresh()
    for grad in grads:
        plain.grad = grad.clone()
        optimizer.step()
    replayed, optimizer = fresh()
    replayed.grad = grads[0].clone()  # the static buffer every replay reads
    result = {"group": group, "captured": device.type == "cuda", "max_difference": None, "error": None}
    try:
        replay = replayable(optimizer.step, device)
        for grad in grads[1:]:
            replayed.grad.copy_(grad)
            replay()
    except RuntimeError as error:  # a step that cannot be captured: recorded, the other checks still run
        return {**result, "error": str(error).splitlines()[0][:200]}
    return {**result, "max_difference": (replayed.detach() - plain.detach()).abs().max().item()}


def parity_summary(path):
    """``(passed, total, failed labels)`` of a file of ``label pass|FAIL`` lines."""
    lines = [line.rsplit(" ", 1) for line in Path(path).read_text().splitlines() if line.strip()]
    failed = [label for label, verdict in lines if verdict != "pass"]
    return len(lines) - len(failed), len(lines), failed


def table(record):
    """The short table the check prints last."""
    lines = []
    if "parity" in record:
        parity = record["parity"]
        failed = f" (failed: {', '.join(parity['failed'])})" if parity["failed"] else ""
        lines.append(f"parity: {parity['passed']}/{parity['total']} checks pass{failed}")
    lines.append("host syncs per training step (at most %d expected):" % MAX_SYNCS)
    lines += [f"  {row['group']:3} {'not measured off CUDA' if row['syncs'] is None else row['syncs']}"
              for row in record["syncs"]]
    lines.append("a captured RiemannianAdam step replayed, max |difference| from eager steps (0 expected):")
    lines += [f"  {row['group']:3} " + (f"FAIL: {row['error']}" if row["error"] else f"{row['max_difference']:.3g}"
                                        + ("" if row["captured"] else " (replayed uncaptured off CUDA)"))
              for row in record["captured"]]
    lines.append("training steps from CUDA graphs, max |difference| from eager steps (at most eager's own):")
    lines += [f"  {row['group']:3} " + (f"FAIL: {row['error']}" if row["error"] else
                                        f"{row['max_difference']:.3g} (eager's own {row['eager_difference']:.3g})")
              for row in record["captured_steps"]] or ["  not measured off CUDA"]
    lines.append(f"  {'model':58} {'batch':>5} {'mode':8} {'tokens/s':>10} {'LSTM tok/s':>10} {'÷ LSTM':>6} "
                 f"{'÷ eager':>7}")
    lines += [f"  {row['model'][:58]:58} {row['batch']:5} {row['mode']:8} "
              + (f"FAIL: {row['error']}" if row.get("error") else f"{row['tokens_per_second']:10.0f} "
                 f"{row['lstm_tokens_per_second']:10.0f} {row['ratio_to_lstm']:6.3f} {row['ratio_to_eager']:7.2f}")
              for row in record["throughput"]]
    return "\n".join(lines)


def main(argv=None):
    parser = CommandParser("experiments.bench.device_check", __doc__)
    parser.add_argument("--device", default="cuda", help="cuda[:k], or cpu for a smoke test")
    parser.add_argument("--quick", action="store_true", help="small shapes and few repetitions (smoke test)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"), help="the directory of device_check.json")
    parser.add_argument("--parity", type=Path, default=None, help="a file of 'label pass|FAIL' lines to summarize")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    if args.parity is not None and not args.parity.is_file():
        parser.error(f"--parity {args.parity}: no such file")
    start = time.perf_counter()
    record = {"quick": args.quick}
    if args.parity is not None:
        passed, total, failed = parity_summary(args.parity)
        record["parity"] = {"passed": passed, "total": total, "failed": failed}
    path = args.out / ("device_check_quick.json" if args.quick else "device_check.json")

    def save():  # after every measurement: a run stopped at its time limit keeps what it measured
        record["seconds"] = time.perf_counter() - start
        save_record(path, record, device)

    record["syncs"] = [syncs_of_a_training_step(group, device, args.quick) for group in GROUP_NAMES]
    save()
    record["captured"] = [captured_optimizer_steps(group, device) for group in GROUP_NAMES]
    save()
    record["captured_steps"] = [captured_training_steps(group, device) for group in GROUP_NAMES] \
        if device.type == "cuda" else []
    record["throughput"] = []
    save()
    for row in throughput(device, args.quick):
        record["throughput"].append(row)
        save()
        print(f"measured {row['model']} batch {row['batch']} {row['mode']}", flush=True)
    print(f"saved {path}")
    print(table(record))
    syncs = [row["syncs"] for row in record["syncs"] if row["syncs"] is not None]
    captured = all(row["error"] is None and row["max_difference"] == 0.0 for row in record["captured"]) and all(
        row["error"] is None and row["max_difference"] <= row["eager_difference"] for row in record["captured_steps"])
    compiled = not any(row.get("error") for row in record["throughput"])
    return 0 if all(count <= MAX_SYNCS for count in syncs) and captured and compiled \
        and not record.get("parity", {}).get("failed") else 1


if __name__ == "__main__":
    raise SystemExit(main())
