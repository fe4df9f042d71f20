"""What a round costs inside the compiled loop, at the batch at hand, measured once and kept.

Isolated pass costs (`specjax.tune.costs`) understate a round inside the loop (the card
once predicted 1.16x from them and measured 0.91-0.99x): the loop also drafts, warps,
verifies, writes caches and counts, and the rows of a batch change what a pass costs. So
the costs here are timed from real runs of the loop itself: the target alone and each k
of `K_PROBES`, on the caller's prompts at the caller's batch size, for `COST_TOKENS` new
tokens, round-robin `REPEATS` times, each setting's fastest run kept (`measure`). Per setting:

    round_s   = (wall - prefill) / iterations   (iterations = the most rounds of a row)
    prefill_s = the prefill (the prompt's pass and the drafter's init; the fastest over
                the ks, which share it)

kept in the cost store (`specjax.tune.store`) under the machine, the target, the drafter
(by content), greedy or sampled, the batch bucket (powers of two) and the prompt class
(`prompt_class`: prompts up to 256 tokens share one): measured once there, on the first
caller's prompts, reused by every later call and process.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from specjax.decoding import plan as plan_lib
from specjax.tune import store

K_PROBES = (1, 2, 3, 4)  # the ks timed (and the ks k="auto" chooses among)
COST_TOKENS = 16  # new tokens of each timed run (short runs, several: see `measure`)
REPEATS = 3  # round-robins over the settings; each keeps its fastest run
VERSION = 5  # of what a stored loop cost means (raise it when that changes)


def batch_bucket(batch: int) -> int:
  """Costs are kept per power-of-two batch size (1, 2, 4, 8, ...)."""
  return 1 << (max(int(batch), 1) - 1).bit_length()


def prompt_class(longest_prompt: int) -> int:
  """Prompts are told apart coarsely, by powers of four of their bucket (at least 256):
  short prompts share one calibration; long ones, whose prefill and attention weigh more,
  get their own."""
  bucket, c = plan_lib.prompt_bucket(longest_prompt), 256
  while c < bucket:
    c *= 4
  return c


def per_iteration(stats) -> dict:
  """{"round_s", "prefill_s", "iterations"} of one run: the loop's seconds per iteration."""
  iterations = int(np.max(stats.rounds)) if np.size(stats.rounds) else 0
  loop_s = max(float(stats.wall_time_s) - float(stats.prefill_time_s), 0.0)
  return {"round_s": loop_s / max(iterations, 1), "prefill_s": float(stats.prefill_time_s),
          "iterations": iterations}


def measure(run: Callable[[int, int], object], ks: Sequence[int] = K_PROBES,
            repeats: int = REPEATS, tokens: int = COST_TOKENS) -> dict:
  """{str(k): {"round_s", "prefill_s", ...}} for k = 0 (the target alone) and each of `ks`.

  run(k, new_tokens) -> the run's SpecStats. Every program is first run for 2 tokens (it
  compiles, and its first execution pays one-off costs); then `repeats` round-robins over
  the settings of `tokens` new tokens each. On this shared CPU one run's seconds per
  iteration is bimodal (the same k=1 program timed 0.07 and 0.18 s a round minutes apart,
  as other jobs come and go), so each setting keeps its fastest run, and the ratios
  r_k / r_0 of those are smoothed by a line in k with a slope >= 0 (a deeper round never
  costs less) and floored at 1 (a speculative iteration holds a target pass). Prefill:
  the fastest seen (a drafter's does not depend on k)."""
  for k in (0, *ks):
    run(k, 2)
  best: dict = {}
  for _ in range(max(1, repeats)):
    for k in (0, *ks):
      r = per_iteration(run(k, tokens))
      if k not in best or r["round_s"] < best[k]["round_s"]:
        best[k] = {**r, "prefill_s": min(r["prefill_s"], best.get(k, r)["prefill_s"])}
  r0 = best[0]["round_s"]
  raw = {k: best[k]["round_s"] / max(r0, 1e-12) for k in ks}
  line = smooth_ratios(raw)
  prefill = min(best[k]["prefill_s"] for k in ks)
  out = {"0": best[0]}
  for k in ks:
    out[str(k)] = {"round_s": line[k] * r0, "prefill_s": prefill, "ratio": line[k],
                   "measured_ratio": raw[k]}
  return out


def smooth_ratios(raw: dict) -> dict:
  """{k: ratio} -> the least-squares line in k through them (slope at least 0; with one
  or two ks, as measured), floored at 1."""
  ks = sorted(raw)
  if len(ks) >= 3:
    slope, icept = np.polyfit(ks, [raw[k] for k in ks], 1)
    if slope < 0:
      slope, icept = 0.0, float(np.mean([raw[k] for k in ks]))
    raw = {k: icept + slope * k for k in ks}
  return {k: max(float(raw[k]), 1.0) for k in ks}


def key(target, drafter_id, greedy: bool, batch: int, longest_prompt: int,
        ks: Sequence[int] = K_PROBES) -> str:
  """The store key: machine (added by `store.key`), target, drafter, greedy, batch bucket,
  prompt class, the ks timed."""
  return store.key("loop", VERSION, getattr(target, "name", ""), target.cfg,
                   str(target.params["embed"].dtype), drafter_id, bool(greedy),
                   batch_bucket(batch), prompt_class(longest_prompt), tuple(ks))


def loop_costs(cost_key: str, run: Callable[[int, int], object],
               ks: Sequence[int] = K_PROBES) -> tuple[dict, float]:
  """(the costs for `cost_key`, seconds spent measuring them now: 0 when stored)."""
  start, measured = time.perf_counter(), []

  def make():
    measured.append(True)
    return measure(run, ks)

  value = store.cached("loop", cost_key, make)
  return value, (time.perf_counter() - start) if measured else 0.0
