"""Speculation sized by the batch: each drafter against the target alone at batch 1, 4, 16
and 64 on the evaluation set, fixed k = 1..4 beside k="auto" (tuned for the batch).

    python experiments/batch/run.py                      # resumable: skips settings done
    python experiments/batch/run.py --report             # results.md and speedup.png

Per batch size B the prompts are the evaluation set spread over its categories
(max(B, --min_prompts) of them, as calls of B rows); every setting decodes them all for `--max_new`
tokens, greedy, each call beside a call of the target alone on the same rows (the shared
machine drifts: ratios are measured side by side), per call the fastest of `--repeats`
at B <= 4, one run above. Settings per drafter: "auto" (its first call measures what the cost store
lacks: `calibration_s`, `first_call_s`; the timed calls after it include the tuner's own
per-call work), then fixed k. Fixed settings are warmed by a 2-token call (one program
serves both lengths); `generate` excludes compile time from its wall time. Each setting's
line is appended to results.jsonl as it finishes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

import specjax  # noqa: E402
from specjax import prompts as prompt_sets  # noqa: E402
from specjax.api.draft_spec import resolve_drafter  # noqa: E402
from specjax.apps.card import load_draft  # noqa: E402
from specjax.loading import load_model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# the card's default, and prompt lookup alone (the shipped draft alone: --drafters)
DRAFTERS = ("smollm2-135m-draft+ngram:3", "ngram:3")


def batches_of(ids: list, b: int) -> list:
  return [ids[i:i + b] for i in range(0, len(ids) - b + 1, b)]


def call(target, ids, max_new, **kw):
  """(the result, seconds: decoding's wall, plus for k="auto" what the call spent choosing
  outside it; compile excluded)."""
  start = time.perf_counter()
  out = specjax.generate(target, ids, max_new, **kw)
  elapsed = time.perf_counter() - start - out.stats.compile_time_s
  return out, out.stats.wall_time_s + (elapsed - out.stats.wall_time_s if kw.get("k") == "auto" else 0.0)


def timed(target, batches, max_new, repeats, **kw) -> dict:
  """The setting beside the target alone, call by call (alone, setting, alone, ...), over
  `batches`, `repeats` times; per call and side the fastest repeat counts (one run's speed
  on this shared CPU is bimodal). Speedup = the setting's tokens/s over the target
  alone's, measured side by side."""
  alone_s, spec_s, choices, last = {}, {}, [], {}
  for rep in range(repeats):
    for i, ids in enumerate(batches):
      a, sec = call(target, ids, max_new)
      alone_s[i] = min(alone_s.get(i, sec), sec)
      last[("alone", i)] = int(a.stats.new_tokens.sum())
      if not kw:
        continue
      out, sec = call(target, ids, max_new, **kw)
      spec_s[i] = min(spec_s.get(i, sec), sec)
      s = out.stats
      last[i] = (int(s.new_tokens.sum()), int(np.max(s.rounds)), int(s.rounds.sum()))
      if out.k_choice is not None and rep == 0:
        c = out.k_choice
        choices.append({"k": c["k"], "predicted": c["predicted"], "note": c["note"],
                        "calibration_s": c["calibration_s"],
                        "predicted_speedup": {str(k): v for k, v in c["predicted_speedup"].items()}})
  alone_wall = sum(alone_s.values())
  alone_new = sum(last[("alone", i)] for i in range(len(batches)))
  r = {"alone_wall_s": alone_wall, "alone_tokens_per_s": alone_new / alone_wall}
  if kw:
    wall = sum(spec_s.values())
    new, rounds, passes = (sum(last[i][j] for i in range(len(batches))) for j in range(3))
    r.update(wall_s=wall, new_tokens=new, tokens_per_s=new / wall, iterations=rounds,
             tokens_per_pass=(new - len(batches) * len(batches[0])) / max(passes, 1),
             speedup=(new / wall) / r["alone_tokens_per_s"], choices=choices)
  return r


def main(argv=None):
  ap = argparse.ArgumentParser()
  ap.add_argument("--batches", default="1,4,16,64")  # run here: 1,4,16 (README)
  ap.add_argument("--drafters", default=",".join(DRAFTERS))
  ap.add_argument("--ks", default="1,2,4")
  ap.add_argument("--max_new", type=int, default=32)
  ap.add_argument("--repeats", type=int, default=2)
  ap.add_argument("--min_prompts", type=int, default=4)
  ap.add_argument("--target", default="smollm2-135m")
  ap.add_argument("--out", default=os.path.join(HERE, "results.jsonl"))
  ap.add_argument("--report", action="store_true")
  args = ap.parse_args(argv)
  if args.report:
    from report import report  # experiments/batch/report.py
    return report(args.out, HERE)
  done = set()
  if os.path.exists(args.out):
    with open(args.out) as f:
      done = {(r["batch"], r["drafter"], r["setting"]) for r in map(json.loads, f)}
  target = load_model(args.target)
  drafters = {}
  rows = prompt_sets.evaluation()
  for b in [int(x) for x in args.batches.split(",")]:
    picked = prompt_sets.spread_by_category(rows, max(b, args.min_prompts))
    ids = [target.encode(r["text"], chat=True) for r in picked]
    batches = batches_of(ids, b)

    def write(drafter, setting, result):
      line = {"batch": b, "drafter": drafter, "setting": setting, "max_new": args.max_new,
              "prompts": len(batches) * b, **result}
      with open(args.out, "a") as f:
        f.write(json.dumps(line) + "\n")
      done.add((b, drafter, setting))
      print(json.dumps({k: v for k, v in line.items() if k != "choices"}), flush=True)

    plan = [("", "alone")] + [(d, s) for d in args.drafters.split(",")
                              for s in ["auto"] + [f"k{k}" for k in args.ks.split(",")]]
    for name, setting in plan:
      if (b, name, setting) in done:
        continue
      kw = {}
      if name:
        if name not in drafters:
          drafters[name] = resolve_drafter(load_draft(name, target=target)[1], target)
        kw = dict(draft=drafters[name], k="auto" if setting == "auto" else int(setting[1:]))
      first = {}
      if setting == "auto":  # the first call measures what the store lacks
        start = time.perf_counter()
        out = specjax.generate(target, batches[0], args.max_new, **kw)
        first = {"first_call_s": time.perf_counter() - start,
                 "calibration_s": out.k_choice["calibration_s"]}
      else:
        specjax.generate(target, batches[0], 2, **kw)  # compile, warm
      repeats = args.repeats if b <= 4 else 1  # the large batches: one side-by-side pass
      write(name, setting, {**timed(target, batches, args.max_new, repeats, **kw), **first})


if __name__ == "__main__":
  main()
