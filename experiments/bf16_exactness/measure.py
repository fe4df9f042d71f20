"""Greedy speculative vs target-alone output in float32 and bfloat16, on random models.

    python experiments/bf16_exactness/measure.py --out=experiments/bf16_exactness/results.json

For each model size and dtype: a random Llama-style target, a draft that agrees with
it often (the target with 3% noise on every weight matrix), `rows` random prompts,
greedy decoding of `max_new` tokens by the target alone and speculatively at k = 4.
Writes, per setting: the fraction of rows whose speculative tokens differ from the
target alone, the fraction of all tokens that differ, the first position of each
divergence, the acceptance rate, and the fraction of target steps whose top-2 logits
lie within one bfloat16 spacing of each other (the near-ties that can flip).
"""
from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

import specjax
from specjax.models import ModelConfig, forward, init_params
from specjax.models.params import cast

flags.DEFINE_string("out", "experiments/bf16_exactness/results.json", "results JSON")
flags.DEFINE_integer("rows", 64, "prompts per setting")
flags.DEFINE_integer("max_new", 32, "new tokens per prompt")
flags.DEFINE_integer("k", 4, "tokens drafted per round")
FLAGS = flags.FLAGS

# name -> (vocab, d_model, layers, heads, kv heads, head dim, d_ff, init std)
SIZES = {"tiny_d32": (61, 32, 3, 4, 2, 8, 64, 0.3), "small_d256": (512, 256, 4, 8, 4, 32, 512, 0.1)}


@dataclasses.dataclass
class Model:  # the fields `generate` reads
  cfg: ModelConfig
  params: dict
  name: str = "random"
  tokenizer: object = None
  eos_ids: tuple = ()


def _perturbed(params: dict, scale: float, seed: int = 5) -> dict:
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  return jax.tree.unflatten(tree, [x + scale * x.std() * jax.random.normal(key, x.shape, x.dtype)
                                   if x.ndim >= 2 else x for x, key in zip(leaves, keys)])


def measure(size: str, dtype: str) -> dict:
  vocab, d, layers, heads, kv, hd, ff, std = SIZES[size]
  cfg = ModelConfig("llama", vocab, d, layers, heads, kv, hd, ff, max_positions=512)
  params = init_params(cfg, jax.random.PRNGKey(0), std=std)
  target = Model(cfg, cast(params, dtype))
  draft = Model(cfg, cast(_perturbed(params, 0.03), dtype))
  rng = np.random.default_rng(9)
  prompts = [rng.integers(0, vocab, size=int(rng.integers(2, 13))).tolist()
             for _ in range(FLAGS.rows)]
  base = specjax.generate(target, prompts, FLAGS.max_new).tokens
  spec = specjax.generate(target, prompts, FLAGS.max_new, draft=draft, k=FLAGS.k)
  first = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), None)
           for x, y in zip(base, spec.tokens)]
  differ = np.mean([a != b for x, y in zip(base, spec.tokens) for a, b in zip(x, y)])
  # Near-ties along the target-alone output, from one cache-free forward in `dtype`.
  width = max(len(p) for p in prompts) + FLAGS.max_new
  seqs = np.zeros((len(prompts), width), np.int32)
  for b, (p, out) in enumerate(zip(prompts, base)):
    seqs[b, :len(p) + len(out)] = p + out
  logits = np.asarray(jax.jit(lambda x: forward(target.params, cfg, x)[0])(jnp.asarray(seqs)),
                      np.float32)
  gaps, spacing = [], []
  for b, (p, out) in enumerate(zip(prompts, base)):
    top2 = np.sort(logits[b, len(p) - 1:len(p) - 1 + len(out)], axis=-1)[:, -2:]  # [T, 2]
    gaps.append(top2[:, 1] - top2[:, 0])
    spacing.append(np.abs(top2[:, 1]) * 2.0 ** -7)  # bfloat16 spacing at the top logit
  gaps, spacing = np.concatenate(gaps), np.concatenate(spacing)
  return {"size": size, "dtype": dtype, "rows": len(prompts), "max_new_tokens": FLAGS.max_new,
          "k": FLAGS.k, "acceptance_rate": spec.stats.acceptance_rate,
          "rows_differing": float(np.mean([f is not None for f in first])),
          "tokens_differing": float(differ),
          "first_divergence": [f for f in first if f is not None],
          "near_tie_steps": float(np.mean(gaps <= spacing))}


def main(argv):
  del argv
  results = [measure(size, dtype) for size in SIZES for dtype in ("float32", "bfloat16")]
  for r in results:
    print(f"{r['size']:>11} {r['dtype']:>8}: rows differing {r['rows_differing']:.3f}, "
          f"tokens differing {r['tokens_differing']:.3f}, alpha {r['acceptance_rate']:.2f}, "
          f"near-tie steps {r['near_tie_steps']:.3f}")
  with open(FLAGS.out, "w") as f:
    json.dump({"platform": jax.default_backend(), "results": results}, f, indent=1)


if __name__ == "__main__":
  app.run(main)
