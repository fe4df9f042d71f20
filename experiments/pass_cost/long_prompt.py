"""A 5,000-token prompt and 8 new tokens: run time vs its FLOP floor and vs the padded code.

    python experiments/pass_cost/long_prompt.py --out=experiments/pass_cost/long_prompt

In one run: (1) this code's `generate` on the prompt (compile excluded);
(2) a large matmul, for the FLOP rate of this machine now; (3) the code before the
long-prompt changes (git revision --old_rev, exported to a temporary directory and run
in a subprocess: prompt padded to 8,192, full-square prefill attention, every step over
the whole cache). Writes <out>.json and <out>.md.
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


def flops(cfg, n: int, new: int) -> float:
  """Multiply-add FLOPs (2 per MAC) of a causal prefill of n tokens and new - 1 decode steps."""
  from specjax.bench.pass_cost import pass_flops
  d, e = cfg.d_model, cfg.head_dim
  linear = cfg.n_layers * (d * (cfg.n_heads + 2 * cfg.n_kv_heads) * e + cfg.n_heads * e * d
                           + 3 * d * cfg.d_ff)
  prefill = 2.0 * n * linear + 2.0 * cfg.n_layers * 2 * cfg.n_heads * e * n * (n + 1) / 2
  prefill += 2.0 * d * cfg.vocab_size  # the head, last position only
  return prefill + sum(pass_flops(cfg, 1, n + i) for i in range(new - 1))


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="experiments/pass_cost/long_prompt")
  ap.add_argument("--n", type=int, default=5000)
  ap.add_argument("--new", type=int, default=8)
  ap.add_argument("--old_rev", default="96b1bce")
  args = ap.parse_args()
  import jax
  from specjax.bench import pass_cost
  from specjax.loading import load_model
  cfg = load_model("smollm2-135m").cfg
  new = _run(ROOT, args.n, args.new, repeats=1)
  cases, _, mm_flops = pass_cost.floor_cases({"w": jax.numpy.zeros((4,))}, m=1024)
  rate = mm_flops / pass_cost.interleaved(cases, rounds=5, n=3)["matmul"]
  with tempfile.TemporaryDirectory() as tmp:
    archive = subprocess.run(["git", "archive", args.old_rev, "specjax", "setup.py"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
    old = _run(tmp, args.n, args.new, repeats=1)
  f = flops(cfg, args.n, args.new)
  r = {"prompt_tokens": args.n, "new_tokens": args.new, "old_rev": args.old_rev, "new": new,
       "old": old, "flops": f, "matmul_flops_per_s": rate, "flop_floor_s": f / rate,
       "new_vs_floor": new["wall_s"] / (f / rate), "old_over_new": old["wall_s"] / new["wall_s"],
       "same_tokens": new["tokens"] == old["tokens"]}
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
      f"{new['compile_s']:.1f} s, padded {old['compile_s']:.1f} s)."])
  print(md)
  with open(args.out + ".json", "w") as fh:
    json.dump(r, fh, indent=1)
  with open(args.out + ".md", "w") as fh:
    fh.write(md + "\n")


if __name__ == "__main__":
  main()
