#!/usr/bin/env bash
# Decoding speed on one GPU in at most 6 minutes, compiles included (experiments/gpu/README.md,
# "bench.sh"): SmolLM2-135M in bfloat16 with the shipped draft, the target alone, chains
# k = 1..4 and dynamic:16 at batch 1, 8 and 32, and c(T)/c(1) for SmolLM2-135M and a random
# Llama-3.2-1B-shaped model, as JSON ($OUT/bench.json, and printed). One python process
# runs every stage (experiments/gpu/bench.py): each program compiles once, through jax's
# persistent compilation cache in $SPECJAX_COMPILE_CACHE (default /tmp/jax_cache, kept by
# a warm machine between calls).
#   On the GPU (the wheels in .whl/ and the GGUF's halves carried: README):
#     OUT=$OUT bash experiments/gpu/bench.sh
#   Dry run, tiny random models on the CPU (no wheels, no GGUF):
#     bash experiments/gpu/bench.sh --dry-run
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/gpu_bench}
mkdir -p "$OUT"
export SPECJAX_COMPILE_CACHE=${SPECJAX_COMPILE_CACHE:-/tmp/jax_cache}
if [ -x .venv/bin/python ]; then PY=${PY:-.venv/bin/python}; else PY=${PY:-python3}; fi
if [[ " $* " != *" --dry-run "* ]]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null
  # the pure-Python wheels the image lacks, with pip --no-index --no-deps into /tmp/site,
  # and the GGUF rejoined from its two carried halves (device_setup.sh)
  source experiments/gpu/device_setup.sh || { echo "wheel install failed"; exit 1; }
  export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.85}
fi
# bench.py stops starting settings after BUDGET seconds; the timeout is the hard stop
timeout -s INT "${LIMIT:-340}" $PY experiments/gpu/bench.py --out="$OUT/bench.json" \
  --budget_s="${BUDGET:-280}" "$@" 2>&1 | tee "$OUT/bench.log" | grep -v "^WARNING"
echo "rc ${PIPESTATUS[0]}"
cat "$OUT/bench.json"
