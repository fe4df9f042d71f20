"""What greedy speculation must count, round by round, in plain Python.

Greedy verification keeps the longest prefix of the drafts that equals the target's own
greedy text, so given that text (`stub_model.reference_greedy`) and what a drafter
proposes from the final tokens alone, every round is determined: its accepted drafts,
the sibling rank of each accepted tree node, and the tokens it keeps before EOS or
max_new_tokens cut it. Comparing `path_lengths` and `rank_hits` with these catches a
drafter whose state drifts from the final tokens (a draft cache not rolled back, an
early-exit view left stale, a wrong n-gram match): such a drafter still gives the
target's tokens (verification is exact) but fewer or other accepts.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def ranked(logits: np.ndarray) -> list:
  """Token ids by falling logit, ties to the lower id (`jax.lax.top_k`'s order)."""
  return sorted(range(len(logits)), key=lambda v: (-logits[v], v))


def ngram_proposal(ids: Sequence[int], max_n: int, k: int) -> list:
  """Prompt lookup: the continuation of the latest earlier match of the longest suffix of
  up to max_n tokens (repeating with the match's period where it runs into the end),
  else the last token k times."""
  n = len(ids)
  for size in range(max_n, 0, -1):
    if n < size:
      continue
    tail = list(ids[n - size:])
    starts = [j for j in range(n - size) if list(ids[j:j + size]) == tail]
    if starts:
      cont = starts[-1] + size
      return [ids[cont + i % (n - cont)] for i in range(k)]
  return [ids[-1]] * k


def expected_counts(prompt: Sequence[int], new: Sequence[int], branching: Sequence[int],
                    children: Callable[[list, int], list]) -> tuple:
  """(path_lengths [k + 1], rank_hits [k, R]) of one row's greedy run.

  new: the row's new tokens (the target's greedy text, cut by EOS / max_new_tokens).
  branching: children per node at each depth (a chain: k ones), R = max(branching).
  children(ids, d): the candidates for depth d after the final text `ids` plus the path
  so far, best first (at least branching[d - 1] of them).
  """
  k = len(branching)
  paths, ranks = np.zeros(k + 1, int), np.zeros((k, max(branching)), int)
  text, done = list(prompt) + list(new), 1  # the prefill gave new[0]
  while done < len(new):
    n = len(prompt) + done  # final tokens before this round
    n_acc, hit = 0, []
    for d in range(1, k + 1):
      cands = children(text[:n + d - 1], d)[:branching[d - 1]]
      if text[n + d - 1] not in cands:  # the target's token at this depth
        break
      n_acc, hit = d, hit + [cands.index(text[n + d - 1])]
      if n + d >= len(text):  # the text ends here: nothing to compare further on
        break
    kept = min(n_acc + 1, len(new) - done)
    paths[min(n_acc, kept)] += 1
    for i, r in enumerate(hit[:min(n_acc, kept)]):
      ranks[i, r] += 1
    done += kept
  return paths, ranks


def model_children(logits_of_ids: Callable[[list], np.ndarray]) -> Callable:
  """`children` of a draft model: its top-ranked tokens after the text."""
  return lambda ids, d: ranked(logits_of_ids(ids))


def ngram_children(max_n: int, k: int) -> Callable:
  """`children` of prompt lookup (a chain): depth d's token of the proposal made from the
  round's final text. The proposal depends on the final tokens only, so it is made
  once per round: from the text without the path's d - 1 tokens."""
  return lambda ids, d: [ngram_proposal(ids[:len(ids) - (d - 1)], max_n, k)[d - 1]]


def assert_counts(out, prompts, branching, children) -> None:
  """path_lengths and rank_hits of `out` equal `expected_counts` on every row."""
  for b, (prompt, new) in enumerate(zip(prompts, out.tokens)):
    paths, ranks = expected_counts(prompt, new, branching, children)
    got_paths = out.stats.path_lengths[b]
    got_ranks = out.stats.rank_hits[b]
    assert got_paths.tolist() == paths.tolist(), (b, got_paths.tolist(), paths.tolist())
    assert got_ranks.tolist() == ranks.tolist(), (b, got_ranks.tolist(), ranks.tolist())
