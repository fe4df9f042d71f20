#!/usr/bin/env bash
# Distils the toy target's draft once per loss, then tabulates alpha before/after.
#   bash experiments/distill_losses/run_toy.sh [WORKROOT] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${1:-/tmp/distill_losses}
STEPS=${2:-150}
PY=${PY:-.venv/bin/python}
for loss in ${LOSSES:-fkl rkl jsd tvd}; do
  $PY scripts/distill.py --config=configs/distill.py:tiny --workdir="$ROOT/$loss" \
      --config.loss.name=$loss --config.num_steps=$STEPS --config.eval.every=50
done
$PY experiments/distill_losses/collect.py --config=configs/distill.py:tiny \
    --config.num_steps=$STEPS --config.eval.every=50 \
    --config.prompts.num_heldout=64 --config.eval.max_new_tokens=32 \
    --workdirs="$ROOT/fkl,$ROOT/rkl,$ROOT/jsd,$ROOT/tvd" \
    --out=experiments/distill_losses/results_toy.json
