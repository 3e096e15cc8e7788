#!/usr/bin/env bash
# The prepared device check for the lent CUDA machine, one command from the repository root (sized
# for 10 minutes on one H100 or H200). It runs with that machine's own Python (PY, default python3:
# no .venv, nothing fetched): the wheels its image lacks, prepared here by `make gpu-wheels` into
# .whl/ and carried with the working tree, are installed into a temporary folder (pip --target, or
# unpacked where it has no pip) that goes on PYTHONPATH with the repository. It prints the Python, torch and CUDA versions first, then checks
# parity of the torch tree on CUDA against the reference in float32 and float64 for every model (a
# failing check is recorded and the rest still run), trains a few steps under torchrun in a world of
# one (DDP over NCCL; gloo in the rehearsal) and a few steps under fp16 and bf16 autocast (bf16 only
# in the rehearsal), then runs `experiments.bench.device_check`:
# host syncs of a training step per group, captured optimizer and training steps (train
# --cuda-graphs) against eager ones, and training tokens/s against cuDNN's LSTM (eager, compiled,
# CUDA graphs), its JSON written after each measurement. Everything lands under $OUT (default
# experiments/results/bench/gpu). Exit status 1 if any check failed.
#
#   bash experiments/gpu_check.sh          # on the GPU machine
#   bash experiments/gpu_check.sh --cpu    # the rehearsal here: the same plumbing on the CPU, small sizes
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
WHEELS=${WHEELS:-.whl}
DEVICE=cuda
QUICK=()
if [[ "${1:-}" == "--cpu" ]]; then
  DEVICE=cpu; QUICK=(--quick); OUT=${OUT:-runs/gpu_check_cpu}
elif [[ -n "${1:-}" ]]; then
  echo "usage: bash experiments/gpu_check.sh [--cpu]" >&2; exit 2
fi
OUT=${OUT:-experiments/results/bench/gpu}
mkdir -p "$OUT"
shopt -s nullglob
wheels=("$WHEELS"/*.whl)
if (( ${#wheels[@]} == 0 )); then
  echo "no wheels in $WHEELS: run 'make gpu-wheels' on a machine with a network first" >&2; exit 2
fi
SITE=$(mktemp -d)
trap 'rm -rf "$SITE"' EXIT
if $PY -m pip --version > /dev/null 2>&1; then
  $PY -m pip install --quiet --no-index --no-deps --target "$SITE" "${wheels[@]}" || {
    echo "installing the wheels of $WHEELS into $SITE failed" >&2; exit 2; }
else  # no pip: a wheel of importable modules is a zip archive of them
  for wheel in "${wheels[@]}"; do
    $PY -m zipfile -e "$wheel" "$SITE" || { echo "unpacking $wheel into $SITE failed" >&2; exit 2; }
  done
fi
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
$PY -c "import json, platform, torch; print(json.dumps({'python': platform.python_version(), 'torch': torch.__version__, 'cuda': torch.version.cuda}))" \
  | tee "$OUT/versions.json"
status=0
: > "$OUT/parity.log"
: > "$OUT/parity.txt"
check() {  # label, then the options of parity_tests.check; one JSON report each in parity.log
  local label=$1; shift
  if timeout 120 $PY -m parity_tests.check --device "$DEVICE" "$@" >> "$OUT/parity.log" 2>&1; then
    echo "$label pass" >> "$OUT/parity.txt"
  else
    echo "$label FAIL" >> "$OUT/parity.txt"; status=1
  fi
}
if [[ $DEVICE == cuda ]]; then
  for dtype in float32 float64; do
    for group in O SO U SU T BO GL; do
      check "group_rnn-$group-$dtype" --dtype "$dtype" --model group_rnn --group "$group" --n 6
    done
    check "group_transformer-O-$dtype" --dtype "$dtype" --model group_transformer --group O --n 6
    for read in plain ns polar; do
      check "mlstm-$read-$dtype" --dtype "$dtype" --model mlstm --read "$read"
    done
  done
else  # one check of each model, small
  check "group_rnn-U-float32" --dtype float32 --model group_rnn --group U --n 3 --embedding-dim 4 --length 4
  check "group_transformer-O-float64" --model group_transformer --group O --n 3 --num-layers 1 --length 4
  check "mlstm-ns-float32" --dtype float32 --model mlstm --read ns --length 4
fi
# a short training run under torchrun in a world of one, through DDP: NCCL on CUDA (gloo in the rehearsal)
backend=$([[ $DEVICE == cuda ]] && echo nccl || echo gloo)
if timeout 300 $PY -m torch.distributed.run --standalone --nproc_per_node=1 -m experiments.train -- --model group_rnn \
    --task recall --vocab-size 24 --length 16 --group O --n 4 --steps 4 --batch 4 --eval-every 4 --valid-sequences 8 \
    --device "$DEVICE" --run-dir "$OUT/ddp_world1" > "$OUT/ddp.log" 2>&1 \
    && grep -q '"world_size": 1' "$OUT/ddp_world1/config.json"; then
  echo "ddp-$backend-world1 pass" >> "$OUT/parity.txt"
else
  echo "ddp-$backend-world1 FAIL" >> "$OUT/parity.txt"; status=1
fi
# a few training steps under autocast: fp16 with its grad scaler on CUDA only (refused on the CPU),
# bf16 on both; each passes if it ends with a finite training loss and its state on the group
for precision in $([[ $DEVICE == cuda ]] && echo fp16 bf16 || echo bf16); do
  if timeout 300 $PY -m experiments.train --model group_rnn --task recall --vocab-size 24 --length 16 --group O --n 4 \
      --steps 4 --batch 4 --eval-every 4 --valid-sequences 8 --precision "$precision" --device "$DEVICE" \
      --run-dir "$OUT/precision_$precision" > "$OUT/precision_$precision.log" 2>&1 \
      && $PY -c "import json, math, sys; last = json.loads(open(sys.argv[1]).read().splitlines()[-1])
sys.exit(not (math.isfinite(last['train_loss']) and last['drift'] < 1e-4))" "$OUT/precision_$precision/metrics.jsonl"; then
    echo "train-$precision pass" >> "$OUT/parity.txt"
  else
    echo "train-$precision FAIL" >> "$OUT/parity.txt"; status=1
  fi
done
$PY -m experiments.bench.device_check --device "$DEVICE" "${QUICK[@]}" --out "$OUT" --parity "$OUT/parity.txt" \
  2>&1 | tee "$OUT/device_check.txt" || status=1
exit $status
