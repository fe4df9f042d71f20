"""k = "auto" against a sweep of fixed k on the embedded target (one run, interleaved).

    python experiments/pass_cost/k_sweep.py --out=experiments/pass_cost/k_sweep

For each (drafter, prompt) (the shipped draft alone and the card's default, prompt lookup
in front of it, on the card's prompt; n-gram lookup on an extraction prompt): the k that
`generate(..., k="auto")` picks, then the target alone and every fixed k in 1..8 timed
round-robin (`--repeats` rounds, fastest counts), 64 greedy new tokens, batch 1. Reports
each k's measured speedup over the target alone and the chosen k's speedup / the best
fixed k's. Writes <out>.json and <out>.md.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from configs.speculate import DEFAULT_PROMPT  # noqa: E402
from specjax import prompts as prompts_lib  # noqa: E402
from specjax.apps.common import write_report  # noqa: E402
from specjax.decoding import generate  # noqa: E402
from specjax.api import lookup_first  # noqa: E402
from specjax.loading import load_model  # noqa: E402


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="experiments/pass_cost/k_sweep")
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--max_new", type=int, default=64)
  args = ap.parse_args()
  target = load_model("smollm2-135m")
  draft = load_model("smollm2-135m-draft", target=target)
  extract = next(r["text"] for r in prompts_lib.select("repeat", 0) if r["id"] == "repeat-extract-0")
  card_draft = lookup_first(draft, "ngram:3", target, "smollm2-135m-draft+ngram:3")
  cases = [("smollm2-135m-draft", draft, "card prompt", DEFAULT_PROMPT),
           ("smollm2-135m-draft+ngram:3 (the card's default)", card_draft, "card prompt",
            DEFAULT_PROMPT),
           ("ngram:3", "ngram:3", "repeat-extract-0", extract)]
  ks = list(range(1, 9))
  rows = []
  for label, d, pname, text in cases:
    ids = target.encode(text, chat=True)
    auto = generate(target, [ids], args.max_new, draft=d, k="auto").k_choice
    best = {}
    for _ in range(args.repeats):
      for k in [0] + ks:
        out = generate(target, [ids], args.max_new, draft=d if k else None, k=max(k, 1))
        best[k] = min(best.get(k, float("inf")), out.stats.wall_time_s / out.stats.new_tokens.sum())
    speedup = {0: 1.0, **{k: best[0] / best[k] for k in ks}}  # k = 0: the target alone
    top = max(speedup, key=speedup.get)
    rows.append({"draft": label, "prompt": pname, "auto_k": auto["k"],
                 "predicted_speedup": auto["predicted_speedup"], "acceptance": auto["acceptance"],
                 "measured_speedup": speedup, "best_k": top,
                 "auto_over_best": speedup[auto["k"]] / speedup[top]})
  lines = ["| draft | prompt | " + " | ".join(f"k={k}" for k in ks) +
           " | best k | auto k | auto / best |", "|" + "---|" * (len(ks) + 5)]
  for r in rows:
    lines.append(f"| {r['draft']} | {r['prompt']} | " +
                 " | ".join(f"{r['measured_speedup'][k]:.2f}" for k in ks) +
                 f" | {r['best_k']} | {r['auto_k']} | {r['auto_over_best']:.3f} |")
  lines += ["", "Measured speedup over the target alone (tokens/s ratio, same run); k=auto's "
            "expected speedups and per-position acceptance are in the JSON."]
  md = "\n".join(lines)
  write_report(args.out, rows, md)


if __name__ == "__main__":
  main()
