"""The machine's floor under a batched call: how fast could any implementation decode the
sweep's cases on this CPU, and so what ratio over transformers is reachable at all?

Measures, in one process, XLA's best dot rate (a prefill-shaped GEMM, both threads) and
the memory bandwidth (a sum over 1 GiB), then bounds each case of a sweep's results.json
from below: the prefill at the dot rate over the prompts' real tokens (no padding), each
decode step at max(its FLOPs at the dot rate, the weights read once at the bandwidth),
attention left out. The bound is optimistic on purpose: a ratio it rules out is out of
reach for any code on this machine.

    PYTHONPATH=. python experiments/batch_step/floor.py \
        --results=experiments/batch_step/groups/results.json --out=experiments/batch_step/floor.json
"""
import json
import time

from absl import app, flags
import jax
import jax.numpy as jnp

_RESULTS = flags.DEFINE_string("results", "experiments/batch_step/groups/results.json",
                               "A batched sweep's results.json (scripts/benchmark.py --batch).")
_OUT = flags.DEFINE_string("out", "", "Where to write the floors as JSON (none: print only).")
_REPS = flags.DEFINE_integer("repeats", 5, "Timed repetitions (the fastest counts).")


def best_seconds(fn, *args) -> float:
  jax.block_until_ready(fn(*args))
  best = float("inf")
  for _ in range(_REPS.value):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - start)
  return best


def machine() -> dict:
  """{"dot_gflops": a [4096, 576] x [576, 1536] product's rate, "gbytes_s": a 1 GiB sum's}."""
  key = jax.random.PRNGKey(0)
  a, b = jax.random.normal(key, (4096, 576)), jax.random.normal(key, (576, 1536))
  dot = best_seconds(jax.jit(jnp.dot), a, b)
  x = jnp.ones((2**28,), jnp.float32)  # 1 GiB
  read = best_seconds(jax.jit(jnp.sum), x)
  return {"dot_gflops": 2 * 4096 * 576 * 1536 / dot / 1e9, "gbytes_s": x.nbytes / read / 1e9}


def model_counts(cfg) -> dict:
  """Per-token FLOPs of the blocks and of the head, and the bytes of weights a step reads
  (float32), from the config alone."""
  d, f, h, kv, e = cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
  per_layer = d * h * e * 2 + d * kv * e * 2 + 3 * d * f  # q, o; k, v; gate, up, down
  blocks = cfg.n_layers * per_layer
  return {"block_flops": 2 * blocks, "head_flops": 2 * d * cfg.vocab_size,
          "weight_bytes": 4 * (blocks + d * cfg.vocab_size)}


def floors(rows: list, mach: dict, counts: dict, new_tokens: int) -> list:
  out = []
  rate, bw = mach["dot_gflops"] * 1e9, mach["gbytes_s"] * 1e9
  for r in rows:
    b, real = r["batch"], sum(r["prompt_tokens"])
    prefill = (real * counts["block_flops"] + b * counts["head_flops"]) / rate
    step = max(b * (counts["block_flops"] + counts["head_flops"]) / rate,
               counts["weight_bytes"] / bw)
    call = prefill + (new_tokens - 1) * step
    out.append({"case": r["case"], "batch": b, "real_prompt_tokens": real,
                "floor_prefill_s": prefill, "floor_step_s": step, "floor_call_s": call,
                "specjax_s": r["specjax_s"], "hf_s": r["hf_s"],
                "specjax_over_hf": r["specjax_over_hf"], "floor_over_hf": r["hf_s"] / call,
                "specjax_over_floor": r["specjax_s"] / call})
  return out


def main(argv):
  del argv
  import specjax
  res = json.load(open(_RESULTS.value))
  cfg = specjax.load_model(res["config"]["target"]).cfg
  mach, counts = machine(), model_counts(cfg)
  table = floors(res["rows"], mach, counts, res["config"]["max_new_tokens"])
  print(f"dot {mach['dot_gflops']:.0f} GFLOP/s, read {mach['gbytes_s']:.1f} GB/s; "
        f"{counts['block_flops'] / 1e6:.0f} MFLOP per token in the blocks, "
        f"{counts['head_flops'] / 1e6:.0f} in the head, {counts['weight_bytes'] / 2**20:.0f} MiB of weights")
  print(f"{'case':7} {'B':>3} {'prefill s':>9} {'step ms':>8} {'call s':>7} {'specjax s':>9} "
        f"{'hf s':>6} {'specjax/hf':>10} {'floor/hf':>8} {'specjax/floor':>13}")
  for t in table:
    print(f"{t['case']:7} {t['batch']:>3} {t['floor_prefill_s']:>9.2f} {1e3 * t['floor_step_s']:>8.1f} "
          f"{t['floor_call_s']:>7.2f} {t['specjax_s']:>9.2f} {t['hf_s']:>6.2f} "
          f"{t['specjax_over_hf']:>10.2f} {t['floor_over_hf']:>8.2f} {t['specjax_over_floor']:>13.2f}")
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      json.dump({"machine": mach, "model": counts, "rows": table}, f, indent=1)


if __name__ == "__main__":
  app.run(main)
