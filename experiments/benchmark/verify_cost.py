"""Why speculation pays little on this CPU: what a (k+1)-token verify pass costs.

    python experiments/benchmark/verify_cost.py

Prints, from one run: the embedded target's forward time for T = 1..8 new tokens (100
tokens already cached, batch 1; the benchmark's own probe, `specjax.bench.costs`)
relative to T = 1, and the same for the bare output-head matmul [T, 576] x [576, 49152]
and for one block's MLP matmul [T, 576] x [576, 1536]. Each is the fastest of 3 means
over 10 jitted calls.
"""
import os
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from specjax.bench import costs  # noqa: E402
from specjax.loading import load_model  # noqa: E402


def main():
  target = load_model("smollm2-135m")
  n, repeats = 10, 3
  fwd = costs.target_costs(target, context_len=100, max_len=256, ks=range(1, 8), n=n,
                           repeats=repeats)
  fwd_s = [fwd["step"]] + [fwd["verify"][k] for k in range(1, 8)]  # T = 1..8
  head = target.params["embed"].T  # [D, V], tied
  mlp = target.params["layers"][0]["mlp"]["up"]["kernel"]  # [D, F]
  matmul = jax.jit(lambda x, w: x @ w)
  rows = []
  for t in range(1, 9):
    x = jnp.ones((t, target.cfg.d_model), jnp.float32)
    rows.append((t, 1e3 * fwd_s[t - 1], 1e3 * costs.time_call(matmul, (x, head), n, repeats),
                 1e3 * costs.time_call(matmul, (x, mlp), n, repeats)))
  base = rows[0]
  print("| T new tokens | target forward ms | x T=1 | head matmul ms | x T=1 | MLP matmul ms | x T=1 |")
  print("|---|---|---|---|---|---|---|")
  for t, f, h, m in rows:
    print(f"| {t} | {f:.1f} | {f / base[1]:.2f} | {h:.2f} | {h / base[2]:.2f} | {m:.3f} | "
          f"{m / base[3]:.2f} |")


if __name__ == "__main__":
  main()
