#!/bin/bash
# Two drafts trained side by side on the same data, steps, batch and seed: by default
# 1-layer vs 3-layer features (experiments/distill_smollm2/compare/config.py:1 and :3).
#   W=/tmp/e3 bash experiments/distill_smollm2/compare/run.sh [extra --config.x=... flags]
#   CONFIG=experiments/distill_smollm2/grow/config.py ARMS="1 2" W=/tmp/grow bash .../run.sh ...
# runs CONFIG:<arm> for each arm in workdir W/l<arm>; the data is built once (prep.py,
# with the last arm's config, so list the arm that reads the most target layers last),
# then both train; rerun the same command to resume both (every stage is cached /
# checkpointed in $W).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
W=${W:-/tmp/e3}
PY=${PY:-python}
CONFIG=${CONFIG:-experiments/distill_smollm2/compare/config.py}
read -r -a ARMS <<< "${ARMS:-1 3}"
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
  --config="$CONFIG:${ARMS[-1]}" "${GEN[@]}" "$@"
pids=()
logs=()
for n in "${ARMS[@]}"; do
  mkdir -p "$W/l$n"
  [ -e "$W/l$n/data" ] || ln -s "$W/data" "$W/l$n/data"
  nice -n 10 $PY scripts/distill.py --config="$CONFIG:$n" \
    --workdir="$W/l$n" "${GEN[@]}" "$@" > "$W/l$n.log" 2>&1 &
  pids+=($!)
  logs+=("$W/l$n.log")
done
echo "training: ${pids[*]} (logs ${logs[*]})"
wait
