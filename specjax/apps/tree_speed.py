"""The report of a tree-speed comparison (experiments/trees/speed.py): tree="auto" against the
best chain of any depth and of depth <= k, and a cross-validated ratio (the best chain chosen on
one half of the timing rounds and measured on the other, so a chain that won by noise alone
does not count against auto)."""
from __future__ import annotations


def _depth(setting: str) -> int:
  return int(setting.split("k=")[1].split(",")[0])


def _half_rate(row: dict, rounds) -> float:
  """Tokens/s of one setting over the given timing rounds (fastest of them per prompt)."""
  return row["new_tokens"] / sum(min(w[j] for j in rounds) for w in row["walls"])


def cross_validated(rows: list, k: int) -> dict | None:
  """tree="auto" against the best chain of depth <= k, the chain chosen on one half of the
  rounds (even or odd) and both measured on the other; None without per-round timings."""
  if not all(len(w) >= 2 for row in rows for w in row.get("walls", [[]])):
    return None
  n = len(rows[0]["walls"][0])
  halves = [range(0, n, 2), range(1, n, 2)]
  chains = [row for row in rows if row["setting"].startswith("chain") and _depth(row["setting"]) <= k]
  auto = next(row for row in rows if row["setting"].startswith("tree=auto"))
  folds = []
  for pick, measure in (halves, halves[::-1]):
    chosen = max(chains, key=lambda row: _half_rate(row, pick))
    folds.append({"chain": chosen["setting"],
                  "auto_over_chain": _half_rate(auto, measure) / _half_rate(chosen, measure)})
  spread = {row["setting"]: _half_rate(row, halves[0]) / _half_rate(row, halves[1]) for row in rows}
  return {"folds": folds, "mean": sum(f["auto_over_chain"] for f in folds) / 2,
          "half_to_half": spread,
          "max_half_to_half_deviation": max(abs(1 - v) for v in spread.values())}


def report(r: dict) -> tuple:
  """The record with its comparisons, and its markdown: tree=auto against the best chain
  of any depth timed and against the best chain of depth <= k (what auto could choose)."""
  rows = r["rows"]
  base = rows[0]["tokens_per_s"]
  chains = [row for row in rows if row["setting"].startswith("chain")]
  top = max(chains, key=lambda row: row["tokens_per_s"])
  top_k = max((row for row in chains if _depth(row["setting"]) <= r["k"]),
              key=lambda row: row["tokens_per_s"])
  auto = next((row for row in rows if row["setting"].startswith("tree=auto")), None)
  r = {**r, "best_chain": top["setting"], "best_chain_within_k": top_k["setting"]}
  if auto:
    r.update(auto_over_best_chain=auto["tokens_per_s"] / top["tokens_per_s"],
             auto_over_best_chain_within_k=auto["tokens_per_s"] / top_k["tokens_per_s"])
  lines = ["| setting | tokens/s | x target | tokens per pass | same tokens as target |",
           "|---|---|---|---|---|"]
  for row in rows:
    lines.append(f"| {row['setting']} | {row['tokens_per_s']:.1f} | "
                 f"{row['tokens_per_s'] / base:.2f} | {row['tokens_per_pass']:.2f} | "
                 f"{row['same_tokens_as_target']} |")
  setup = (f"{r['prompts']} prompts of {r['prompt_source']!r} (one per category), batch 1, "
            f"{r['max_new']} greedy new tokens, fastest of {r.get('repeats', 2)}; drafter "
            f"{r['draft']!r}.")
  if auto:
    lines += ["", f"tree='auto' chose {r['auto_tree']} (calibration and cost measurement "
              f"{r['calibration_s']:.0f} s, once per process); tree=auto / best chain of depth "
              f"<= {r['k']} ({top_k['setting']}): {r['auto_over_best_chain_within_k']:.2f}x; / "
              f"best chain timed ({top['setting']}): {r['auto_over_best_chain']:.2f}x. " + setup]
  else:
    lines += ["", f"tree='auto' not measured: this record was written before its calibration "
              f"(--auto_last). Best chain timed: {top['setting']}. " + setup]
  cv = cross_validated(rows, r["k"]) if auto else None
  if cv:
    r["cross_validated"] = cv
    folds = "; ".join(f"{f['chain']} chosen on one half, {f['auto_over_chain']:.2f}x on the other"
                      for f in cv["folds"])
    lines += ["", f"Cross-validated (best chain of depth <= {r['k']} chosen on the even rounds, "
              f"measured on the odd, and the other way): tree=auto / that chain {cv['mean']:.2f}x "
              f"({folds}). The same setting's two halves differ by up to "
              f"{100 * cv['max_half_to_half_deviation']:.0f}%."]
  return r, "\n".join(lines)
