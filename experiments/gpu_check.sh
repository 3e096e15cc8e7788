#!/usr/bin/env bash
# The prepared device check for a CUDA machine, run once from the repository root after `make test`
# has built .venv (sized for 10 minutes on one H200): parity of the torch tree on CUDA against the
# reference in float32 and float64 for every model (a failing check is recorded and the rest still
# run), then `experiments.bench.device_check`: the host syncs of a training step of every group, a
# captured RiemannianAdam step and captured training steps (train --cuda-graphs) replayed against
# eager steps, and training tokens/s against cuDNN's LSTM: eager, compiled (the fused recurrence's
# steps, as train --compile inductor) and from CUDA graphs. It prints a short table last; everything
# lands under $OUT (default experiments/results/bench/gpu). Exit status 1 if any check failed.
set -uo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-experiments/results/bench/gpu}
mkdir -p "$OUT"
status=0
: > "$OUT/parity.log"
: > "$OUT/parity.txt"
check() {  # label, then the options of parity_tests.check; one JSON report each in parity.log
  local label=$1; shift
  if timeout 120 $PY -m parity_tests.check --device cuda "$@" >> "$OUT/parity.log" 2>&1; then
    echo "$label pass" >> "$OUT/parity.txt"
  else
    echo "$label FAIL" >> "$OUT/parity.txt"; status=1
  fi
}
for dtype in float32 float64; do
  for group in O SO U SU T BO GL; do
    check "group_rnn-$group-$dtype" --dtype "$dtype" --model group_rnn --group "$group" --n 6
  done
  check "group_transformer-O-$dtype" --dtype "$dtype" --model group_transformer --group O --n 6
  for read in plain ns polar; do
    check "mlstm-$read-$dtype" --dtype "$dtype" --model mlstm --read "$read"
  done
done
$PY -m experiments.bench.device_check --device cuda --out "$OUT" --parity "$OUT/parity.txt" \
  2>&1 | tee "$OUT/device_check.txt" || status=1
exit $status
