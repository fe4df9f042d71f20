#!/usr/bin/env bash
# The EAGLE-3 draft for SmolLM2-135M trained here at equal training compute with the DFlash
# and P-EAGLE runs (configs/distill.py:eagle3: their data, stored teacher, batch and steps),
# beside the shipped feature drafts on the evaluation set (issue 38). Run from the
# repository root; RUNS holds the workdirs.
#   bash experiments/eagle3_smollm2/run.sh
set -euo pipefail
RUNS=${RUNS:-/work/runs}
OUT=experiments/eagle3_smollm2

# 1. Train (resumable: the same command continues) and export in speculators' format. The
#    training pools and features are those of the P-EAGLE run where it exists (the same
#    prompts, continuations and layers: copying them skips about an hour of sampling).
mkdir -p $RUNS/eagle3_eq/data
if [ -d $RUNS/peagle_smollm2/data ] && [ ! -e $RUNS/eagle3_eq/data/eagle3_features_l1-14-26.npz ]; then
  cp $RUNS/peagle_smollm2/data/eagle3_pool_* $RUNS/eagle3_eq/data/
  cp $RUNS/peagle_smollm2/data/peagle_features_l1-14-26.npz $RUNS/eagle3_eq/data/eagle3_features_l1-14-26.npz
fi
python scripts/distill.py --config=configs/distill.py:eagle3 --workdir=$RUNS/eagle3_eq
python scripts/export_draft.py --config=configs/distill.py:eagle3 --workdir=$RUNS/eagle3_eq \
    --format=speculators --out=$RUNS/eagle3_eq_spec

# 2. Acceptance per position and speed against the target alone at batch 8: the 48
#    evaluation prompts (4 a category), greedy and T = 1, k = 4.
python scripts/acceptance_curves.py --config=configs/curves.py --workdir=$RUNS/e3eq_batch8 \
    --config.drafters="smollm2-135m-draft-templated,smollm2-135m-draft,eagle3:$RUNS/eagle3_eq_spec" \
    --config.ks=4 --config.temperatures=0,1 --config.prompts.source=eval \
    --config.prompts.per_category=4 --config.max_new_tokens=48 --config.batch_size=8 --config.repeats=2
cp $RUNS/e3eq_batch8/summary.md $OUT/summary.md
cp $RUNS/e3eq_batch8/per_position_acceptance.png $OUT/per_position_acceptance.png
