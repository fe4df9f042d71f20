"""Why speculation pays little on this CPU: what a (k+1)-token verify pass costs.

    python experiments/benchmark/verify_cost.py

Prints, from one run: the embedded target's forward time for T = 1..8 new tokens (cache
holding 100, batch 1) relative to T = 1, and the same for the bare output-head matmul
[T, 576] x [576, 49152] and for one block's MLP matmul [T, 576] x [576, 1536]. Each is
the median of 30 jitted calls.
"""
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from specjax.loading import load_model  # noqa: E402
from specjax.models import KVCache, forward  # noqa: E402


def median_ms(fn, *args, n=30):
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(n):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return 1e3 * float(np.median(times))


def main():
  target = load_model("smollm2-135m")
  cfg, params = target.cfg, target.params
  cache = KVCache.init(cfg, 1, 256).with_lengths(jnp.full((1,), 100, jnp.int32))
  fwd = jax.jit(lambda p, tok, c: forward(p, cfg, tok, c)[0])
  head = params["embed"].T  # [D, V], tied
  mlp = params["layers"][0]["mlp"]["up"]["kernel"]  # [D, F]
  matmul = jax.jit(lambda x, w: x @ w)
  rows = []
  for t in range(1, 9):
    tok = jnp.zeros((1, t), jnp.int32)
    x = jnp.ones((t, cfg.d_model), jnp.float32)
    rows.append((t, median_ms(fwd, params, tok, cache), median_ms(matmul, x, head),
                 median_ms(matmul, x, mlp)))
  base = rows[0]
  print("| T new tokens | target forward ms | x T=1 | head matmul ms | x T=1 | MLP matmul ms | x T=1 |")
  print("|---|---|---|---|---|---|---|")
  for t, f, h, m in rows:
    print(f"| {t} | {f:.1f} | {f / base[1]:.2f} | {h:.2f} | {h / base[2]:.2f} | {m:.3f} | "
          f"{m / base[3]:.2f} |")


if __name__ == "__main__":
  main()
