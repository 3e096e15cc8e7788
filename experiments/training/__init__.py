"""The training loop's parts, one idea a module; ``experiments.train`` is their command line.

``loop``: one run in its directory (``Run``: build, train, checkpoint, evaluate; ``run``: lock,
resume, train); ``config``: a run's configuration, built from options or read back from its
directory, the model it trained, and the command line that rebuilds it; ``rundir``: a run
directory's files, its lock and the resume checks; ``optim``: the optimizers and the learning-rate
schedule; ``cuda_graphs``: a training step replayed from CUDA graphs; ``progress``: what a run
prints while it trains.
"""
