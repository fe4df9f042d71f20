"""Decode throughput of two checkouts side by side: this tree against `--before`.

    git worktree add /tmp/before <commit>
    PYTHONPATH=. python experiments/pass_cost/layout_ab.py --before=/tmp/before \
        --out=experiments/pass_cost/layout_ab

Each checkout runs in its own process (its own `specjax` import) on the embedded
target, alternately, `--rounds` times; a cell keeps its fastest round. Measured per
batch size B (greedy, random 100-token prompts, no EOS): the decode step as the
difference of a 65-token and a 1-token run over 64 steps (so the prefill drops out),
the prefill, a speculative round with the shipped draft at k = 1 and k = 4 (batch 1), and
the main job's prompt (`make demo`, 64 new tokens) with the target alone and the shipped
draft at k = 1 and 4 (its speedups are the ratios of those rows).
Compile time is excluded by `generate` itself (`specjax.bench.timing.best_of`).
Writes results.json and table.md.
"""
import json
import os
import subprocess
import sys

from absl import app, flags

_BEFORE = flags.DEFINE_string("before", None, "A checkout of the code to compare against.")
_OUT = flags.DEFINE_string("out", "experiments/pass_cost/layout_ab", "Output directory.")
_ROUNDS = flags.DEFINE_integer("rounds", 2, "Alternating rounds per checkout.")
_BATCHES = flags.DEFINE_list("batches", ["1", "8", "32"], "Batch sizes.")
_WORKER = flags.DEFINE_bool("worker", False, "Internal: measure this process's specjax.")


def measure(batches) -> dict:
  """One checkout's cells (runs inside the worker process)."""
  import numpy as np
  import specjax
  from specjax.bench.timing import best_of
  target = specjax.load_model("smollm2-135m")
  rng = np.random.default_rng(0)
  out = {}
  for b in batches:
    prompts = [rng.integers(100, 20000, 100).tolist() for _ in range(b)]
    wall = {n: best_of(3, target, prompts, n, eos_ids=(), temperature=0.0).stats.wall_time_s
            for n in (1, 65)}
    out[f"decode_ms_b{b}"] = 1e3 * (wall[65] - wall[1]) / 64
    out[f"prefill_s_b{b}"] = wall[1]
  prompts = [rng.integers(100, 20000, 100).tolist()]
  for k in (1, 4):
    kw = dict(draft="smollm2-135m-draft", k=k, eos_ids=(), temperature=0.0)
    best = best_of(3, target, prompts, 65, **kw).stats
    out["spec_round_ms_b1" + ("" if k == 4 else f"_k{k}")] = (
        1e3 * best.wall_time_s / int(best.rounds.max()))
  # The main job's prompt (`make demo`): the target alone and the shipped draft at k = 1, 4.
  from configs.speculate import DEFAULT_PROMPT
  for k in (0, 1, 4):
    kw = {} if k == 0 else dict(draft="smollm2-135m-draft", k=k)
    run = best_of(3, target, [DEFAULT_PROMPT], 64, chat=True, temperature=0.0, **kw)
    out[f"demo_ms_{'target' if k == 0 else f'k{k}'}"] = 1e3 * run.stats.wall_time_s
  return out


def main(argv):
  del argv
  batches = [int(b) for b in _BATCHES.value]
  if _WORKER.value:
    print("RESULT " + json.dumps(measure(batches)), flush=True)
    return
  if not _BEFORE.value or not os.path.isdir(os.path.join(_BEFORE.value, "specjax")):
    sys.exit("--before must name a checkout of specjax (a directory holding specjax/), e.g. "
             "one made with `git worktree add /tmp/before <commit>`.")
  trees = {"before": os.path.abspath(_BEFORE.value), "after": os.path.abspath(".")}
  script = os.path.abspath(__file__)
  cells = {name: {} for name in trees}
  for r in range(_ROUNDS.value):
    for name, tree in trees.items():
      env = {**os.environ, "PYTHONPATH": tree}
      worker = [sys.executable, script, "--worker", "--batches=" + ",".join(map(str, batches))]
      proc = subprocess.run(worker, cwd=tree, env=env, capture_output=True, text=True)
      line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
      if proc.returncode or not line:
        sys.exit(f"The {name} checkout ({tree}) failed:\n{proc.stderr[-2000:]}")
      got = json.loads(line[0][len("RESULT "):])
      print(f"round {r} {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in got.items()), flush=True)
      for k, v in got.items():
        cells[name][k] = min(v, cells[name].get(k, float("inf")))
  os.makedirs(_OUT.value, exist_ok=True)
  with open(os.path.join(_OUT.value, "results.json"), "w") as f:
    json.dump({"trees": trees, "rounds": _ROUNDS.value, "cells": cells,
               "load_avg": os.getloadavg()[0]}, f, indent=1)
  rows = ["| measure | before | after | before / after |", "|---|---|---|---|"]
  for k in cells["after"]:
    b, a = cells["before"][k], cells["after"][k]
    rows.append(f"| {k} | {b:.2f} | {a:.2f} | {b / a:.2f} |")
  table = "\n".join(rows) + f"\n\nbefore: {trees['before']}; after: {trees['after']}; " \
      f"{_ROUNDS.value} alternating rounds, fastest kept.\n"
  with open(os.path.join(_OUT.value, "table.md"), "w") as f:
    f.write(table)
  print(table)


if __name__ == "__main__":
  app.run(main)
