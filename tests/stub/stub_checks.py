"""Checks shared by the stub tier: the run statistics' identities (`specjax.decoding.stats`).

Every counter is defined from kept tokens, so on any run, cut by EOS or max_new_tokens
or not, per row b:

  new_tokens = len(tokens);  target_passes = 1 + rounds;  draft_passes = per round x rounds
  sum_n path_lengths[n] = rounds;  sum_n n path_lengths[n] = sum_i accepted[i]
  new_tokens - 1 = rounds + sum_i accepted[i], less 1 where the last round was cut
  accepted[i] <= checked[i];  checked[i + 1] <= accepted[i] (reached only past an accept)
  sum_r rank_hits[i, r] = accepted[i]
"""
from __future__ import annotations

import numpy as np


def check_counters(out, passes_per_round: int = 0) -> None:
  """Asserts the identities above on a `GenerationResult`."""
  s = out.stats
  new = np.array([len(t) for t in out.tokens])
  accepted = s.accepted.sum(1)  # [B]
  assert s.new_tokens.tolist() == new.tolist()
  assert (s.target_passes == 1 + s.rounds).all()
  assert (s.draft_passes == passes_per_round * s.rounds).all()
  hist = s.path_lengths  # [B, r + 1]
  assert (hist.sum(1) == s.rounds).all()
  assert ((hist * np.arange(hist.shape[1])).sum(1) == accepted).all()
  assert set((new - 1 - s.rounds - accepted).tolist()) <= {0, -1}
  assert (s.accepted <= s.checked).all()
  assert (s.checked[:, 1:] <= s.accepted[:, :-1]).all()
  assert (s.rank_hits.sum(2) == s.accepted).all()


def partial_rounds(out) -> dict:
  """Rounds of the run by how many drafts they kept: {"none", "some", "all"} -> count,
  where "some" is 0 < n < the drafts a round can keep."""
  hist = out.stats.path_lengths.sum(0)  # [r + 1]
  return {"none": int(hist[0]), "some": int(hist[1:-1].sum()), "all": int(hist[-1])}


def rows_cut_inside_drafts(out) -> int:
  """Rows whose last round EOS or max_new_tokens cut among its accepted drafts (the
  round kept fewer tokens than it accepted + 1: new_tokens - 1 = rounds + accepted - 1)."""
  s = out.stats
  new = np.array([len(t) for t in out.tokens])
  return int(np.sum(new - 1 - s.rounds - s.accepted.sum(1) == -1))
