#!/bin/bash
# The accelerator recipe in one prepared script (not run in this project's sessions: no
# accelerator was lent). On one GPU/TPU host, from the repository root:
#   W=/tmp/distill_gpu DATA=/work/data/selfgen_smollm2 bash experiments/distill_smollm2/gpu.sh
# 1. self-generated pairs (resumable; skipped where DATA already holds them),
# 2. the draft on all of them plus the training splits (configs/distill_smollm2_gpu.py:
#    3-layer features computed in the step, bfloat16, batch 128 as 2 micro-batches),
# 3. the asset and its table on the evaluation set.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
W=${W:-/tmp/distill_gpu}
DATA=${DATA:-/work/data/selfgen_smollm2}
PY=${PY:-python}
if [ -f scripts/generate_data.py ]; then
  $PY scripts/generate_data.py --config=configs/generate_data_smollm2.py --config.data_dir="$DATA" \
    ${GEN_FLAGS:-}
fi
$PY scripts/distill.py --config=configs/distill_smollm2_gpu.py --workdir="$W" \
  --config.data.generated_dir="$DATA" "$@"
$PY scripts/export_hf.py --config=configs/distill_smollm2_gpu.py --workdir="$W" \
  --config.data.generated_dir="$DATA" --asset="$W/asset"
$PY scripts/eval_draft.py --config=configs/distill_smollm2_gpu.py --asset="$W/asset" \
  --num_prompts=64 --max_new=64 --speed_prompts=4 --speed_ks=2,4 --out="$W/results.json"
