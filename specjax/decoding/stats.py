"""Run statistics of a (speculative) generation, per row and per run.

Axes: B batch rows, k draft positions per round.

A round drafts k tokens d_1..d_k; verification accepts a prefix of n_acc of them and
adds the target's own token, giving n_acc + 1 candidate tokens of which the row keeps
`kept` (fewer when EOS or max_new_tokens cuts the candidates: the row ends there).
Every field is defined here once, from kept tokens only (a cut draft was never emitted,
so it is neither checked nor accepted nor on a counted path). Counters, per row:

  new_tokens[b]      tokens generated: the prefill's token plus every kept token.
  target_passes[b]   target forward passes: 1 (prefill) + rounds.
  draft_passes[b]    drafter forward passes (k per round for a draft model, 0 for lookup).
  rounds[b]          verify passes, one per round while the row is unfinished.
  checked[b, i]      rounds in which draft position i (0-based) was reached by
                     verification (all earlier drafts accepted) and kept: i < kept.
  accepted[b, i]     rounds in which draft position i was accepted and kept:
                     i < min(n_acc, kept).
  path_lengths[b, n] rounds that kept n accepted drafts (n = min(n_acc, kept)).
  rank_hits[b, i, r] rounds whose kept accepted node at depth i + 1 was its parent's
                     r-th child (a chain has rank 0 only).

Run totals (`to_dict`): drafted = draft nodes the target verified (nodes_per_round per
round: k for a chain, the tree's nodes, a drafter's own pass's); verify_passes = rounds
with a drafter, 0 for the target alone. Identities, asserted in tests/stub/test_stats_stub.py:
accepted = sum_n n * path_lengths[n]; sum_n path_lengths[n] = verify_passes; a chain's
per_rank_acceptance[i][0] = per_position_acceptance[i]; a position never reached is None.

Derived: alpha (acceptance rate) = accepted / checked, summed over positions (and rows
for the run), the estimate of the per-token acceptance probability;
tokens_per_pass = (new_tokens - 1) / rounds, the tokens each verify pass added after
the prefill's token, per row and for the run (sums of both). Every round but a row's
last keeps all n_acc + 1 candidates, so new_tokens - 1 = accepted + rounds, minus 1
when the last round was cut. For i.i.d. acceptance with rate alpha a round yields
(1 - alpha^(k+1)) / (1 - alpha) tokens on average (the closed form); at k = 1 the
two agree by construction (up to a cut last round), so only k >= 2 tests the model.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np


def expected_tokens_per_pass(alpha: float, k: int) -> float:
  """Closed form (1 - alpha^(k+1)) / (1 - alpha): mean tokens per target pass."""
  if alpha >= 1.0:
    return float(k + 1)
  return float((1.0 - alpha ** (k + 1)) / (1.0 - alpha))


@dataclasses.dataclass
class SpecStats:
  """Counters of one run; all per-row arrays are numpy [B] or [B, k]."""
  k: int
  new_tokens: np.ndarray  # [B] tokens generated per row (the prefill's token included)
  target_passes: np.ndarray  # [B] target forward passes, prefill included
  draft_passes: np.ndarray  # [B] drafter forward passes
  rounds: np.ndarray  # [B] verify passes (target passes after prefill)
  checked: np.ndarray  # [B, k] draft position i reached by verification and kept
  accepted: np.ndarray  # [B, k] draft position i accepted and kept
  wall_time_s: float = 0.0  # device run time, compile excluded
  prefill_time_s: float = 0.0  # ... of it the prefill (the prompt's pass, the drafter's init)
  compile_time_s: float = 0.0  # lower + compile of this call's programs (0: reused)
  compiled_programs: int = 0  # programs this call built (0: the in-process table had them)
  programs_from_disk: int = 0  # ... of them loaded from jax's persistent compilation cache
  path_lengths: Optional[np.ndarray] = None  # [B, k+1] rounds that accepted n drafts
  rank_hits: Optional[np.ndarray] = None  # [B, k, R] accepted node at depth i+1 had rank r
  nodes_per_round: int = 0  # draft nodes verified per round (k for a chain)
  tree: Optional[str] = None  # the token tree, None for a chain

  @property
  def speculative(self) -> bool:
    return self.k > 0

  @property
  def per_rank_acceptance(self) -> Optional[list]:
    """[k][R]: P(the r-th child is accepted | its depth was reached and ranks < r were
    rejected), over the run (None where never tried)."""
    if self.rank_hits is None:
      return None
    hits = self.rank_hits.sum(0).astype(float)  # [k, R]
    tried = self.checked.sum(0)[:, None] - np.cumsum(hits, axis=1) + hits
    return [[float(h / t) if t else None for h, t in zip(hr, tr)] for hr, tr in zip(hits, tried)]

  @property
  def acceptance_rate(self) -> float:
    checked = self.checked.sum()
    return float(self.accepted.sum() / checked) if checked else float("nan")

  @property
  def per_position_acceptance(self) -> list:
    """P(position i accepted | reached), over the run (None where never reached)."""
    c, a = self.checked.sum(0), self.accepted.sum(0)
    return [float(x / y) if y else None for x, y in zip(a, c)]

  @property
  def tokens_per_pass(self) -> float:
    """Tokens generated after the prefill's token per verify pass, over the run."""
    rounds = self.rounds.sum()
    return float((self.new_tokens - 1).sum() / rounds) if rounds else float("nan")

  @property
  def closed_form_tokens_per_pass(self) -> Optional[float]:
    a = self.acceptance_rate
    return None if np.isnan(a) else expected_tokens_per_pass(a, self.k)

  @property
  def tokens_per_s(self) -> float:
    return float(self.new_tokens.sum() / self.wall_time_s) if self.wall_time_s else float("nan")

  def row(self, b: int) -> dict:
    checked, accepted = int(self.checked[b].sum()), int(self.accepted[b].sum())
    return {"new_tokens": int(self.new_tokens[b]), "target_passes": int(self.target_passes[b]),
            "draft_passes": int(self.draft_passes[b]), "rounds": int(self.rounds[b]),
            "acceptance_rate": accepted / checked if checked else None,
            "tokens_per_pass": (int(self.new_tokens[b]) - 1) / int(self.rounds[b])
                               if self.rounds[b] else None}

  def to_dict(self, per_row: bool = False) -> dict:
    rounds = int(self.rounds.sum()) if self.speculative else 0
    d = {"k": self.k, "new_tokens": int(self.new_tokens.sum()),
         "target_passes": int(self.target_passes.sum()),
         "draft_passes": int(self.draft_passes.sum()), "verify_passes": rounds,
         "drafted": int(self.nodes_per_round * rounds), "checked": int(self.checked.sum()),
         "accepted": int(self.accepted.sum()), "acceptance_rate": _nan_none(self.acceptance_rate),
         "per_position_acceptance": self.per_position_acceptance,
         "tokens_per_pass": _nan_none(self.tokens_per_pass),
         "closed_form_tokens_per_pass": self.closed_form_tokens_per_pass,
         "wall_time_s": self.wall_time_s, "prefill_time_s": self.prefill_time_s,
         "compile_time_s": self.compile_time_s, "compiled_programs": self.compiled_programs,
         "programs_from_disk": self.programs_from_disk,
         "tokens_per_s": _nan_none(self.tokens_per_s), "tree": self.tree,
         "nodes_per_round": self.nodes_per_round}
    if self.path_lengths is not None:
      d["path_lengths"] = self.path_lengths.sum(0).tolist()
      d["per_rank_acceptance"] = self.per_rank_acceptance
    if per_row:
      d["rows"] = [self.row(b) for b in range(len(self.new_tokens))]
    return d


def _nan_none(x: float):
  return None if x != x else float(x)
