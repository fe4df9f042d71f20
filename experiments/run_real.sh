#!/usr/bin/env bash
# Reruns the quicker real-model studies of experiments/ in sequence (each study's README
# holds its own command; this only chains them). The trees study writes to $TREES_OUT
# (run.py skips settings already in its results.jsonl): diff its results.jsonl and
# table.md against experiments/trees/ to check that the decoding is unchanged.
#   bash experiments/run_real.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/specjax_jax_cache}
TREES_OUT=${TREES_OUT:-/tmp/trees_rerun}
$PY scripts/speculate.py --json_out=experiments/demo/card.json > experiments/demo/card.txt
$PY scripts/benchmark.py --config=experiments/benchmark/config.py --workdir=experiments/benchmark/run
$PY scripts/acceptance_curves.py --config=experiments/closed_form/config.py \
    --workdir=experiments/closed_form/run
PYTHONPATH=. $PY experiments/trees/run.py --out="$TREES_OUT"
$PY scripts/eval_draft.py --config=configs/distill.py:lm \
    --asset=specjax/assets/smollm2-135m-draft-lm --num_prompts=16 --max_new=48 \
    --speed_prompts=4 --speed_ks=2,4 --out=experiments/distill_smollm2_lm/results.json
