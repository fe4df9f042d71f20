#!/bin/bash
# 1-layer vs 3-layer features at equal training compute (same data, steps, batch, seed).
#   W=/tmp/e3 bash experiments/distill_smollm2/compare/run.sh [extra --config.x=... flags]
# Builds the shared data once (prep.py), then trains both drafts side by side; rerun the
# same command to resume both (every stage is cached / checkpointed in $W).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
W=${W:-/tmp/e3}
PY=${PY:-python}
mkdir -p "$W/data"
GEN=()
GEN_DIR=${GEN_DIR:-/work/data/selfgen_smollm2}
# Decided once, when the data is first built, and kept for every resume (the pools, and
# the draft's vocabulary drawn from them, must not change under a run).
if [ ! -f "$W/data/generated_dir.txt" ]; then
  if ls "$GEN_DIR"/shard_*.npz >/dev/null 2>&1 && $PY -c "import specjax.training.selfgen" 2>/dev/null; then
    echo "$GEN_DIR" > "$W/data/generated_dir.txt"
  else
    echo "" > "$W/data/generated_dir.txt"   # no self-generated pairs (yet): prompt pools only
  fi
fi
GEN=(--config.data.generated_dir="$(cat "$W/data/generated_dir.txt")")
nice -n 10 $PY experiments/distill_smollm2/compare/prep.py --data="$W/data" \
  --config=configs/distill_smollm2_compare.py:3 "${GEN[@]}" "$@"
pids=()
for n in 1 3; do
  mkdir -p "$W/l$n"
  [ -e "$W/l$n/data" ] || ln -s "$W/data" "$W/l$n/data"
  nice -n 10 $PY scripts/distill.py --config=configs/distill_smollm2_compare.py:$n \
    --workdir="$W/l$n" "${GEN[@]}" "$@" > "$W/l$n.log" 2>&1 &
  pids+=($!)
done
echo "training: ${pids[*]} (logs $W/l1.log $W/l3.log)"
wait
