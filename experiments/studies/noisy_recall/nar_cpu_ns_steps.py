"""The ``nar-cpu-ns-steps`` preset: the nar-cpu study's optional arms, NS reads of 1 and 3 cubic steps.

Same task, model, budget and seeds as ``nar_cpu``, cosine schedule only; the runs
go into the same directory, so the report pairs each with the plain read by seed:

    python -m experiments.sweep nar-cpu-ns-steps --workers 2 --out experiments/results/noisy_recall/cpu
    python -m experiments.report experiments/results/noisy_recall/cpu
"""

from experiments.studies.noisy_recall.arms import runs

OPTIONS = {"embedding_dim": 32, "steps": 1000, "batch": 32, "eval_every": 50, "valid_sequences": 256}
RUNS = [run for k in (1, 3) for run in runs([(48, 64)], lrs=(1e-2,), seeds=range(8), reads=("ns",), ns_steps=k,
                                             **OPTIONS)]
