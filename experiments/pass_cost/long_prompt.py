"""A 5,000-token prompt and 8 new tokens: run time vs its FLOP floor and vs the padded code.

    python experiments/pass_cost/long_prompt.py --out=experiments/pass_cost/long_prompt

In one run: (1) this code's `generate` on the prompt (compile excluded);
(2) a large matmul just before and just after it, for the FLOP rate of this machine
now (the faster of the two counts, so the floor is the lower one); (3) the code before the
long-prompt changes (git revision --old_rev, exported to a temporary directory and run
in a subprocess: prompt padded to 8,192, full-square prefill attention, every step over
the whole cache); (4) where the prefill's time goes: the 30 layers' linear products
(q/k/v, o, MLP) and their causal attention on the prompt bucket, each timed alone with
its FLOP rate, beside the large matmul's. Writes <out>.json and <out>.md.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

RUN = r"""
import json, sys, time
import numpy as np
import specjax
target = specjax.load_model("smollm2-135m")
prompt = np.random.default_rng(0).integers(0, target.cfg.vocab_size, {n}).tolist()
best = None
for _ in range({repeats}):
  out = specjax.generate(target, [prompt], {new})
  best = out if best is None or out.stats.wall_time_s < best.stats.wall_time_s else best
print("RESULT", json.dumps({{"wall_s": best.stats.wall_time_s, "compile_s": out.stats.compile_time_s,
                            "tokens": best.tokens[0]}}))
"""


def _run(path: str, n: int, new: int, repeats: int) -> dict:
  env = dict(os.environ, PYTHONPATH=path)
  start = time.perf_counter()
  proc = subprocess.run([sys.executable, "-c", RUN.format(n=n, new=new, repeats=repeats)],
                        cwd=path, env=env, capture_output=True, text=True)
  if proc.returncode:
    raise SystemExit(f"run in {path} failed:\n{proc.stderr[-3000:]}")
  line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
  r = json.loads(line[len("RESULT "):])
  r["process_s"] = time.perf_counter() - start
  r["stderr_tail"] = proc.stderr.strip().splitlines()[-3:]
  return r


def prefill_flops(cfg, n: int) -> tuple:
  """Multiply-add FLOPs (2 per MAC) of an n-token prefill's linear products (all layers)
  and of its causal attention (scores and values over the lower triangle)."""
  d, e = cfg.d_model, cfg.head_dim
  linear = 2.0 * n * cfg.n_layers * (d * (cfg.n_heads + 2 * cfg.n_kv_heads) * e
                                     + cfg.n_heads * e * d + 3 * d * cfg.d_ff)
  return linear, 2.0 * cfg.n_layers * 2 * cfg.n_heads * e * n * (n + 1) / 2


def flops(cfg, n: int, new: int) -> float:
  """FLOPs of a causal prefill of n tokens (head at the last position) and new - 1 decode steps."""
  from pass_cost import pass_flops
  return (sum(prefill_flops(cfg, n)) + 2.0 * cfg.d_model * cfg.vocab_size
          + sum(pass_flops(cfg, 1, n + i) for i in range(new - 1)))


def prefill_parts(n: int) -> dict:
  """Seconds and GFLOP/s of the prefill's linear products and of its causal attention (all
  layers, the prompt bucket of n tokens, batch 1), each jitted and timed alone."""
  import jax
  import jax.numpy as jnp
  from specjax.decoding.plan import prompt_bucket
  from specjax.loading import load_model
  from specjax.models import transformer as tf
  target = load_model("smollm2-135m")
  cfg, params, p = target.cfg, target.params, prompt_bucket(n)
  x = jax.random.normal(jax.random.PRNGKey(0), (1, p, cfg.d_model))
  pos = jnp.arange(p)[None]

  def linear(x):
    for i in range(cfg.n_layers):
      lp = tf.layer_params(params, i)
      q, _, _ = tf.project_qkv(lp["attn"], cfg, x, pos)
      x = x + tf.out_proj(lp["attn"], q.reshape(1, p, -1)) + tf.mlp(lp["mlp"], cfg, x)
    return x

  kh, e = cfg.n_kv_heads, cfg.head_dim
  q = jax.random.normal(jax.random.PRNGKey(1), (1, p, cfg.n_heads, e))
  kv = jax.random.normal(jax.random.PRNGKey(2), (1, p, kh, e))
  empty = (jnp.zeros((1, kh, e, p)), jnp.zeros((1, kh, p, e)))  # the cache layout

  def attention(q, kv):
    out = jnp.zeros(())
    for i in range(cfg.n_layers):
      y, _ = tf.cached_attention(q + i, kv, kv, empty, pos, jnp.zeros((1,), jnp.int32))
      out = out + y[0, -1, 0]
    return out

  lin_flops, att_flops = prefill_flops(cfg, p)
  r = {"bucket": p}
  for name, f, args, fl in [("linear", linear, (x,), lin_flops),
                            ("attention", attention, (q, kv), att_flops)]:
    f = jax.jit(f)
    jax.block_until_ready(f(*args))
    best = float("inf")
    for _ in range(2):
      start = time.perf_counter()
      jax.block_until_ready(f(*args))
      best = min(best, time.perf_counter() - start)
    r[name] = {"s": best, "flops": fl, "gflop_per_s": fl / best / 1e9}
  return r


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="experiments/pass_cost/long_prompt")
  ap.add_argument("--n", type=int, default=5000)
  ap.add_argument("--new", type=int, default=8)
  ap.add_argument("--old_rev", default="96b1bce")
  args = ap.parse_args()
  import jax
  import pass_cost
  from specjax.apps.common import write_report
  from specjax.loading import load_model
  cfg = load_model("smollm2-135m").cfg
  cases, _, mm_flops = pass_cost.floor_cases({"w": jax.numpy.zeros((4,))}, m=1024)
  matmul_s = lambda: pass_cost.interleaved(cases, rounds=5, n=3)["matmul"]
  before = matmul_s()
  new = _run(ROOT, args.n, args.new, repeats=1)
  rate = mm_flops / min(before, matmul_s())  # the faster of before and after: the lower floor
  with tempfile.TemporaryDirectory() as tmp:
    archive = subprocess.run(["git", "archive", args.old_rev, "specjax", "setup.py"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
    old = _run(tmp, args.n, args.new, repeats=1)
  parts = prefill_parts(args.n)
  f = flops(cfg, args.n, args.new)
  r = {"prompt_tokens": args.n, "new_tokens": args.new, "old_rev": args.old_rev, "new": new,
       "old": old, "flops": f, "matmul_flops_per_s": rate, "flop_floor_s": f / rate,
       "new_vs_floor": new["wall_s"] / (f / rate), "old_over_new": old["wall_s"] / new["wall_s"],
       "same_tokens": new["tokens"] == old["tokens"], "prefill_parts": parts}
  md = "\n".join([
      f"| prompt tokens | new tokens | this code s | padded code ({args.old_rev}) s | padded / this "
      f"| FLOP floor s | this / floor | same tokens |",
      "|---|---|---|---|---|---|---|---|",
      f"| {args.n} | {args.new} | {new['wall_s']:.1f} | {old['wall_s']:.1f} | "
      f"{r['old_over_new']:.2f} | {r['flop_floor_s']:.1f} | {r['new_vs_floor']:.2f} | "
      f"{r['same_tokens']} |",
      "",
      f"FLOPs {f / 1e12:.2f} T (causal prefill + {args.new - 1} decode steps) at the matmul rate "
      f"measured in this run, {rate / 1e9:.1f} GFLOP/s. Compile excluded (this code "
      f"{new['compile_s']:.1f} s, padded {old['compile_s']:.1f} s).",
      "",
      f"Where this code's prefill goes (bucket {parts['bucket']}, all layers, each part jitted "
      "and timed alone):",
      "",
      "| part | s | GFLOP | GFLOP/s | x the large matmul's rate |",
      "|---|---|---|---|---|"] + [
      f"| {k} | {parts[k]['s']:.2f} | {parts[k]['flops'] / 1e9:.0f} | "
      f"{parts[k]['gflop_per_s']:.1f} | {parts[k]['gflop_per_s'] * 1e9 / rate:.2f} |"
      for k in ("linear", "attention")])
  write_report(args.out, r, md)


if __name__ == "__main__":
  main()
