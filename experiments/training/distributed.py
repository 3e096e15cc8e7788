"""Data parallelism under torchrun: the process group, each rank's rows of the global batch, and rank
0 as the one process that writes the run directory.

``torchrun --nproc_per_node=N -m experiments.train -- ARGS`` starts N processes with ``RANK`` and
``WORLD_SIZE`` set, and each joins the process group and trains under ``DistributedDataParallel``
(``--nproc_per_node=1`` too: the device check's one-GPU NCCL row). One process started without
torchrun is a world of one, and every function here is then a no-op, so that path is unchanged.
"""

from __future__ import annotations

import contextlib
import gc
import os

import torch
import torch.distributed as dist


def world():
    """``(rank, world size)`` from torchrun's environment; ``(0, 1)`` outside it."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def launched():
    """Whether torchrun started this process (its environment names a world size)."""
    return "WORLD_SIZE" in os.environ


def is_writer():
    """Whether this process writes the run directory (rank 0; the only one outside torchrun)."""
    return world()[0] == 0


def check_training(train):
    """Refuse, before any work, a ``TrainConfig`` that torchrun's processes cannot train: a global batch
    the ranks cannot share equally, or CUDA graphs (DDP's gradient buckets are not captured)."""
    world_size = world()[1]
    if train.batch % world_size:
        raise ValueError(f"--batch {train.batch} does not split across {world_size} processes: give a multiple of "
                         f"{world_size} (each rank trains batch / world size rows of the same global batch)")
    if launched() and train.cuda_graphs:
        raise ValueError("--cuda-graphs trains one process started without torchrun (DDP's gradient buckets are "
                         "not captured): drop it under torchrun")


def start(device):
    """Join torchrun's process group (gloo on the CPU, NCCL on CUDA) unless this process is in it;
    whether it joined here (its caller then leaves it: ``stop``). A process joins once: the group
    is rendezvoused by torchrun's store, which does not take a second join."""
    if not launched() or dist.is_initialized():
        return False
    backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    return True


def stop():
    """Leave the process group, once every rank is done with it (a process that exits with the group
    alive can abort in gloo's teardown). The DDP wrappers of finished runs, kept alive by their own
    reference cycles, are collected first: freed in the interpreter's finalization, the gloo work
    their reducers hold can abort the process after it wrote its results."""
    if dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def rows(tensor):
    """This rank's rows of a global batch ``tensor: [batch, ...]`` (all of it in a world of one)."""
    rank, world_size = world()
    share = tensor.shape[0] // world_size
    return tensor[rank * share:(rank + 1) * share]


def mean_loss(loss):
    """The mean over the ranks of each rank's batch-mean ``loss`` (a 0-d tensor): the global batch's mean,
    the same number on every rank, so that they all stop together on a loss that is not finite."""
    if world()[1] == 1:
        return loss
    total = loss.detach().clone()
    dist.all_reduce(total)
    return total / world()[1]


def wrap(model):
    """``model`` under ``DistributedDataParallel`` in torchrun's process group (gradients averaged over
    the ranks in the backward pass), else ``model`` itself."""
    if not dist.is_initialized():
        return model
    return torch.nn.parallel.DistributedDataParallel(model)


def from_writer(value):
    """Rank 0's ``value`` (a JSON-able object) on every rank; ``value`` itself in a world of one."""
    if world()[1] == 1:
        return value
    shared = [value]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]


def barrier():
    if world()[1] > 1:
        dist.barrier()


@contextlib.contextmanager
def writer_holding(lock):
    """Rank 0 holds ``lock`` (a context manager) while every rank runs the block; the others start
    once it holds it."""
    with lock if is_writer() else contextlib.nullcontext():
        barrier()
        yield
