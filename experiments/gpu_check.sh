#!/usr/bin/env bash
# The prepared device check for a CUDA machine, run once from the repository root after `make test`
# has built .venv (a few minutes on one recent GPU): parity of the torch tree on CUDA against the
# reference in float32 and float64 (a failing check is recorded and the rest still run), the
# benchmark suite on CUDA, and a 200-step slice of each full-scale preset (charlm `paper`, noisy
# recall at SPEC §6 scale). Everything lands under $OUT (default experiments/results/bench/gpu).
set -uo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-experiments/results/bench/gpu}
mkdir -p "$OUT"
status=0
check() { $PY -m parity_tests.check --device cuda "$@" >> "$OUT/parity.log" || status=1; }  # one JSON report each
: > "$OUT/parity.log"
for dtype in float32 float64; do
  for group in O SO U SU T BO GL; do
    check --dtype "$dtype" --model group_rnn --group "$group" --n 6
  done
  check --dtype "$dtype" --model group_transformer --group O --n 6
  for read in plain ns polar; do
    check --dtype "$dtype" --model mlstm --read "$read"
  done
done
$PY -m experiments.bench --device cuda --out "$OUT" | tee "$OUT/bench.txt" || status=1
$PY -m experiments.train --preset paper/ptb_char-rnn-O-seed0 --device cuda --steps 200 --warmup 20 \
  --run-dir "$OUT/slice-paper-ptb_char-rnn-O" || status=1
for read in plain ns; do
  $PY -m experiments.studies.noisy_recall.train --vocab-size 80 --length 512 --read "$read" --steps 200 --batch 64 --lr 3e-4 \
    --device cuda --run-dir "$OUT/slice-nar-paper-$read" || status=1
done
exit $status
