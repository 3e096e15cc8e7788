"""mLSTM with the Newton–Schulz read: step time against its parts, and peak memory against the
plain read. Each memory measurement runs in its own subprocess (peak resident set size)."""

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
from manifold_impl.mlstm import MLSTM, newton_schulz
from manifold_impl.optim import AdamW
from reference.config import MLSTMConfig


def training_step(read, batch, length):
    model = MLSTM(MLSTMConfig(vocab_size=80, read=read), generator=torch.Generator().manual_seed(0))
    optimizer = AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 80, size=(batch, length + 1)))
    return timed_step(model, optimizer, tokens)


def bare_newton_schulz(count, head_dim=48):
    """Forward + backward of NS_5 on ``count`` random head_dim × head_dim matrices."""
    c = torch.randn(count, head_dim, head_dim, generator=torch.Generator().manual_seed(1), requires_grad=True)
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


def peak_memory_in_subprocess(read, batch, length):
    code = ("import json; from experiments.bench.mlstm import peak_memory; "
            f"print(json.dumps(peak_memory({read!r}, {batch}, {length})))")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick=False):
    batch, length = (4, 64) if quick else (16, 256)
    heads = MLSTMConfig(vocab_size=80).num_heads
    times = alternate({"ns": training_step("ns", batch, length), "plain": training_step("plain", batch, length),
                       "bare_ns": bare_newton_schulz(batch * heads * length)}, repeats=1 if quick else 3)
    rows = [row(f"NS read step / (plain step + bare NS fwd+bwd), batch {batch}, length {length}",
                times["ns"] / (times["plain"] + times["bare_ns"]), "<=", 1.25, seconds=times)]
    batch, length = (2, 128) if quick else (8, 1024)
    memory = {read: statistics.median(peak_memory_in_subprocess(read, batch, length) for _ in range(1 if quick else 2))
              for read in ("ns", "plain")}
    rows.append(row(f"NS read peak memory / plain read's, batch {batch}, length {length}",
                    memory["ns"] / memory["plain"], "<=", 3.0, peak_mib=memory))
    return rows
