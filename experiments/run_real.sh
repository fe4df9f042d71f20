#!/usr/bin/env bash
# Reruns every real-model study of experiments/ in sequence. Each study's README holds
# its own command; this only chains them.
#   bash experiments/run_real.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/specjax_jax_cache}
$PY scripts/speculate.py --json_out=experiments/demo/card.json > experiments/demo/card.txt
$PY scripts/speculate.py --config=experiments/seed_card/config_gpt2.py \
    --json_out=experiments/seed_card/card_gpt2.json 2>&1 | tee experiments/seed_card/card_gpt2.txt
$PY scripts/speculate.py --config=experiments/seed_card/config_embedded.py \
    --json_out=experiments/seed_card/card_embedded.json 2>&1 | tee experiments/seed_card/card_embedded.txt
$PY scripts/benchmark.py --config=experiments/benchmark/config.py --workdir=experiments/benchmark/run
$PY experiments/benchmark/verify_cost.py 2>/dev/null | tee experiments/benchmark/verify_cost.md
$PY scripts/acceptance_curves.py --config=experiments/closed_form/config.py \
    --workdir=experiments/closed_form/run
$PY scripts/acceptance_curves.py --config=experiments/drafter_by_category/config.py \
    --workdir=experiments/drafter_by_category/run
$PY scripts/eval_draft.py --config=configs/distill_smollm2.py \
    --asset=specjax/assets/smollm2-135m-draft --num_prompts=16 --max_new=48 \
    --speed_prompts=4 --speed_ks=2,4 --out=experiments/distill_smollm2/results.json
$PY scripts/eval_draft.py --config=configs/distill_smollm2_lm.py \
    --asset=specjax/assets/smollm2-135m-draft-lm --num_prompts=16 --max_new=48 \
    --speed_prompts=4 --speed_ks=2,4 --out=experiments/distill_smollm2_lm/results.json
