#!/usr/bin/env bash
# One-accelerator check (prepared; not run in the session that wrote it): a random
# 1B-scale Llama-3 in bf16, target alone / early exit / n-gram at batch 1 and 32,
# tokens/s, verify-pass cost ratio, peak memory. Needs jax with the accelerator's
# plugin (e.g. pip install -U "jax[cuda12]") and this repository's requirements.
# Budget: under 8 minutes on one H100/H200-class GPU (hard limit 470 s below).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
"$PY" -c "import jax; d = jax.devices()[0]; print(d.platform, d.device_kind); assert d.platform != 'cpu', 'no accelerator visible to jax'"
XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9} \
  timeout 470 "$PY" experiments/scale/gpu_check.py --out="${OUT:-experiments/scale}/gpu_check.json"
