"""k = "auto": the number of drafted tokens per round for the batch at hand, or none.

Axes: k drafted tokens per round, B batch rows, N new tokens per row.

`choose_k` predicts, for each k of `loop_costs.K_PROBES`, the speedup over the target
alone of this call (`predicted_speedup`):

    (P_0 + (N - 1) * s_0) / (P_k + I_k(B, N) * r_k)

from the loop's own costs at this batch (prefill P, seconds per loop iteration s_0 / r_k,
timed inside the compiled loop: `specjax.tune.loop_costs`) and the iterations I_k a batch
of B rows needs (its slowest row: `specjax.tune.acceptance`, from the drafter's per-row
acceptance). It takes the best k, or the target alone (k = 0) when no k reaches
`MIN_GAIN`, and says which. Both are kept in the cost store (`specjax.tune.store`): the
loop's costs are measured once per machine and batch bucket, the acceptance on the first
calls' own prompts until `calibration_rows` rows are stored; later calls and processes
read them.

The pass-cost model below (c(T) of isolated passes, `pass_costs`, `draft_step_cost`,
`expected_speedups`) is what tree="auto" ranks trees with (`specjax.tune.tree`):

    expected_speedup(k) = tokens_per_pass(k) * c(1) / (c(k + 1) + k * c_draft)
    tokens_per_pass(k)  = 1 + sum_{j <= k} prod_{i <= j} a_i
"""
from __future__ import annotations

import sys
import time
from typing import Optional, Sequence

import numpy as np

from specjax.tune import acceptance as accept_lib
from specjax.tune import costs, loop_costs, store

K_MAX = 8  # the deepest chain the pass-cost tables cover (tree="auto")
CALIBRATION_TOKENS = 32  # new tokens of the acceptance calibration run
# Calls measure the drafter's acceptance on their own prompts until the store holds this
# many rows, or the call's batch size if larger (`calibration_rows`): at batch 1 one
# prompt's acceptance stood for every later prompt, and once it chose the target alone
# nothing corrected it (`record` learns only from speculative runs); one evaluation
# prompt's first-draft acceptance of 0.17 against 0.49 over four had the tuner predict
# 0.88x for a k that ran at 1.14x. A batch's rounds are its slowest row's, and the slowest
# of B rows drawn from fewer calibration rows is too fast: 26.5 rounds predicted at batch 16
# from 10 rows, 29 measured (experiments/batch/).
MIN_CALIBRATION_ROWS = 4
MIN_GAIN = 1.05  # a k pays when its predicted speedup reaches this (the margin covers
# the prediction's error: experiments/batch/)


def calibration_rows(batch: int) -> int:
  """The rows of measured acceptance a call at `batch` rows wants in the store."""
  return min(max(MIN_CALIBRATION_ROWS, int(batch)), accept_lib.MAX_ROWS)


def tokens_per_pass(acceptance: Sequence[float], k: int) -> float:
  """Expected tokens per verify round at k from per-position acceptance a_1..a_k."""
  total, reach = 1.0, 1.0
  for a in list(acceptance)[:k]:
    reach *= a
    total += reach
  return total


def expected_speedups(costs: dict, c_draft: float, acceptance: Sequence[float],
                      ks: Sequence[int]) -> dict:
  """{k: tokens_per_pass(k) * c(1) / (c(k+1) + k * c_draft)} for the ks that costs cover."""
  return {k: tokens_per_pass(acceptance, k) * costs[1] / (costs[k + 1] + k * c_draft)
          for k in ks if (k + 1) in costs}


def smooth_costs(costs: dict) -> dict:
  """c(T) with the multi-token passes (T >= 2) replaced by their least-squares line in T.

  A pass of T >= 2 tokens costs a fixed part plus a part growing with T (the probe of
  experiments/pass_cost); single timings of neighbouring T scatter by 10-30% on a shared
  CPU, enough to flip the argmax between neighbouring k. c(1) (XLA's matrix-vector path)
  is kept as measured."""
  ts = np.array(sorted(t for t in costs if t >= 2), float)
  if len(ts) < 3:
    return dict(costs)
  slope, icept = np.polyfit(ts, np.array([costs[int(t)] for t in ts]), 1)
  slope = max(float(slope), 0.0)
  return {1: costs[1], **{int(t): max(icept + slope * t, costs[1]) for t in ts}}


def _context_bucket(n: int) -> int:
  """Costs are kept per power-of-two context length (attention reads the live window)."""
  return 1 << (max(n, 1) - 1).bit_length()


def _dtype(target) -> str:
  return str(target.params["embed"].dtype)


def pass_costs(target, context_len: int, max_len: int, ts: Sequence[int]) -> dict:
  """{T: seconds} of one cached target pass, from the cost table (measured when missing)."""
  key = store.key(getattr(target, "name", ""), target.cfg, _dtype(target), _context_bucket(context_len),
                  tuple(ts))

  def make():
    ks = [t - 1 for t in ts if t > 1]
    r = costs.target_costs(target, context_len, max_len, ks, n=3, repeats=3)
    return {"1": r["step"], **{str(k + 1): v for k, v in r["verify"].items()}}

  return {int(t): float(s) for t, s in store.cached("target", key, make).items()}


def draft_step_cost(target, drafter, context_len: int, max_len: int, temperature: float) -> float:
  """Seconds per draft step of `drafter` (one propose of K_MAX steps / K_MAX), cached."""
  ident = (type(drafter).__name__, drafter.name, drafter.caps)  # what it reads changes its cost
  key = store.key(getattr(target, "name", ""), target.cfg, _dtype(target), ident, _context_bucket(context_len),
                  temperature > 0)
  make = lambda: costs.draft_cost(target, drafter, K_MAX, context_len, max_len,
                                  temperature=temperature, n=3, repeats=3) / K_MAX
  return float(store.cached("draft", key, make))


def predicted_speedup(alone: dict, spec: dict, rounds: float, new_tokens: int) -> float:
  """The target alone's time over the speculative run's, for rows of `new_tokens`:

      (P_0 + (N - 1) * s_0) / (P_k + I_k * r_k)

  P: prefill seconds; s_0: a target-alone loop iteration (one token per row); r_k: a
  speculative loop iteration at k (both `loop_costs.per_iteration`, timed inside the loop);
  I_k: the iterations the batch needs (`accept_lib.expected_rounds`, its slowest row)."""
  t_alone = alone["prefill_s"] + (new_tokens - 1) * alone["round_s"]
  t_spec = spec["prefill_s"] + rounds * spec["round_s"]
  return float(t_alone / t_spec) if t_spec > 0 else float("inf")


def choose(table: dict, rounds: dict, new_tokens: int, batch: int,
           min_gain: Optional[float] = None) -> dict:
  """The k of `rounds` ({k: expected iterations}) with the best predicted speedup over the
  target alone (`table`: `loop_costs.measure`'s {str(k): costs}, "0" the target alone), or
  k = 0 (the target alone) when none reaches `min_gain`.
  -> {"k", "best_k", "predicted" (of the choice; 1.0 for the target alone),
      "predicted_speedup": {k: x}, "batch", "note"}."""
  predicted = {int(k): predicted_speedup(table["0"], table[str(k)], r, new_tokens)
               for k, r in rounds.items()}
  best = max(predicted, key=predicted.get)
  if predicted[best] >= (MIN_GAIN if min_gain is None else min_gain):
    k, note = best, f"k={best} at batch {batch} (predicted {predicted[best]:.2f}x the target alone)"
  else:
    k, note = 0, (f"target alone: no k pays at batch {batch} (predicted {predicted[best]:.2f}"
                  f" at best, k={best})")
  return {"k": k, "best_k": best, "predicted": predicted[best] if k else 1.0,
          "predicted_speedup": predicted, "batch": batch, "note": note}


def drafter_id(drafter) -> tuple:
  """What names a drafter in the store: its class, name and weights' content."""
  return (type(drafter).__name__, drafter.name, store.fingerprint(drafter))


def choose_k(target, drafter, prompts: list, max_new_tokens: int, sampling, run,
             log: bool = True) -> dict:
  """k for this batch and these prompts, or 0 (the target alone) when no k pays.

  run(prompts, max_new_tokens, k) -> SpecStats: the caller's generation (k = 0: the target
  alone). Two things are measured and kept in the cost store: the drafter's per-row
  acceptance at k = max(K_PROBES) (`CALIBRATION_TOKENS` on the first callers' prompts,
  until `calibration_rows` rows are in; keyed by target, drafter and sampling) and, once,
  the loop's costs at this batch bucket and prompt class (`loop_costs`). Returns `choose`'s fields and
  "acceptance" (pooled, by position), "rounds" ({k: expected iterations}), "costs",
  "calibration_s" (seconds this call spent measuring: 0 when both were stored)."""
  start, measured = time.perf_counter(), []
  ks = loop_costs.K_PROBES
  ident = drafter_id(drafter)
  model = (getattr(target, "name", ""), target.cfg, _dtype(target))

  def calibrate():
    measured.append(True)
    n = min(max_new_tokens, CALIBRATION_TOKENS)
    return accept_lib.row_counts(run(prompts, n, max(ks)), max(ks))

  accept_key = store.key("acceptance", *model, ident, sampling)
  counts = store.get("acceptance", accept_key)
  if counts is None or len(counts["checked"]) < calibration_rows(len(prompts)):
    counts = calibrate() if counts is None else accept_lib.merged(counts, calibrate())
    store.put("acceptance", accept_key, counts)
  longest = max(len(p) for p in prompts)
  table, cost_s = loop_costs.loop_costs(
      loop_costs.key(target, ident, sampling.temperature == 0, len(prompts), longest, ks),
      lambda k, n: run(prompts, n, k), ks)
  rates = accept_lib.row_rates(counts)
  rounds = {k: accept_lib.expected_rounds(rates, k, len(prompts), max_new_tokens) for k in ks}
  choice = choose(table, rounds, max_new_tokens, len(prompts))
  spent = (time.perf_counter() - start) if (measured or cost_s) else 0.0
  choice.update(acceptance=accept_lib.pooled_rates(counts), rounds=rounds, costs=table,
                calibration_s=spent, acceptance_key=accept_key)
  if log:
    shown = ", ".join(f"{k}: {x:.2f}" for k, x in choice["predicted_speedup"].items())
    where = f"measured now in {spent:.1f} s" if spent else "from the cost store"
    print(f"specjax: k=auto: {choice['note']}; predicted speedup by k {shown} "
          f"(loop costs at batch bucket {loop_costs.batch_bucket(len(prompts))}, {where})",
          file=sys.stderr, flush=True)
  return choice


def record(choice: dict, stats) -> None:
  """Adds a speculative run's per-row counters (at the chosen k) to the stored acceptance
  that `choice` was made from: later choices see more prompts, at no extra cost."""
  if not choice.get("k"):
    return
  counts = store.get("acceptance", choice["acceptance_key"])
  if counts:
    store.put("acceptance", choice["acceptance_key"],
              accept_lib.merged(counts, accept_lib.row_counts(stats, choice["k"])))
