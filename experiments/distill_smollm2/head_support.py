"""How much of the shipped draft's acceptance its reduced head costs, on the evaluation set.

    PYTHONPATH=. python experiments/distill_smollm2/head_support.py \
        --out=experiments/distill_smollm2/head_support

The feature draft scores only the 4,096 `head_vocab` ids of the target's head (FR-Spec):
a target token outside them can never be drafted. Its head columns are the target's own
(frozen, shared), so the support can be widened without training: the shipped ids plus
the lowest other ids (BPE merge order, roughly frequency order) up to each size, the full
vocabulary last. For each size: the share of the target's own greedy tokens outside the
support, and alpha and tokens per target pass at k drafts (greedy and temperature 1), the
prompts decoded as one batch. Greedy output is checked against the target alone. Writes
head_support.json and head_support.md into --out.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import jax.numpy as jnp
import numpy as np

import specjax
from specjax import prompts as prompts_lib
from specjax.api import resolve_drafter
from specjax.loading.asset import with_head_kernel


def widened(drafter, size: int, vocab: int):
  """The drafter with its head support grown to `size` ids (shipped ids first)."""
  ids = np.asarray(drafter.params["head_vocab"])
  if size <= len(ids):
    return drafter, ids
  rest = np.setdiff1d(np.arange(vocab), ids)[: size - len(ids)]  # ascending id order
  sup = np.sort(np.concatenate([ids, rest]))
  params = {k: v for k, v in drafter.params.items() if k != "head_kernel"}
  params = with_head_kernel(drafter.cfg, dict(params, head_vocab=jnp.asarray(sup, jnp.int32)))
  return drafter.replace(params=params), sup


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", default="experiments/distill_smollm2/head_support")
  ap.add_argument("--draft", default="smollm2-135m-draft")
  ap.add_argument("--sizes", default="4096,8192,16384,49152")
  ap.add_argument("--temperatures", default="0,1")
  ap.add_argument("--per_category", type=int, default=4)
  ap.add_argument("--max_new", type=int, default=48)
  ap.add_argument("--k", type=int, default=4)
  args = ap.parse_args()
  target = specjax.load_model("smollm2-135m")
  rows = prompts_lib.select("eval", per_category=args.per_category)
  ids = [target.encode(r["text"], chat=True) for r in rows]
  base = resolve_drafter(args.draft, target)
  ref = specjax.generate(target, ids, args.max_new, temperature=0.0)
  ref_tokens = np.concatenate([np.asarray(t) for t in ref.tokens])
  records = []
  for size in [int(s) for s in args.sizes.split(",")]:
    drafter, sup = widened(base, size, target.cfg.vocab_size)
    rec = {"head_size": int(len(sup)), "outside_support": float(np.mean(~np.isin(ref_tokens, sup)))}
    for t in [float(x) for x in args.temperatures.split(",")]:
      res = specjax.generate(target, ids, args.max_new, temperature=t, draft=drafter, k=args.k,
                             seed=0)
      s = res.stats
      rec[f"T{t:g}"] = {"alpha": s.acceptance_rate, "tokens_per_pass": s.tokens_per_pass}
      if t == 0.0:
        rec["identical_to_target"] = res.tokens == ref.tokens
    records.append(rec)
    print(f"{time.strftime('%H:%M:%S')} {json.dumps(rec)}", flush=True)
  os.makedirs(args.out, exist_ok=True)
  meta = {"draft": args.draft, "prompts": len(rows), "per_category": args.per_category,
          "max_new": args.max_new, "k": args.k, "target_tokens": int(len(ref_tokens))}
  with open(os.path.join(args.out, "head_support.json"), "w") as f:
    json.dump({"meta": meta, "records": records}, f, indent=1)
  temps = [k for k in records[0] if k.startswith("T")]
  lines = [f"{meta['prompts']} evaluation-set prompts ({args.per_category} per category), one batch, "
           f"{args.max_new} new tokens, k = {args.k}, draft `{args.draft}`; "
           f"{meta['target_tokens']} target greedy tokens.", "",
           "| head ids | target tokens outside | " + " | ".join(
               f"alpha {t} | tokens/pass {t}" for t in temps) + " | greedy identical |",
           "|---" * (3 + 2 * len(temps)) + "|"]
  for r in records:
    lines.append(f"| {r['head_size']} | {r['outside_support']:.3f} | " + " | ".join(
        f"{r[t]['alpha']:.3f} | {r[t]['tokens_per_pass']:.2f}" for t in temps)
        + f" | {r.get('identical_to_target')} |")
  with open(os.path.join(args.out, "head_support.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines))


if __name__ == "__main__":
  main()
