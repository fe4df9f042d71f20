"""k = "auto": the number of drafted tokens per round, chosen from measured costs.

Axes: k drafted tokens per round, T = k + 1 tokens per verify pass.

    expected_speedup(k) = tokens_per_pass(k) * c(1) / (c(k + 1) + k * c_draft)
    tokens_per_pass(k)  = 1 + sum_{j <= k} prod_{i <= j} a_i

c(T): seconds of one cached target pass over T tokens, measured on this machine (T >= 2
smoothed by a line in T, `smooth_costs`) and kept in a cost table per machine, model and
cost-model version in the cost store (`specjax.tune.store`, under the cache root); c_draft: seconds of one draft step (one `propose` at
K_MAX over K_MAX), cached the same way per drafter; a_i: the per-position acceptance
P(position i accepted | reached), from a short calibration run at k = K_MAX on the
caller's own prompts and settings.
"""
from __future__ import annotations

import sys
from typing import Optional, Sequence

import numpy as np

from specjax.tune import costs, store

K_MAX = 8
CALIBRATION_TOKENS = 32


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


def acceptance_from_stats(stats, k: int) -> list:
  """Per-position acceptance a_1..a_k from a run's counters, for the model of
  `tokens_per_pass`: an unreached position gets the rate of the one before it (or 0)."""
  checked = np.asarray(stats.checked).sum(0)
  accepted = np.asarray(stats.accepted).sum(0)
  out, last = [], 0.0
  for i in range(k):
    last = float(accepted[i] / checked[i]) if checked[i] else last
    out.append(last)
  return out


def choose_k(target, drafter, calibrate, context_len: int, max_len: int, temperature: float,
             k_max: int = K_MAX, log=True) -> dict:
  """Picks k in 1..k_max. `calibrate(k)` runs the caller's generation at k and returns its
  stats. Returns {"k", "expected_speedup": {k: x}, "acceptance", "costs", "c_draft"}."""
  stats = calibrate(k_max)
  acceptance = acceptance_from_stats(stats, k_max)
  measured = pass_costs(target, context_len, max_len, range(1, k_max + 2))
  table = smooth_costs(measured)
  c_draft = draft_step_cost(target, drafter, context_len, max_len, temperature)
  speedups = expected_speedups(table, c_draft, acceptance, range(1, k_max + 1))
  k = max(speedups, key=speedups.get)
  choice = {"k": int(k), "expected_speedup": speedups, "acceptance": acceptance,
            "costs": table, "measured_costs": measured, "c_draft": c_draft}
  measured_acceptance = stats.per_position_acceptance[:k_max]  # None where never reached
  choice["measured_acceptance"] = measured_acceptance
  if log:
    shown = " ".join("-" if a is None else f"{a:.2f}" for a in measured_acceptance)
    print(f"specjax: k=auto chose k={k} (expected speedup {speedups[k]:.2f}x; "
          f"c(k+1)/c(1) = {table[k + 1] / table[1]:.2f}, draft step {c_draft / table[1]:.3f} "
          f"of c(1), acceptance by position {shown}, '-' never reached)",
          file=sys.stderr, flush=True)
  return choice
