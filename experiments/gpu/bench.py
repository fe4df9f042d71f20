"""Decoding speed on one accelerator, every stage in this one process (programs compiled
once, through jax's persistent compilation cache: `specjax.compile_cache`), as JSON.

    python experiments/gpu/bench.py --out=/tmp/bench.json          # (lease.sh bench runs this)
    python experiments/gpu/bench.py --dry-run --out=/tmp/bench.json  # tiny models, the CPU

Stages, each setting written to --out as it ends (a cut run keeps what finished):
  1. "pass_cost": c(T)/c(1) for T in {1, 5, 17, 33} (one cached target pass over T tokens
     at batch 1, as `specjax.tune.costs` times it) for SmolLM2-135M and for a randomly
     initialised Llama-3.2-1B-shaped model (bfloat16; nothing downloaded);
  2. "decode": SmolLM2-135M in bfloat16 with the shipped draft: the target alone, the chain
     k = 1..4 and the tree dynamic:16 (depth 4) at batch 1, 8 and 32 on the evaluation set
     (greedy, --max_new tokens): tokens/s (the timed call, compile excluded), tokens per
     pass and the compile seconds of the setting's first call.
--dry-run: the same code with tiny random models on whatever device there is (the CPU
here), at batch 1 and 4 for 16 tokens unless --batches / --max_new say otherwise. --budget_s: settings not started by then are skipped
(listed in "skipped").
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if "--dry-run" in sys.argv and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  # tiny programs on the CPU: compiling is most of the dry run, and LLVM -O0 halves it
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402

import specjax  # noqa: E402
from specjax import compile_cache  # noqa: E402
from specjax.models import ModelConfig, init_params  # noqa: E402
from specjax.models.params import inference_layout  # noqa: E402
from specjax.tune import costs  # noqa: E402

WIDTHS = (1, 5, 17, 33)
# Llama-3.2-1B's shape (its config.json): 16 layers, d 2048, 32 query / 8 kv heads of 64,
# SwiGLU 8192, vocabulary 128,256, tied embeddings, rope theta 500,000
LLAMA_1B = ModelConfig("llama", 128256, 2048, 16, 32, 8, 64, 8192, max_positions=4096,
                       rope_theta=500000.0, tie_embeddings=True)
TINY = ModelConfig("llama", 97, 64, 2, 4, 2, 16, 128, max_positions=512)


class Random:
  """A randomly initialised model (the duck type of a loaded `Model` that decoding reads)."""

  def __init__(self, cfg, name, dtype, seed=0, std=0.02):
    import jax.numpy as jnp
    self.cfg, self.name, self.tokenizer, self.eos_ids = cfg, name, None, ()
    params = init_params(cfg, jax.random.PRNGKey(seed), dtype=getattr(jnp, dtype), std=std)
    self.params = inference_layout(params, cfg)


def models(dry: bool, dtype: str):
  """(target, draft, prompts [token id lists]) for the decode stage."""
  if dry:
    target = Random(TINY, "tiny-target", "float32", seed=0, std=0.3)
    draft = Random(dataclasses.replace(TINY, n_layers=1), "tiny-draft", "float32", seed=1, std=0.3)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 97, size=int(rng.integers(8, 40))).tolist() for _ in range(32)]
    return target, draft, prompts
  from specjax import prompts as prompt_sets
  from specjax.loading import load_model
  target = load_model("smollm2-135m", dtype=dtype)
  draft = load_model("smollm2-135m-draft", dtype=dtype, target=target)
  rows = prompt_sets.spread_by_category(prompt_sets.evaluation(), 32)
  return target, draft, [target.encode(r["text"], chat=True) for r in rows]


def decode_row(target, prompts, max_new, kw) -> dict:
  """The setting's first call (compiles: its seconds) and a timed second call."""
  first = specjax.generate(target, prompts, max_new, **kw)
  out = specjax.generate(target, prompts, max_new, **kw)
  s = out.stats
  return {"tokens_per_s": s.tokens_per_s, "tokens_per_pass": s.tokens_per_pass if s.k else 1.0,
          "compile_s": first.stats.compile_time_s, "programs_from_disk": first.stats.programs_from_disk,
          "wall_s": s.wall_time_s, "new_tokens": int(s.new_tokens.sum()),
          "same_tokens_as_first": out.tokens == first.tokens}


def pass_ratios(model, context: int = 64, n: int = 10, repeats: int = 3) -> dict:
  """{T: c(T)/c(1)} and c(1) in ms: cached passes over T tokens at batch 1."""
  max_len = costs.cache_len(context, 64, max(WIDTHS))
  calls = costs.pass_calls(model, context, max_len, WIDTHS)
  secs = {t: costs.time_call(*calls[t], n, repeats) for t in WIDTHS}
  return {"c1_ms": 1e3 * secs[1], "ratio": {str(t): secs[t] / secs[1] for t in WIDTHS}}


def main(argv=None):
  ap = argparse.ArgumentParser()
  ap.add_argument("--dry-run", "--dry_run", dest="dry", action="store_true")
  ap.add_argument("--out", default="/tmp/bench.json")
  # batch 8 last: the setting a run cut by its budget loses first
  ap.add_argument("--batches", default=None, help="default 1,32,8 (dry run: 1,4)")
  ap.add_argument("--max_new", type=int, default=None, help="default 64 (dry run: 16)")
  ap.add_argument("--dtype", default="bfloat16")
  ap.add_argument("--budget_s", type=float, default=300.0)
  args = ap.parse_args(argv)
  args.batches = args.batches or ("1,4" if args.dry else "1,32,8")
  args.max_new = args.max_new or (16 if args.dry else 64)
  start = time.perf_counter()
  result = {"device": str(jax.devices()[0].device_kind), "platform": jax.devices()[0].platform,
            "jax": jax.__version__, "dry_run": args.dry, "dtype": args.dtype,
            "max_new": args.max_new, "compile_cache": compile_cache.enable(),
            "decode": [], "pass_cost": {}, "skipped": []}

  def write():
    result["elapsed_s"] = time.perf_counter() - start
    with open(args.out, "w") as f:
      json.dump(result, f, indent=1)

  def out_of_time(what):
    if time.perf_counter() - start > args.budget_s:
      result["skipped"].append(what)
      return True
    return False

  try:
    target, draft, prompts = models(args.dry, args.dtype)
  except Exception as e:  # the GGUF not carried, say: the random model's costs still run
    target = draft = prompts = None
    result["error"] = f"loading SmolLM2-135M and its draft: {type(e).__name__}: {e}"
    print(result["error"], flush=True)
  result["load_s"] = time.perf_counter() - start
  big = [("SmolLM2-135M" if not args.dry else "tiny target", lambda: target),
         ("Llama-3.2-1B-shaped, random" if not args.dry else "tiny, random",
          lambda: Random(TINY if args.dry else LLAMA_1B, "llama-1b-random", args.dtype))]
  for name, make in big:
    if out_of_time(f"pass_cost {name}") or (name.startswith("SmolLM2") and target is None):
      continue
    result["pass_cost"][name] = pass_ratios(make())
    print(json.dumps({name: result["pass_cost"][name]}), flush=True)
    write()
  settings = {"target alone": {}, **{f"chain k={k}": dict(draft=draft, k=k) for k in range(1, 5)},
              "dynamic:16": dict(draft=draft, k=4, tree="dynamic:16")}
  for b in [int(x) for x in args.batches.split(",")] if target is not None else []:
    for name, kw in settings.items():
      if out_of_time(f"decode batch {b} {name}"):
        continue
      row = {"batch": b, "setting": name, **decode_row(target, prompts[:b], args.max_new, kw)}
      result["decode"].append(row)
      print(json.dumps(row), flush=True)
      write()
  write()
  print(json.dumps({"elapsed_s": result["elapsed_s"], "skipped": result["skipped"]}), flush=True)


if __name__ == "__main__":
  main()
