"""The training loop's parts, one idea a module; ``experiments.train`` is their command line.

``rundir``: a run directory's files, its lock and the resume checks; ``optim``: the optimizers and
the learning-rate schedule; ``cuda_graphs``: a training step replayed from CUDA graphs.
"""
