"""results.jsonl -> results.md (the tables the README shows) and speedup.png.

    python experiments/batch/run.py --report
"""
from __future__ import annotations

import json
import os
from collections import defaultdict


def load(path: str) -> list:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def mean(xs):
  xs = [x for x in xs if x is not None]
  return sum(xs) / len(xs) if xs else None


def summary(rows: list) -> list:
  """One row per (batch, drafter): the best fixed k, k="auto" (what it chose, predicted
  beside measured), each measured side by side with the target alone."""
  by = defaultdict(dict)
  for r in rows:
    if r["drafter"]:
      by[(r["batch"], r["drafter"])][r["setting"]] = r
  out = []
  for (b, d), s in sorted(by.items()):
    fixed = {int(k[1:]): v["speedup"] for k, v in s.items() if k.startswith("k")}
    auto = s.get("auto")
    best_k = max(fixed, key=fixed.get) if fixed else None
    line = {"batch": b, "drafter": d, "fixed": fixed, "best_k": best_k,
            "best_fixed": fixed.get(best_k)}
    if auto:
      chosen = sorted({c["k"] for c in auto["choices"]})
      line.update(auto=auto["speedup"], auto_k=chosen, predicted=mean(c["predicted"] for c in auto["choices"]),
                  calibration_s=auto.get("calibration_s"), first_call_s=auto.get("first_call_s"),
                  predicted_fixed={k: mean(c["predicted_speedup"].get(str(k)) for c in auto["choices"])
                                   for k in fixed})
    out.append(line)
  return out


def fmt(x, f="{:.2f}"):
  return "-" if x is None else f.format(x)


def tables(summ: list, rows: list) -> str:
  ks = sorted({k for s in summ for k in s["fixed"]})
  head = ("| batch | drafter | " + " | ".join(f"k={k}" for k in ks)
          + " | best fixed k | auto: k chosen | auto, measured | auto, predicted | one-time calibration s |")
  lines = [head, "|" + "---|" * (len(ks) + 7)]
  for s in summ:
    chosen = ", ".join("target alone" if k == 0 else str(k) for k in s.get("auto_k", []))
    lines.append(f"| {s['batch']} | {s['drafter']} | "
                 + " | ".join(fmt(s["fixed"].get(k)) for k in ks)
                 + f" | {s['best_k']} ({fmt(s['best_fixed'])}) | {chosen or '-'} | {fmt(s.get('auto'))}"
                 f" | {fmt(s.get('predicted'))} | {fmt(s.get('calibration_s'), '{:.0f}')} |")
  lines += ["", "Predicted against measured for each fixed k (the prediction k=\"auto\" made "
            "for that k, mean over its calls; measured side by side with the target alone):", "",
            "| batch | drafter | k | predicted | measured | predicted / measured |", "|---|---|---|---|---|---|"]
  for s in summ:
    for k in ks:
      p, m = (s.get("predicted_fixed") or {}).get(k), s["fixed"].get(k)
      if p is not None and m is not None:
        lines.append(f"| {s['batch']} | {s['drafter']} | {k} | {fmt(p)} | {fmt(m)} | {fmt(p / m)} |")
  alone = [r for r in rows if r["setting"] == "alone"]
  lines += ["", "Target alone (tokens/s, this shared 2-core CPU): "
            + ", ".join(f"batch {r['batch']}: {r['alone_tokens_per_s']:.1f}" for r in alone)]
  return "\n".join(lines) + "\n"


def plot(summ: list, path: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  drafters = sorted({s["drafter"] for s in summ})
  fig, axes = plt.subplots(1, len(drafters), figsize=(5 * len(drafters), 4), squeeze=False)
  for ax, d in zip(axes[0], drafters):
    ss = [s for s in summ if s["drafter"] == d]
    bs = [s["batch"] for s in ss]
    for k in sorted({k for s in ss for k in s["fixed"]}):
      ax.plot(bs, [s["fixed"].get(k) for s in ss], "o-", alpha=0.5, label=f"k={k}")
    ax.plot(bs, [s.get("auto") for s in ss], "s-k", lw=2, label='k="auto" (measured)')
    ax.plot(bs, [s.get("predicted") for s in ss], "x--k", label='k="auto" (predicted)')
    ax.axhline(1.0, color="gray", lw=1)
    ax.axhline(0.97, color="red", lw=0.8, ls=":", label="0.97 (goal: no lower)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(bs, [str(b) for b in bs])
    ax.set_xlabel("batch size")
    ax.set_ylabel("speedup over the target alone")
    ax.set_title(d, fontsize=9)
  axes[0][0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def report(results: str, out_dir: str) -> None:
  rows = load(results)
  summ = summary(rows)
  with open(os.path.join(out_dir, "results.md"), "w") as f:
    f.write(tables(summ, rows))
  plot(summ, os.path.join(out_dir, "speedup.png"))
  print(tables(summ, rows))
