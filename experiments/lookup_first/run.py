"""Prompt lookup in front of the shipped feature draft (`LookupFirstDrafter`,
'smollm2-135m-draft+ngram:3'): min_match chosen on the templated held-out split, then the
draft alone against the combination on the evaluation set and the main job's prompt.

    PYTHONPATH=. python experiments/lookup_first/run.py --out=experiments/lookup_first/results

Tokens per target pass and acceptance (k = 4, 64 new tokens, chat template). Selection:
the first `--select_prompts` prompts of the held-out split (made from the training
templates, never the evaluation set), greedy, min_match in {1, 2, 3} against the draft
alone. Evaluation: every prompt of `prompts_eval.jsonl` (which neither the trainer nor this
selection saw), greedy and temperature 1, per category; and the card's default prompt.
Every greedy run is checked token for token against the target alone. Acceptance does
not depend on the batch, so rows run batched. Writes <out>.json and <out>.md.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import specjax  # noqa: E402
from configs.speculate import DEFAULT_PROMPT  # noqa: E402
from specjax import prompts as prompts_lib  # noqa: E402
from specjax.apps.common import write_report  # noqa: E402
from specjax.decoding.drafters import LookupFirstDrafter  # noqa: E402
from specjax.api import resolve_drafter  # noqa: E402


def measure(target, drafter, rows, k, max_new, temperature, reference=None) -> dict:
  """Tokens per pass and alpha over `rows` (one batch), overall and per category."""
  out = specjax.generate(target, [r["text"] for r in rows], max_new, draft=drafter, k=k,
                         chat=True, temperature=temperature, seed=0)
  s = out.stats
  per_cat = collections.defaultdict(list)
  for b, r in enumerate(rows):
    per_cat[r["category"]].append(s.row(b)["tokens_per_pass"])
  rec = {"alpha": s.acceptance_rate, "tokens_per_pass": s.tokens_per_pass,
         "per_position": s.per_position_acceptance,
         "by_category": {c: sum(v) / len(v) for c, v in per_cat.items()}}
  if reference is not None:
    rec["identical_to_target"] = out.tokens == reference
  return rec


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="experiments/lookup_first/results")
  ap.add_argument("--draft", default="smollm2-135m-draft")
  ap.add_argument("--n", type=int, default=3, help="longest suffix looked up")
  ap.add_argument("--k", type=int, default=4)
  ap.add_argument("--max_new", type=int, default=64)
  ap.add_argument("--select_prompts", type=int, default=60)
  args = ap.parse_args()
  target = specjax.load_model("smollm2-135m")
  base = resolve_drafter(args.draft, target)
  both = lambda m: LookupFirstDrafter(base=base, n=args.n, min_match=m)
  alone = lambda rows: specjax.generate(target, [r["text"] for r in rows], args.max_new,
                                        chat=True).tokens
  record = {"draft": args.draft, "n": args.n, "k": args.k, "max_new_tokens": args.max_new}

  held = prompts_lib.select("heldout", per_category=0)[:args.select_prompts]
  ref = alone(held)
  sel = {"draft alone": measure(target, base, held, args.k, args.max_new, 0.0, ref)}
  for m in (1, 2, 3):
    sel[f"min_match={m}"] = measure(target, both(m), held, args.k, args.max_new, 0.0, ref)
  chosen = max((1, 2, 3), key=lambda m: sel[f"min_match={m}"]["tokens_per_pass"])
  record.update(selection={"prompts": len(held), "runs": sel}, min_match=chosen)

  ev = prompts_lib.select("eval", per_category=0)
  ref = alone(ev)
  default = [{"text": DEFAULT_PROMPT, "category": "default"}]
  ref_default = alone(default)
  evaluation = {}
  for name, drafter in (("draft alone", base), (f"+ngram:{args.n}, min_match={chosen}",
                                                 both(chosen))):
    evaluation[name] = {
        "greedy": measure(target, drafter, ev, args.k, args.max_new, 0.0, ref),
        "T=1": measure(target, drafter, ev, args.k, args.max_new, 1.0),
        "default prompt greedy": measure(target, drafter, default, args.k, args.max_new, 0.0,
                                         ref_default)}
  record.update(evaluation={"prompts": len(ev), "runs": evaluation})

  md = [f"Selection on {len(held)} held-out prompts (templated split), greedy, k = {args.k}:", "",
        "| drafter | alpha | tokens/pass | identical to target |", "|---|---|---|---|"]
  md += [f"| {n} | {r['alpha']:.3f} | {r['tokens_per_pass']:.2f} | {r['identical_to_target']} |"
         for n, r in sel.items()]
  md += ["", f"Chosen: min_match = {chosen}.", "",
         f"Evaluation set ({len(ev)} prompts, never used above), k = {args.k}:", "",
         "| drafter | greedy alpha | greedy tokens/pass | T=1 alpha | T=1 tokens/pass | "
         "default prompt tokens/pass | identical to target |", "|---|---|---|---|---|---|---|"]
  for n, r in evaluation.items():
    g, t, d = r["greedy"], r["T=1"], r["default prompt greedy"]
    md.append(f"| {n} | {g['alpha']:.3f} | {g['tokens_per_pass']:.2f} | {t['alpha']:.3f} | "
              f"{t['tokens_per_pass']:.2f} | {d['tokens_per_pass']:.2f} | "
              f"{g['identical_to_target'] and d['identical_to_target']} |")
  cats = list(next(iter(evaluation.values()))["greedy"]["by_category"])
  md += ["", "Greedy tokens per pass by category (evaluation set):", "",
         "| drafter | " + " | ".join(cats) + " |", "|---|" + "---|" * len(cats)]
  for n, r in evaluation.items():
    md.append(f"| {n} | " + " | ".join(f"{r['greedy']['by_category'][c]:.2f}" for c in cats) + " |")
  write_report(args.out, record, "\n".join(md))


if __name__ == "__main__":
  main()
