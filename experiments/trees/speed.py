"""Measured speed of tree="auto" against every chain, on the embedded target (one run).

    PYTHONPATH=. python experiments/trees/speed.py --out=experiments/trees/speed

Greedy, batch 1, one prompt per category of `--prompts` (default: the evaluation set,
which the trainer never shaped), `--max_new` new tokens, the shipped default draft: the
target alone, the chain at k = 1..`--max_chain`, tree="auto" of depth at most `--k` (its
calibration runs once, before the timing, and is reported apart) and `--trees` fixed trees,
timed round-robin (`--repeats` rounds, the fastest of each setting per prompt
counts; compile excluded). Tokens/s is summed over the prompts. Also checks that every
setting's tokens equal the target alone's. Writes <out>.json and <out>.md, which compare
tree="auto" with the best chain of depth <= --k (its own choices) and with the best chain
timed (`--report_only` rebuilds them from <out>.json).
Choosing the best chain and measuring it on the same timings favours the chains (the
fastest of several noisy rows is biased upwards), so with `--repeats` >= 2 the record
also holds a cross-validated ratio: the rounds split into even and odd, the best chain
chosen on one half and tree="auto" compared with it on the other, both ways, and each
setting's half-to-half spread, the run's own noise.
With `--lookup=+ngram:3` the drafter is the draft with prompt lookup (chains lookup-first,
trees with a lookup chain beside them) and the draft's own chains are timed as well; the
best chain is the fastest of all of them.
With `--auto_last` the fixed settings are timed first and <out>.md written before
tree="auto" calibrates; auto is then timed after them (not round-robin with them) and the
record rewritten: a run cut short, as in a short accelerator lease, keeps the chains and trees.
With `--chain_lengths=L,..` (and `--lookup`) each tree is also timed beside a lookup chain of
L nodes ("<draft>+ngram:3:L"), which may reach deeper than k where the text is copied.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import specjax  # noqa: E402
from specjax import prompts as prompts_lib  # noqa: E402
from specjax.apps.common import parse_trees, write_report  # noqa: E402
from specjax.apps.tree_speed import report  # noqa: E402


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="experiments/trees/speed")
  ap.add_argument("--k", type=int, default=4)
  ap.add_argument("--max_new", type=int, default=48)
  ap.add_argument("--repeats", type=int, default=2)
  ap.add_argument("--draft", default="smollm2-135m-draft")
  ap.add_argument("--prompts", default="eval", help="a prompt source of specjax.bench.prompts")
  ap.add_argument("--max_chain", type=int, default=6)
  ap.add_argument("--lookup", default="",
                  help="e.g. '+ngram:3': every chain, tree and tree=auto runs with prompt lookup "
                       "(lookup-first chains, a lookup chain beside each tree); the draft's own "
                       "chains are timed too")
  ap.add_argument("--trees", default="static:2,1,1,1;static:2,2,1,1;dynamic:8;dynamic:16",
                  help="fixed trees of depth --k, joined by ';' (as config.trees)")
  ap.add_argument("--chain_lengths", default="",
                  help="with --lookup: also time each of --trees beside a lookup chain of each "
                       "of these lengths L ('<draft>+ngram:N:L', possibly deeper than --k)")
  ap.add_argument("--auto_last", action="store_true",
                  help="time the fixed settings first and write <out>.md before tree='auto' "
                       "calibrates and is timed (after them, not round-robin with them): a "
                       "run cut short, as in a short accelerator lease, keeps the chains and trees")
  ap.add_argument("--report_only", action="store_true",
                  help="rebuild <out>.md (and the comparisons in <out>.json) from <out>.json")
  args = ap.parse_args()
  if args.report_only:
    with open(args.out + ".json") as f:
      write_report(args.out, *report(json.load(f)))
    return
  trees = parse_trees(args.trees, [args.k])  # a bad list: one clear error before loading
  if args.chain_lengths and not args.lookup:
    raise SystemExit("error: --chain_lengths needs --lookup (e.g. --lookup=+ngram:3).")
  target = specjax.load_model("smollm2-135m")
  draft = specjax.load_model(args.draft, target=target)
  alone = draft
  if args.lookup:  # the loaded draft with lookup first (not loaded again from its name)
    from specjax.api import lookup_first
    draft = lookup_first(alone, args.lookup.lstrip("+"), target, args.draft + args.lookup)
  prompts = [target.encode(r["text"], chat=True)
             for r in prompts_lib.select(args.prompts, per_category=1)]
  settings = {"target": dict(draft=None, k=1)}
  for k in range(1, args.max_chain + 1):
    settings[f"chain k={k}"] = dict(draft=draft, k=k)
  if args.lookup:
    for k in range(1, args.max_chain + 1):
      settings[f"chain k={k}, draft alone"] = dict(draft=alone, k=k)
  auto_name = f"tree=auto k<={args.k}"
  tree_settings = {f"{spec} k={args.k}": dict(draft=draft, k=args.k, tree=spec) for spec in trees}
  for n in [int(x) for x in args.chain_lengths.split(",") if x]:  # "<draft>+ngram:N:n"
    tree_settings.update({f"{spec} k={args.k}, lookup chain {n}": dict(
        draft=draft.replace(chain=n), k=args.k, tree=spec) for spec in trees})
  record = {"prompts": len(prompts), "prompt_source": args.prompts, "max_new": args.max_new,
            "k": args.k, "draft": args.draft + args.lookup, "repeats": args.repeats,
            "auto_tree": None, "calibration_s": None}
  ref = {}
  if args.auto_last:  # the fixed settings first, written before tree="auto" calibrates
    rows = time_settings(target, prompts, {**settings, **tree_settings}, args, ref)
    write_report(args.out, *report({**record, "rows": rows}))
    print(f"wrote {args.out}.md without tree='auto'; calibrating it", flush=True)
  start = time.perf_counter()
  # Acceptance from 4 prompts (one batch); then the finalists timed at batch 1, the batch
  # every setting below runs at (tree="auto" chooses per batch size).
  auto = dict(draft=draft, k=args.k, tree="auto")
  specjax.generate(target, prompts[:4], args.max_new, **auto)
  chosen = specjax.generate(target, prompts[:1], args.max_new, **auto)
  record.update(auto_tree=chosen.stats.tree or f"the chain at k={chosen.stats.k}",
                calibration_s=time.perf_counter() - start)
  if args.auto_last:
    rows += time_settings(target, prompts, {auto_name: auto}, args, ref)
  else:
    rows = time_settings(target, prompts, {**settings, auto_name: auto, **tree_settings}, args, ref)
  write_report(args.out, *report({**record, "rows": rows}))


def time_settings(target, prompts, settings: dict, args, ref: dict) -> list:
  """Each setting's row: compiled on every prompt first, then timed round-robin over
  `args.repeats` rounds (the fastest per prompt counts). ref: the target alone's tokens
  per prompt, filled by the "target" setting and compared with every other's."""
  best = {}
  walls = {name: [[] for _ in prompts] for name in settings}  # [setting][prompt][round] seconds
  for name, kw in settings.items():  # compile every setting and prompt length first
    for p in prompts:
      specjax.generate(target, [p], args.max_new, **kw)
  for _ in range(args.repeats):
    for name, kw in settings.items():
      for i, p in enumerate(prompts):
        out = specjax.generate(target, [p], args.max_new, **kw)
        if name == "target":
          ref[i] = out.tokens
        same = out.tokens == ref.get(i, out.tokens)
        walls[name][i].append(out.stats.wall_time_s)
        prev = best.get((name, i))
        if prev is None or out.stats.wall_time_s < prev[0]:
          best[(name, i)] = (out.stats.wall_time_s, int(out.stats.new_tokens.sum()),
                             out.stats.tokens_per_pass, same)
  rows = []
  for name in settings:
    wall = sum(best[(name, i)][0] for i in range(len(prompts)))
    new = sum(best[(name, i)][1] for i in range(len(prompts)))
    tpp = [best[(name, i)][2] for i in range(len(prompts))]
    rows.append({"setting": name, "tokens_per_s": new / wall, "wall_s": wall, "new_tokens": new,
                 "tokens_per_pass": sum(tpp) / len(tpp),
                 "same_tokens_as_target": all(best[(name, i)][3] for i in range(len(prompts))),
                 "walls": walls[name]})
  return rows


if __name__ == "__main__":
  main()
