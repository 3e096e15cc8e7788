"""mLSTM with the Newton–Schulz read: step time against its parts, and peak memory against the
plain read. On the CPU each memory measurement runs in its own subprocess (peak resident set
size); on CUDA it is the allocator's peak in this process."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import numpy as np
import torch

from experiments.bench.timing import alternate, row
from experiments.bench.timing import training_step as timed_step
from experiments.models import build_model
from manifold_impl.mlstm import newton_schulz
from manifold_impl.optim import AdamW
from reference.config import MLSTMConfig


def training_step(read, batch, length, device="cpu"):
    model = build_model(MLSTMConfig(vocab_size=80, read=read), device=device,
                        generator=torch.Generator().manual_seed(0))
    optimizer = AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 80, size=(batch, length + 1))).to(device)
    return timed_step(model, optimizer, tokens)


def bare_newton_schulz(count, head_dim=48, device="cpu"):
    """Forward + backward of NS_5 on ``count`` random head_dim × head_dim matrices."""
    c = torch.randn(count, head_dim, head_dim, generator=torch.Generator().manual_seed(1)).to(device).requires_grad_()
    return lambda: newton_schulz(c).sum().backward()


def _status_kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_memory(read, batch, length):
    """Child-process job (Linux): peak RSS growth (MiB) over one training step after a warm-up.

    Writing 5 to /proc/self/clear_refs resets the peak (VmHWM) to the current RSS, so the peak
    read afterwards is the step's own. The parent sets ``MALLOC_MMAP_THRESHOLD_`` so that every
    tensor of 64 KiB or more is its own mapping, returned on free: otherwise glibc keeps freed
    blocks, the warm-up's peak stays resident and the step's growth reads as zero.
    """
    step = training_step(read, batch, length)
    step()  # warm-up: allocator pools and lazily built kernels
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    before = _status_kib("VmRSS")
    step()
    return (_status_kib("VmHWM") - before) / 1024


def peak_cuda_memory(read, batch, length, device):
    """Peak CUDA memory growth (MiB) over one training step after a warm-up, in this process."""
    step = training_step(read, batch, length, device)
    step()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    step()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2 ** 20


def peak_memory_in_subprocess(read, batch, length):
    code = ("import json; from experiments.bench.mlstm import peak_memory; "
            f"print(json.dumps(peak_memory({read!r}, {batch}, {length})))")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick=False, device="cpu"):
    batch, length = (4, 64) if quick else (16, 256)
    heads = MLSTMConfig(vocab_size=80).num_heads
    times = alternate({"ns": training_step("ns", batch, length, device),
                       "plain": training_step("plain", batch, length, device),
                       "bare_ns": bare_newton_schulz(batch * heads * length, device=device)},
                      repeats=1 if quick else 3, device=device)
    rows = [row(f"NS read step / (plain step + bare NS fwd+bwd), batch {batch}, length {length}",
                times["ns"] / (times["plain"] + times["bare_ns"]), "<=", 1.25, seconds=times)]
    batch, length = (2, 128) if quick else (8, 1024)
    if torch.device(device).type == "cuda":
        memory = {read: peak_cuda_memory(read, batch, length, device) for read in ("ns", "plain")}
    else:
        memory = {read: statistics.median(peak_memory_in_subprocess(read, batch, length)
                                          for _ in range(1 if quick else 2)) for read in ("ns", "plain")}
    rows.append(row(f"NS read peak memory / plain read's, batch {batch}, length {length}",
                    memory["ns"] / memory["plain"], "<=", 3.0, peak_mib=memory))
    return rows
