"""``python -m experiments.bench.device_check --device cuda``: the measured half of ``gpu_check.sh``.

* Host syncs of a training step (``Run.backward`` then ``Run.update``: forward, loss, backward,
  clipping, both optimizers) of a group RNN on the copy task, per group, counted after a warm-up
  step with ``torch.cuda.set_sync_debug_mode("warn")``; at most 2 are expected (the loss, the
  parameters' group check). Not measured off CUDA.
* Training tokens/s of O(24), U(24), T and BO (``bench.group_rnn``'s configurations) at batch 32
  and 256 × 128, eager, and at batch 32 compiled as ``train --compile inductor`` compiles them
  (the fused recurrence's per-step functions; the compile seconds recorded, a failure recorded as
  the row's error), against ``nn.LSTM`` at matched parameters (cuDNN on CUDA).
* A capturable ``RiemannianAdam`` step captured once in a CUDA graph and replayed, per group,
  against the same steps run eagerly (the same bits expected); off CUDA replayed uncaptured.

Saves ``--out``/``device_check.json`` after every measurement (a stopped run keeps what it measured)
and prints a short table last (``--parity``: a file of ``label pass|FAIL`` lines, summarized first).
"""

from __future__ import annotations

import json
import tempfile
import time
import warnings
from pathlib import Path

import torch

from experiments import train
from experiments.bench.compiled_step import compiled_step
from experiments.bench.group_rnn import lstm_matched_cases, matched_contenders
from experiments.bench.timing import alternate, machine_record
from experiments.cli import CommandParser
from manifold_impl.groups import get_group
from manifold_impl.manifolds import group_parameter
from manifold_impl.optim import RiemannianAdam
from reference.config import GROUP_NAMES

MAX_SYNCS = 2  # per training step: the loss read and the group check


def syncs_of_a_training_step(group, device, quick=False):
    """``{"group", "syncs", "sources"}``: the host syncs CUDA reports in one training step of a group
    RNN on ``group`` (n = 8, BO in 2×2 blocks) after a warm-up step; ``syncs`` None off CUDA."""
    options = {"group": group, "n": 8, "embedding_dim": 16, "batch": 8, "delay": 10 if quick else 100,
               "device": str(device), **({"block": 2} if group == "BO" else {})}
    with tempfile.TemporaryDirectory() as directory:
        run = train.Run(directory, train.build_config("group_rnn", "copy", options))
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
    """Training tokens/s of each case, eager and at batch 32 compiled (a compile takes tens of seconds;
    quick: the first case, through aot_eager), and of its matched LSTM, timed alternately: the rows,
    yielded as each case is measured."""
    backend = "aot_eager" if quick else "inductor"
    for index, (label, config, batch, length) in enumerate(throughput_cases(quick)):
        contenders, lstm = matched_contenders(config, batch, length, device)
        compiled = {}
        if (index == 0) if quick else (batch == 32):
            tokens = torch.randint(0, config.vocab_size, (batch, length + 1),
                                   generator=torch.Generator().manual_seed(0)).to(device)
            compiled = compiled_contender(config, tokens, backend, device)
            if "step" in compiled:
                contenders["compiled"] = compiled.pop("step")
        seconds = alternate(contenders, repeats=2 if quick else 3, device=device)
        per_second = {name: batch * length / value for name, value in seconds.items()}
        for mode, name in (("eager", "group_rnn"), ("compiled", "compiled")):
            if mode == "compiled" and not compiled:
                continue
            value = per_second.get(name)
            yield {"model": label, "batch": batch, "length": length, "mode": mode,
                   "tokens_per_second": value, "lstm_tokens_per_second": per_second["lstm"],
                   "ratio_to_lstm": None if value is None else value / per_second["lstm"],
                   "lstm_hidden": lstm.hidden_size, **(compiled if mode == "compiled" else {})}


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


def replayable(step, device):
    """Run ``step`` once (on a side stream on CUDA: the first optimizer step allocates its moments)
    and return its replay: on CUDA a CUDA graph captured from a second call (capture runs nothing),
    elsewhere ``step`` itself."""
    if device.type != "cuda":
        step()
        return step
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


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
    lines.append(f"  {'model':58} {'batch':>5} {'mode':8} {'tokens/s':>10} {'LSTM tok/s':>10} {'ratio':>6}")
    lines += [f"  {row['model'][:58]:58} {row['batch']:5} {row['mode']:8} "
              + (f"FAIL: {row['error']}" if row.get("error") else f"{row['tokens_per_second']:10.0f} "
                 f"{row['lstm_tokens_per_second']:10.0f} {row['ratio_to_lstm']:6.3f}") for row in record["throughput"]]
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
    record = {"machine": machine_record(device), "quick": args.quick}
    if args.parity is not None:
        passed, total, failed = parity_summary(args.parity)
        record["parity"] = {"passed": passed, "total": total, "failed": failed}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("device_check_quick.json" if args.quick else "device_check.json")

    def save():  # after every measurement: a run stopped at its time limit keeps what it measured
        record["seconds"] = time.perf_counter() - start
        path.write_text(json.dumps(record, indent=2))

    record["syncs"] = [syncs_of_a_training_step(group, device, args.quick) for group in GROUP_NAMES]
    save()
    record["captured"] = [captured_optimizer_steps(group, device) for group in GROUP_NAMES]
    record["throughput"] = []
    save()
    for row in throughput(device, args.quick):
        record["throughput"].append(row)
        save()
        print(f"measured {row['model']} batch {row['batch']} {row['mode']}", flush=True)
    print(f"saved {path}")
    print(table(record))
    syncs = [row["syncs"] for row in record["syncs"] if row["syncs"] is not None]
    captured = all(row["error"] is None and row["max_difference"] == 0.0 for row in record["captured"])
    compiled = not any(row.get("error") for row in record["throughput"])
    return 0 if all(count <= MAX_SYNCS for count in syncs) and captured and compiled \
        and not record.get("parity", {}).get("failed") else 1


if __name__ == "__main__":
    raise SystemExit(main())
