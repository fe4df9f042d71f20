"""Where a cached target pass spends its time: c(T) and its parts, beside measured floors.

Axes: T new tokens, D model width, V vocab, L layers.

For each T the probe times, on a cache already holding `context_len` tokens (batch 1):

  pass       forward(params, cfg, tokens [1, T], cache) -> logits (the verify / decode pass)
  qkv        the q/k/v projections (rotary included) of all L layers
  attention  writing k, v into the cache and attending over it, all L layers
  o          the attention output projections of all L layers
  mlp        the MLPs of all L layers
  norms      the 2 L pre-norms
  head       final norm and output head
  warp       greedy warp and verification of the logits (what the loop does at T = 0)

Parts run the library's own functions on inputs of the right shapes, so they track the
code. Floors: `stream` reads every weight once (a sum over all parameter leaves) and
gives bytes/s; `matmul` is a large [M, D] x [D, N] product and gives FLOP/s. The floor
of a pass is max(weight bytes / stream rate, pass FLOPs / matmul rate).

Every case is timed round-robin (`rounds` times `n` back-to-back calls, the fastest
round counting) so that machine drift hits all cases alike.

    PYTHONPATH=. python experiments/pass_cost/pass_cost.py --out=/tmp/pass_cost_1

runs the probe on the embedded target and writes <out>.json (every figure) and <out>.md
(the table).
"""
from __future__ import annotations

import argparse
import time
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax import sampling as sampling_lib
from specjax.tune.costs import _filled_cache
from specjax.models import pass_options, transformer as tf
from specjax.models.params import canonical

PARTS = ("pass", "qkv", "attention", "o", "mlp", "norms", "head", "warp")


def interleaved(cases: dict, rounds: int, n: int) -> dict:
  """{name: (jitted fn, args)} -> {name: seconds per call}, timed round-robin: each
  round runs every case n times back to back; the fastest round of each case counts."""
  for fn, args in cases.values():
    jax.block_until_ready(fn(*args))  # compile and warm up
  best = {name: float("inf") for name in cases}
  for _ in range(max(1, rounds)):
    for name, (fn, args) in cases.items():
      start = time.perf_counter()
      for _ in range(max(1, n)):
        jax.block_until_ready(fn(*args))
      best[name] = min(best[name], (time.perf_counter() - start) / max(1, n))
  return best


def pass_flops(cfg, t: int, context_len: int) -> float:
  """Multiply-add FLOPs (2 per MAC) of one cached pass of t tokens after context_len."""
  d, e, f = cfg.d_model, cfg.head_dim, cfg.d_ff
  proj = d * (cfg.n_heads + 2 * cfg.n_kv_heads) * e + cfg.n_heads * e * d
  mlp = (3 if not cfg.is_gpt2 else 2) * d * f
  attn = 2 * cfg.n_heads * e * (context_len + t)  # scores and values, per token
  return 2.0 * t * (cfg.n_layers * (proj + mlp) + d * cfg.vocab_size) + 2.0 * t * cfg.n_layers * attn


def weight_bytes(params: dict) -> int:
  """Bytes of the weights one pass reads (the derived inference layout replaces, not adds)."""
  return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(canonical(params))
                 if jnp.issubdtype(x.dtype, jnp.floating)))


def _greedy_verify(drafts: jax.Array, logits: jax.Array):
  """What the loop does with a verify pass's logits at temperature 0 (warp and verify)."""
  from specjax.decoding import loop
  if hasattr(loop, "greedy_verify"):
    return loop.greedy_verify(drafts, logits)
  p = sampling_lib.warp(logits, sampling_lib.SamplingParams())  # the one-hot path
  return loop.verify_batch(drafts, jnp.zeros_like(p[:, 1:]), p, jax.random.PRNGKey(0))


def _part_cases(target, t: int, cache, rng) -> dict:
  """The jitted pass and its parts for t new tokens over `cache`."""
  cfg, params = target.cfg, target.params
  d, h, kh, e = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
  layers = params["layers"]
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape).astype(np.float32))
  x = normal(1, t, d)
  positions = tf.positions_for(cache, 1, t)
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (1, t)), jnp.int32)
  q, k, v = normal(1, t, h, e), normal(1, t, kh, e), normal(1, t, kh, e)
  y = normal(1, t, h * e)
  logits = normal(1, t, cfg.vocab_size)
  drafts = jnp.asarray(rng.integers(0, cfg.vocab_size, (1, t - 1)), jnp.int32)

  jit = lambda fn: pass_options.jit(fn, t)  # compiled as the loop compiles t-row passes

  def all_layers(fn: Callable):
    return jit(lambda ls, *a: [fn(lp, *a) for lp in ls])

  def attention(c, q, k, v, positions):
    return [tf.cached_attention(q, k, v, (c.k[i], c.v[i]), positions, c.lengths)
            for i in range(len(c.k))]

  return {
      "pass": (jit(lambda p, tok, c: tf.forward(p, cfg, tok, c)[0]), (params, tokens, cache)),
      "qkv": (all_layers(lambda lp, x, pos: tf.project_qkv(lp["attn"], cfg, x, pos)),
              (layers, x, positions)),
      "attention": (jit(attention), (cache, q, k, v, positions)),
      "o": (all_layers(lambda lp, y: tf.out_proj(lp["attn"], y)), (layers, y)),
      "mlp": (all_layers(lambda lp, x: tf.mlp(lp["mlp"], cfg, x)), (layers, x)),
      "norms": (all_layers(lambda lp, x: (tf.norm(lp["attn_norm"], cfg, x),
                                          tf.norm(lp["mlp_norm"], cfg, x))), (layers, x)),
      "head": (jit(lambda p, x: tf.head(p, cfg, x)), (params, x)),
      "warp": (jit(_greedy_verify), (drafts, logits)),
  }


def floor_cases(params: dict, m: int = 512, n_cols: int = 4096, d: int = 576) -> tuple:
  """(cases, stream bytes, matmul FLOPs): a read of every weight and a large matmul."""
  leaves = [x for x in jax.tree.leaves(canonical(params)) if jnp.issubdtype(x.dtype, jnp.floating)]
  stream = jax.jit(lambda ls: sum(jnp.sum(x) for x in ls))
  rng = np.random.default_rng(1)
  a = jnp.asarray(rng.standard_normal((m, d)).astype(np.float32))
  b = jnp.asarray(rng.standard_normal((d, n_cols)).astype(np.float32))
  matmul = jax.jit(lambda a, b: a @ b)
  cases = {"stream": (stream, (leaves,)), "matmul": (matmul, (a, b))}
  return cases, weight_bytes(params), 2.0 * m * d * n_cols


def probe(target, ts: Sequence[int] = (1, 2, 3, 5, 9, 17, 33), context_len: int = 112,
          max_len: int = 256, rounds: int = 7, n: int = 3, seed: int = 0) -> dict:
  """Times the pass and its parts for every T, and the floors, in one interleaved run.

  Returns {"ts", "seconds": {T: {part: s}}, "stream_bytes_per_s", "matmul_flops_per_s",
  "weight_bytes", "floor_s": {T: s}, "flops": {T: FLOPs}, ...}.
  """
  rng = np.random.default_rng(seed)
  context = rng.integers(0, target.cfg.vocab_size, size=context_len).astype(np.int32)
  cache = _filled_cache(target, context, max_len)
  cases = {}
  for t in ts:
    for part, case in _part_cases(target, t, cache, rng).items():
      cases[(t, part)] = case
  fcases, n_bytes, mm_flops = floor_cases(target.params)
  cases.update(fcases)
  sec = interleaved(cases, rounds, n)
  bw = n_bytes / sec["stream"]
  rate = mm_flops / sec["matmul"]
  flops = {t: pass_flops(target.cfg, t, context_len) for t in ts}
  return {
      "ts": list(ts), "context_len": context_len, "max_len": max_len, "rounds": rounds, "n": n,
      "seconds": {t: {p: sec[(t, p)] for p in PARTS} for t in ts},
      "weight_bytes": n_bytes, "stream_s": sec["stream"], "stream_bytes_per_s": bw,
      "matmul_s": sec["matmul"], "matmul_flops_per_s": rate, "flops": flops,
      "floor_s": {t: max(n_bytes / bw, flops[t] / rate) for t in ts},
  }


def markdown(r: dict) -> str:
  """The probe's table: ms per part, the pass relative to T = 1, and the floor."""
  t1 = r["seconds"][r["ts"][0]]["pass"]
  head = "| T | pass ms | x T=1 | " + " | ".join(f"{p} ms" for p in PARTS[1:]) + \
      " | sum of parts | floor ms | pass / floor |"
  lines = [head, "|" + "---|" * (len(PARTS) + 5)]
  for t in r["ts"]:
    s = r["seconds"][t]
    parts = sum(s[p] for p in PARTS[1:])
    lines.append(f"| {t} | {1e3 * s['pass']:.2f} | {s['pass'] / t1:.2f} | " +
                 " | ".join(f"{1e3 * s[p]:.2f}" for p in PARTS[1:]) +
                 f" | {1e3 * parts:.2f} | {1e3 * r['floor_s'][t]:.2f} | "
                 f"{s['pass'] / r['floor_s'][t]:.2f} |")
  lines += ["", f"Floors measured in the same run: streaming read of the {r['weight_bytes'] / 1e6:.0f} MB "
            f"of weights {r['stream_bytes_per_s'] / 1e9:.1f} GB/s ({1e3 * r['stream_s']:.2f} ms); "
            f"matmul {r['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s."]
  return "\n".join(lines)


def main():
  ap = argparse.ArgumentParser(description="c(T) of the embedded target and its parts.")
  ap.add_argument("--out", default="/tmp/pass_cost")
  ap.add_argument("--ts", default="1,2,3,5,9,17,33")
  ap.add_argument("--rounds", type=int, default=7)
  ap.add_argument("--n", type=int, default=3)
  ap.add_argument("--context_len", type=int, default=112)
  ap.add_argument("--max_len", type=int, default=256)
  args = ap.parse_args()
  from specjax.apps.common import write_report
  from specjax.loading import load_model
  target = load_model("smollm2-135m")
  r = probe(target, ts=[int(t) for t in args.ts.split(",")], rounds=args.rounds,
            n=args.n, context_len=args.context_len, max_len=args.max_len)
  write_report(args.out, r, markdown(r))


if __name__ == "__main__":
  main()
