"""Token trees vs the chain on the embedded target with the shipped default draft.

    PYTHONPATH=. python experiments/trees/run.py --out=experiments/trees

Greedy, held-out prompts (one per category, decoded as one batch), depth k = 4: the
chain, static trees of growing size and EAGLE-2 dynamic trees. Each setting's stats go
to results.jsonl (a rerun skips settings already there); table.md and
tokens_per_pass.png are rebuilt from that file. Also checks that every tree's tokens
equal the chain's (greedy exactness on the real model).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import specjax
from specjax import prompts as prompts_lib
from specjax.decoding import tree as tree_lib

SETTINGS = [None, "static:2,1,1,1", "static:2,2,1,1", "static:3,2,1,1", "static:4,2,2,1",
            "dynamic:8", "dynamic:16", "dynamic:32", "dynamic:48"]


def kind(tree):
  return "chain" if tree is None else tree.split(":")[0]


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", default="experiments/trees")
  ap.add_argument("--k", type=int, default=4)
  ap.add_argument("--max_new", type=int, default=48)
  ap.add_argument("--draft", default="smollm2-135m-draft")
  args = ap.parse_args()
  for tree in SETTINGS:  # a tree that cannot be built at this depth: one line, before any work
    try:
      tree_lib.resolve_tree(tree, args.k, True)
    except ValueError as e:
      sys.exit(f"error: tree {tree!r} at k={args.k}: {e}")
  path = os.path.join(args.out, "results.jsonl")
  os.makedirs(args.out, exist_ok=True)
  done = {}
  if os.path.exists(path):
    for line in open(path):
      r = json.loads(line)
      done[r["tree"] or "chain"] = r
  target = specjax.load_model("smollm2-135m")
  rows = prompts_lib.select("heldout", per_category=1)
  texts = [r["text"] for r in rows]
  chain_tokens = None
  for tree in SETTINGS:
    name = tree or "chain"
    if name in done and tree is not None:
      continue
    out = specjax.generate(target, texts, args.max_new, draft=args.draft, k=args.k, chat=True,
                           tree=tree)
    if tree is None:
      chain_tokens = out.tokens
      if name in done:
        continue
    s = out.stats.to_dict()
    rec = {"tree": tree, "kind": kind(tree), "k": args.k, "draft": args.draft,
           "prompts": len(texts), "max_new": args.max_new, "nodes": s["nodes_per_round"],
           "tokens_per_pass": s["tokens_per_pass"], "acceptance_per_depth":
           s["per_position_acceptance"], "path_lengths": s["path_lengths"],
           "per_rank_acceptance": s["per_rank_acceptance"], "wall_time_s": s["wall_time_s"],
           "same_tokens_as_chain": out.tokens == chain_tokens}
    with open(path, "a") as f:
      f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec), flush=True)
    done[name] = rec
  report(list(done.values()), args.out)


def report(records, out):
  chain = next(r for r in records if r["tree"] is None)
  lines = ["| tree | kind | nodes per pass | tokens per pass | vs chain | same tokens as chain |",
           "|---|---|---|---|---|---|"]
  for r in sorted(records, key=lambda r: (r["kind"] != "chain", r["kind"], r["nodes"])):
    lines.append(f"| {r['tree'] or 'chain'} | {r['kind']} | {r['nodes']} | "
                 f"{r['tokens_per_pass']:.2f} | {r['tokens_per_pass'] / chain['tokens_per_pass']:.2f}x"
                 f" | {r['same_tokens_as_chain']} |")
  with open(os.path.join(out, "table.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines))
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(6, 4))
  for kd, marker in (("chain", "o"), ("static", "s"), ("dynamic", "^")):
    rs = sorted((r for r in records if r["kind"] == kd), key=lambda r: r["nodes"])
    if rs:
      ax.plot([r["nodes"] for r in rs], [r["tokens_per_pass"] for r in rs], marker=marker,
              label=kd)
  ax.set_xscale("log", base=2)
  ax.set_xlabel("draft nodes verified per pass")
  ax.set_ylabel("tokens per target pass (greedy)")
  ax.set_title(f"depth k = {chain['k']}, {chain['prompts']} held-out prompts, {chain['draft']}")
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(os.path.join(out, "tokens_per_pass.png"), dpi=120)


if __name__ == "__main__":
  main()
