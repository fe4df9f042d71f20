"""Per-row acceptance of a drafter, measured until enough rows are kept, and the rounds a
batch needs.

Axes: R calibration rows, k draft positions, S simulated batches, B batch rows, M rounds.

A batch's loop runs until its slowest row is done (`decoding.loop`: finished rows ride
along in the fixed-shape rounds), so the rounds a batch costs are the maximum over its rows
of each row's rounds, not the mean: at batch 32 a few slow rows set the time. The rows'
acceptance differs from prompt to prompt, so `expected_rounds` draws the batch's rows from
the calibration's rows (each row's per-position acceptance, shrunk toward the pooled rate
where it saw few drafts) and simulates their rounds.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

PRIOR = 2.0  # pseudo-counts of the pooled rate added to each row's per-position counts
POSITION_PRIOR = 10.0  # ... of the all-position rate added to each position's pooled counts
MAX_ROWS = 256  # calibration rows kept (the newest)
MAX_DRAWS = 4_000_000  # uniforms drawn per simulation (S is cut to fit)


def row_counts(stats, k: int) -> dict:
  """{"checked": [R][k], "accepted": [R][k]}: a run's per-row counters, first k positions."""
  return {"checked": np.asarray(stats.checked)[:, :k].astype(int).tolist(),
          "accepted": np.asarray(stats.accepted)[:, :k].astype(int).tolist()}


def merged(counts: dict, new: dict, max_rows: int = MAX_ROWS) -> dict:
  """`counts` with the rows of `new` (a later run's `row_counts`, maybe at a smaller k:
  its missing positions count as never reached) appended; the newest `max_rows` kept."""
  width = len(counts["checked"][0])
  pad = lambda rows: [list(r)[:width] + [0] * (width - len(r)) for r in rows]
  return {name: (list(counts[name]) + pad(new[name]))[-max_rows:] for name in ("checked", "accepted")}


def row_rates(counts: dict, prior: float = PRIOR, position_prior: float = POSITION_PRIOR) -> np.ndarray:
  """[R, k] per-row P(position i accepted | reached), shrunk twice: each position's pooled
  rate toward the rate over all positions (`position_prior` pseudo-counts: a calibration of
  32 tokens reaches deep positions a handful of times, and a draft's acceptance is nearly
  flat in the position), then each row's toward its position's ((accepted + prior *
  pooled) / (checked + prior)). Nothing measured at all: 0."""
  checked = np.asarray(counts["checked"], float)  # [R, k]
  accepted = np.asarray(counts["accepted"], float)
  tot_c, tot_a = checked.sum(0), accepted.sum(0)  # [k]
  alpha = tot_a.sum() / tot_c.sum() if tot_c.sum() else 0.0
  pooled = (tot_a + position_prior * alpha) / (tot_c + position_prior)  # [k]
  return (accepted + prior * pooled) / (checked + prior)


def pooled_rates(counts: dict) -> list:
  """[k] P(position i accepted | reached) over all rows (None where never reached)."""
  c = np.asarray(counts["checked"]).sum(0)
  a = np.asarray(counts["accepted"]).sum(0)
  return [float(x / y) if y else None for x, y in zip(a, c)]


def tokens_per_round(rates: Sequence[float], k: int) -> float:
  """Expected tokens one round keeps: 1 + sum_j prod_{i <= j} a_i (no cut)."""
  total, reach = 1.0, 1.0
  for a in list(rates)[:k]:
    reach *= a
    total += reach
  return total


def expected_rounds(rates: np.ndarray, k: int, batch: int, new_tokens: int, sims: int = 256,
                    seed: int = 0) -> float:
  """Mean over simulated batches of max over the batch's rows of the rounds a row needs for
  `new_tokens` (the first comes from the prefill). Rows are drawn with replacement from
  `rates` [R, >= k]; a round keeps 1 + the run of leading accepted drafts."""
  need = max(int(new_tokens) - 1, 0)
  if need == 0:
    return 0.0
  rates = np.asarray(rates, float)[:, :k]  # [R, k]
  rng = np.random.default_rng(seed)
  s = int(max(8, min(sims, MAX_DRAWS // max(1, batch * need * k))))
  rows = rng.integers(0, len(rates), size=(s, batch))  # [S, B]
  p = rates[rows][:, :, None, :]  # [S, B, 1, k]
  ok = rng.random((s, batch, need, k)) < p  # [S, B, M, k]
  kept = 1 + np.cumprod(ok, axis=-1).sum(-1)  # [S, B, M] tokens per round
  done = np.cumsum(kept, axis=-1) >= need  # [S, B, M]
  rounds = done.argmax(-1) + 1  # [S, B] (round M always reaches need: >= 1 token each)
  return float(rounds.max(-1).mean())
