"""One accelerator: a randomly initialised 1B-scale Llama-3 in bfloat16, decoded alone and
with early-exit and n-gram drafters at batch 1 and 32 (prepared; see README.md here).

    python experiments/scale/gpu_check.py --out=experiments/scale/gpu_check.json

Config: Llama-3.2-1B's shape (vocabulary 128,256, width 2048, 16 layers, 32 query / 8 kv
heads of 64, MLP 8192, tied head, `llama3` RoPE scaling factor 32) with N(0, 0.02) weights,
so nothing is downloaded. Prints and writes per run: tokens/s (compile excluded, best of 2),
tokens per target pass, whether greedy output equals the target alone in bf16, the verify
pass cost c(k+1)/c(1) for k = 1, 2, 4, 8 (`specjax.bench.costs`), and peak device memory.
With random weights the acceptance figures say nothing about real drafts; tokens/s, pass
costs, memory and the bf16 identity check are what this measures.
"""
import argparse
import dataclasses
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import specjax  # noqa: E402
from specjax.tune import costs  # noqa: E402
from specjax.models import ModelConfig, init_params  # noqa: E402

LLAMA_1B = ModelConfig(
    family="llama", vocab_size=128256, d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8,
    head_dim=64, d_ff=8192, max_positions=4096, norm_eps=1e-5, rope_theta=5e5,
    tie_embeddings=True, rope_type="llama3", rope_factor=32.0, rope_low_freq_factor=1.0,
    rope_high_freq_factor=4.0, rope_original_max_positions=8192)


@dataclasses.dataclass
class RandomModel:
  cfg: ModelConfig
  params: dict
  name: str = "random-llama3-1b"
  tokenizer: object = None
  eos_ids: tuple = ()
  mesh: object = None


def peak_gib() -> float:
  stats = jax.devices()[0].memory_stats() or {}
  return stats.get("peak_bytes_in_use", 0) / 2**30


def save(results: dict, path: str) -> None:
  with open(path, "w") as f:
    json.dump(results, f, indent=1)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                "gpu_check.json"))
  ap.add_argument("--max_new_tokens", type=int, default=128)
  ap.add_argument("--tiny", action="store_true", help="a shrunken config (CPU smoke test)")
  args = ap.parse_args()
  cfg = LLAMA_1B if not args.tiny else dataclasses.replace(
      LLAMA_1B, vocab_size=512, d_model=64, n_layers=6, n_heads=4, n_kv_heads=2, head_dim=16,
      d_ff=128)
  t0 = time.perf_counter()
  device = jax.devices()[0]
  print(f"device: {device.device_kind} ({device.platform}), {jax.device_count()} device(s)")
  params = init_params(cfg, jax.random.PRNGKey(0), dtype=jnp.bfloat16)
  target = RandomModel(cfg, params)
  n_params = sum(x.size for x in jax.tree.leaves(params))
  print(f"params: {n_params / 1e9:.2f} B in bf16, {peak_gib():.2f} GiB peak after init")
  rng = np.random.default_rng(0)
  # Repeating prompts give the n-gram drafter something to copy, as extraction does.
  base = rng.integers(0, cfg.vocab_size, size=48).tolist()
  prompts = [(base[i:] + base[:i]) * 2 for i in range(32)]
  results = {"device": device.device_kind, "platform": device.platform,
             "params_billion": n_params / 1e9, "runs": []}
  for batch in (1, 32):
    rows = prompts[:batch]
    alone = None
    for draft in (None, "early_exit:4", "ngram:3"):
      best, compile_s = None, 0.0
      for _ in range(2):
        out = specjax.generate(target, rows, max_new_tokens=args.max_new_tokens, draft=draft,
                               k=4, eos_ids=())
        compile_s = max(compile_s, out.stats.compile_time_s)  # the first call compiles
        if best is None or out.stats.wall_time_s < best.stats.wall_time_s:
          best = out
      s = best.stats.to_dict()
      if draft is None:
        alone = best
      rec = {"batch": batch, "draft": draft or "none", "k": 0 if draft is None else 4,
             "tokens_per_s": s["tokens_per_s"], "tokens_per_pass": s["tokens_per_pass"],
             "acceptance_rate": s["acceptance_rate"], "compile_s": compile_s,
             "identical_to_target_bf16": best.tokens == alone.tokens,
             "speedup": s["tokens_per_s"] / alone.stats.to_dict()["tokens_per_s"],
             "peak_gib": peak_gib()}
      results["runs"].append(rec)
      print(json.dumps(rec), flush=True)
      save(results, args.out)  # partial results survive the time limit
  c = costs.target_costs(target, context_len=256, max_len=512, ks=(1, 2, 4, 8), n=10, repeats=3)
  results["verify_cost_ratio"] = {k: v / c["step"] for k, v in c["verify"].items()}
  results["c_step_ms"] = 1e3 * c["step"]
  results["peak_gib"] = peak_gib()
  results["total_s"] = time.perf_counter() - t0
  print("verify cost c(k+1)/c(1):", {k: round(v, 3) for k, v in results["verify_cost_ratio"].items()})
  print(f"c_step {results['c_step_ms']:.2f} ms, peak memory {results['peak_gib']:.2f} GiB, "
        f"total {results['total_s']:.0f} s")
  save(results, args.out)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
