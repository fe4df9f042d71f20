"""tree="auto": the static tree that maximises expected tokens per second, from measurement.

Axes: k depth, R sibling ranks.

A short calibration run with a wide tree measures a[d][r], the acceptance of the
r-th child at depth d + 1 given that its parent was reached and ranks < r were
rejected (`SpecStats.per_rank_acceptance`). For a static tree the expected tokens per
round are then

    E(tree) = 1 + sum over nodes of P(node), P(child) = P(parent) prod_{r'<r} (1 - a[d][r']) a[d][r]

(as Sequoia's positional acceptance model), and a round costs c_draft + c(N + 1), with
c(T) the target pass over T tokens and c_draft k draft steps (a tree's per-depth draft
passes over a few nodes each cost about as much on a small draft), both from k="auto"'s
cost tables (`auto_k.pass_costs`, `auto_k.draft_step_cost`): measured once per machine,
model and code, and cached. Sizes here span 2..65 tokens, where c(T) bends, so c(T) is
interpolated between the measured sizes (made non-decreasing) rather than fitted by
k="auto"'s line.
The chosen tree maximises E / cost over every non-increasing branching per depth that
the calibration tree covers, the chain (all ones) included.
"""
from __future__ import annotations

import itertools
from typing import Optional, Sequence

import numpy as np

from specjax.decoding import auto_k
from specjax.decoding.tree import TreeSpec

CALIBRATION = (4, 2, 2, 2, 1, 1, 1, 1)  # branching per depth of the calibration tree
MAX_NODES = 64


def expected_tokens(branching: Sequence[int], accept: Sequence[Sequence[Optional[float]]]) -> float:
  """E(tree) for a static tree `branching` (per depth) under per-depth/rank acceptance."""
  total, reach = 1.0, [1.0]  # reach: P(each node of the current depth is on the path)
  for d, b in enumerate(branching):
    a = [x or 0.0 for x in list(accept[d])[:b]] + [0.0] * max(0, b - len(accept[d]))
    child = []
    for r in range(b):
      p = a[r] * float(np.prod([1.0 - x for x in a[:r]]))
      child.append(p)
    reach = [pp * c for pp in reach for c in child]
    total += sum(reach)
  return total


def candidates(k: int, calibration: Sequence[int], max_nodes: int = MAX_NODES) -> list:
  """Non-increasing branching tuples within the calibration's per-depth widths."""
  out = []
  for b in itertools.product(*[range(1, c + 1) for c in calibration[:k]]):
    if any(b[i] < b[i + 1] for i in range(k - 1)):
      continue
    if TreeSpec.static(b).n_nodes <= max_nodes:
      out.append(tuple(b))
  return out


def choose(accept, pass_cost, draft_cost: float, k: int, calibration=None,
           max_nodes: int = MAX_NODES) -> tuple:
  """-> (branching, expected tokens per round, predicted tokens per second (relative)).

  pass_cost: T -> seconds of one target pass over T tokens.
  """
  calibration = calibration or _calibration(k)
  best = None
  for b in candidates(k, calibration, max_nodes):
    e = expected_tokens(b, accept)
    rate = e / (draft_cost + pass_cost(TreeSpec.static(b).n_nodes + 1))
    if best is None or rate > best[2]:
      best = (b, e, rate)
  return best


def _calibration(k: int) -> tuple:
  return tuple(CALIBRATION[d] if d < len(CALIBRATION) else 1 for d in range(k))


_CHOSEN: dict = {}


def auto_tree(target, drafter, k: int, prompts: list, sampling, max_new: int = 32,
              verbose: bool = True) -> TreeSpec:
  """Calibrates on (up to 4 of) `prompts`, measures c(T) and the draft, picks the tree."""
  from specjax.bench import costs
  from specjax.decoding.generate import generate
  # generate wraps the caller's draft in a new drafter object per call: key on what it
  # wraps (its weights' identity), so one process calibrates once per target/draft/k.
  weights = getattr(drafter, "params", None)
  key = (getattr(target, "name", id(target)), type(drafter).__name__, getattr(drafter, "name", ""),
         getattr(drafter, "n", None), getattr(drafter, "n_layers", None),
         id(weights) if weights is not None else None, k, sampling)
  if key in _CHOSEN:
    return _CHOSEN[key]
  calib = TreeSpec.static(_calibration(k))
  out = generate(target, prompts[:4], max_new, draft=drafter, k=k, tree=calib,
                 temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
  accept = out.stats.per_rank_acceptance
  context = max(8, min(len(p) for p in prompts[:4]))
  max_len = costs.cache_len(context, max_new, MAX_NODES)
  sizes = sorted({1, 2, 4, 8, 16, 32, MAX_NODES + 1, k + 1})
  measured = auto_k.pass_costs(target, context, max_len, sizes)
  ts = np.array(sizes, float)
  cs = np.maximum.accumulate([measured[t] for t in sizes])  # a larger pass never costs less
  c_draft = k * auto_k.draft_step_cost(target, drafter, context, max_len, sampling.temperature)
  branching, e, rate = choose(accept, lambda t: float(np.interp(t, ts, cs)), c_draft, k)
  chain_rate = expected_tokens((1,) * k, accept) / (c_draft + float(np.interp(k + 1, ts, cs)))
  spec = TreeSpec.static(branching)
  if verbose:
    print(f"tree='auto': static:{','.join(map(str, branching))} ({spec.n_nodes} nodes), expected "
          f"{e:.2f} tokens per pass, predicted {rate / chain_rate:.2f}x the chain's tokens/s "
          f"(c(T)/c(1) at T = {spec.n_nodes + 1}: "
          f"{float(np.interp(spec.n_nodes + 1, ts, cs)) / cs[0]:.2f})", flush=True)
  _CHOSEN[key] = spec
  return spec
