"""The training loop's parts, one idea a module; ``experiments.train`` is their command line.

``config``: a run's configuration, built from options or read back from its directory, and the
model it trained; ``rundir``: a run directory's files, its lock and the resume checks; ``optim``:
the optimizers and the learning-rate schedule; ``cuda_graphs``: a training step replayed from CUDA
graphs.
"""
