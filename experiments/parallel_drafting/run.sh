#!/usr/bin/env bash
# The DFlash draft for SmolLM2-135M trained here, beside the shipped feature draft, on the
# evaluation set (issue 39). Run from the repository root; RUNS holds the workdirs.
#   bash experiments/parallel_drafting/run.sh
set -euo pipefail
RUNS=${RUNS:-/work/runs}
OUT=experiments/parallel_drafting
DRAFTS="smollm2-135m-draft,dflash:$RUNS/dflash_smollm2_spec"
EVAL="--config.prompts.source=eval --config.max_new_tokens=48"

# 1. Train (resumable: the same command continues) and export in speculators' dflash format.
python scripts/distill.py --config=configs/distill.py:dflash --workdir=$RUNS/dflash_smollm2
python scripts/export_draft.py --config=configs/distill.py:dflash --workdir=$RUNS/dflash_smollm2 \
    --format=speculators --out=$RUNS/dflash_smollm2_spec

# 2. Acceptance per position and speed against the target alone at batch 8: 48 evaluation
#    prompts (4 a category), greedy and T = 1, k = 4 and 8.
python scripts/acceptance_curves.py --config=configs/curves.py --workdir=$RUNS/pd_batch8 \
    --config.drafters="$DRAFTS" --config.ks=4,8 --config.temperatures=0,1 $EVAL \
    --config.prompts.per_category=4 --config.batch_size=8 --config.repeats=2
# 3. Speed at batch 1: one prompt a category, greedy.
python scripts/acceptance_curves.py --config=configs/curves.py --workdir=$RUNS/pd_batch1 \
    --config.drafters="$DRAFTS" --config.ks=4,8 --config.temperatures=0 $EVAL \
    --config.prompts.per_category=1 --config.batch_size=1 --config.repeats=2
cp $RUNS/pd_batch8/per_position_acceptance.png $OUT/per_position_acceptance.png

# 4. Trees over the block (the trees study's prompts and settings, depth 4).
PYTHONPATH=. python experiments/trees/run.py --draft=dflash:$RUNS/dflash_smollm2_spec \
    --out=experiments/trees/dflash

# 5. The main job with it.
python scripts/speculate.py --config.draft=dflash:$RUNS/dflash_smollm2_spec --config.k=8 \
    --json_out=$RUNS/card_dflash_k8.json

# 6. P-EAGLE on the same data (8 depths: k = 8 drafts from one pass; stored teacher; 32
#    rollouts a row a step), exported in speculators' peagle format, then the sweeps (batch 8
#    greedy and T = 1, batch 1 greedy), the main job and the trees study's settings with it.
python scripts/distill.py --config=configs/distill.py:peagle --workdir=$RUNS/peagle_smollm2  # the recorded run: 1,000 steps, resumed twice; its best (exported): step 800
python scripts/export_draft.py --config=configs/distill.py:peagle --workdir=$RUNS/peagle_smollm2 \
    --format=speculators --out=$RUNS/peagle_smollm2_spec
python scripts/acceptance_curves.py --config=configs/curves.py --workdir=$RUNS/pe_batch8 \
    --config.drafters="peagle:$RUNS/peagle_smollm2_spec" --config.ks=4,8 --config.temperatures=0 \
    $EVAL --config.prompts.per_category=4 --config.batch_size=8 --config.repeats=2
python scripts/acceptance_curves.py --config=configs/curves.py --workdir=$RUNS/pe_batch8_t1 \
    --config.drafters="peagle:$RUNS/peagle_smollm2_spec" --config.ks=4,8 --config.temperatures=1 \
    $EVAL --config.prompts.per_category=4 --config.batch_size=8 --config.repeats=2
python scripts/acceptance_curves.py --config=configs/curves.py --workdir=$RUNS/pe_batch1 \
    --config.drafters="peagle:$RUNS/peagle_smollm2_spec" --config.ks=4,8 --config.temperatures=0 \
    $EVAL --config.prompts.per_category=1 --config.batch_size=1 --config.repeats=2
python scripts/speculate.py --config.draft=peagle:$RUNS/peagle_smollm2_spec --config.k=8 \
    --json_out=$RUNS/card_peagle_k8.json
PYTHONPATH=. python experiments/trees/run.py --draft=peagle:$RUNS/peagle_smollm2_spec \
    --out=experiments/trees/peagle

# 7. The results kept here: every sweep's summary in eval.md, both cards in cards_k8.json.
{ echo "# DFlash and P-EAGLE on the evaluation set"; echo
  echo "## DFlash and the shipped feature draft, batch 8, greedy and T = 1 (48 prompts, 4 a category)"
  echo; cat $RUNS/pd_batch8/summary.md; echo
  echo "## DFlash and the shipped feature draft, batch 1, greedy (12 prompts, 1 a category)"
  echo; cat $RUNS/pd_batch1/summary.md; echo
  echo "## P-EAGLE (step 800), batch 8, greedy (48 prompts, 4 a category)"
  echo; cat $RUNS/pe_batch8/summary.md; echo
  echo "## P-EAGLE (step 800), batch 8, T = 1 (the same prompts)"
  echo; cat $RUNS/pe_batch8_t1/summary.md; echo
  echo "## P-EAGLE (step 800), batch 1, greedy (12 prompts, 1 a category)"
  echo; cat $RUNS/pe_batch1/summary.md
} > $OUT/eval.md
python -c 'import json, sys; d, p, out = sys.argv[1:]
json.dump({"dflash": json.load(open(d)), "peagle": json.load(open(p))}, open(out, "w"), indent=2)' \
    $RUNS/card_dflash_k8.json $RUNS/card_peagle_k8.json $OUT/cards_k8.json
