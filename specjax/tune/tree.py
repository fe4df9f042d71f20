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
the calibration tree covers, at every depth from 1 to k (k is the deepest tree
considered; a shallower tree drafts fewer steps), the chains (all ones) included: on a
machine where the best chain is shorter than k, the choice can be that chain.

The model leaves out what a round costs beyond the target pass and plain draft steps
(tree masks, the accepted path's gather, several draft rows per depth); on the 2-core
CPU it over-predicted a 15-node tree by about a third against the chain
(`experiments/trees/README.md`). So the model only shortlists: its best `FINALISTS`
trees and every chain of depth 1..k (so the choice is never a chain the model merely
mispredicted: chains within a few per cent of each other are ranked by measurement) are
then timed at the caller's batch size on the calibration prompts (`time_finalists`: round-robin, so drift hits all alike, each
finalist's fastest of two rounds per batch, compile excluded) and the fastest measured
is chosen. Timing on all the calibration prompts, not only the caller's current batch,
keeps one unusual prompt from deciding the tree for the rest.

With "<draft>+ngram:N" (`LookupFirstDrafter`) the tree calibration runs the draft alone
and a lookup-first chain of depth k measures what the lookup adds at each depth
(`lookup_gain`, added to E; a tree's pass also counts its lookup chain's nodes), and the
shortlist is timed as it will run: trees with the lookup chain beside them, chains
lookup-first.
"""
from __future__ import annotations

import itertools
from typing import Optional, Sequence

import numpy as np

from specjax.decoding.generate import generate as decode
from specjax.decoding.drafters import LookupFirstDrafter, LookupTree
from specjax.decoding.tree import TreeSpec
from specjax.tune import costs, store
from specjax.tune import k as auto_k

CALIBRATION = (4, 2, 2, 2, 1, 1, 1, 1)  # branching per depth of the calibration tree
MAX_NODES = 64
FINALISTS = 2  # branching trees shortlisted by the model, then timed beside every chain


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


def choose(accept, pass_cost, draft_step_cost: float, k: int, calibration=None,
           max_nodes: int = MAX_NODES) -> tuple:
  """-> (branching, expected tokens per round, predicted tokens per second (relative)).

  Searches depths 1..k; a tree of depth d costs d draft steps and one target pass.
  pass_cost: T -> seconds of one target pass over T tokens; draft_step_cost: seconds of
  one draft step.
  """
  return ranked(accept, pass_cost, draft_step_cost, k, calibration, max_nodes)[0]


def ranked(accept, pass_cost, draft_step_cost: float, k: int, calibration=None,
           max_nodes: int = MAX_NODES, lookup_gain: Optional[Sequence[float]] = None) -> list:
  """Every candidate of depth 1..k as (branching, expected tokens, rate), best rate first.

  lookup_gain: with a prompt-lookup chain beside each tree (`LookupFirstDrafter`), the
  tokens per round it adds at each depth 0..k (`lookup_gain`): added to E, and a branching
  tree's pass counts the chain's `depth` nodes (a chain is lookup-first, no extra nodes)."""
  calibration = calibration or _calibration(k)
  out = []
  for depth in range(1, k + 1):
    for b in candidates(depth, calibration[:depth], max_nodes):
      e = expected_tokens(b, accept)
      if lookup_gain is not None:
        e += lookup_gain[depth]
      t = pass_tokens(b, lookup_gain is not None)
      out.append((b, e, e / (depth * draft_step_cost + pass_cost(t))))
  return sorted(out, key=lambda c: -c[2])


def pass_tokens(branching: Sequence[int], lookup: bool) -> int:
  """Tokens of the target pass that verifies `branching`: its nodes and root, plus (a
  branching tree with a lookup drafter, as `LookupFirstDrafter.tree_spec` sets it) the
  lookup chain's; a chain runs lookup-first and has none."""
  spec = TreeSpec.static(branching)
  if lookup and max(branching) > 1:
    spec = LookupTree(base=spec, chain=spec.depth)
  return spec.verified_nodes + 1


def lookup_gain(accept, lookup_chain_acceptance: Sequence[float]) -> list:
  """[k + 1]: tokens per round that lookup-first adds to the draft's chain at each depth,
  E(lookup-first chain of d) - E(the draft's chain of d) (at least 0), from the
  lookup-first chain's per-position acceptance and the draft's per-rank acceptance."""
  out, e, reach = [0.0], 1.0, 1.0
  for d, a in enumerate(lookup_chain_acceptance, 1):
    reach *= 0.0 if a is None or np.isnan(a) else a
    e += reach
    out.append(max(0.0, e - expected_tokens((1,) * d, accept)))
  return out


def shortlist(ranking: list, n: int = FINALISTS) -> list:
  """The best n branching trees and every chain of a `ranked` list, in the model's order.
  (With the best two chains only, the model once left out the chain that measured
  fastest: `experiments/trees/README.md`, "Cross-validated".)"""
  trees = [c for c in ranking if max(c[0]) > 1][:n]
  chains = [c for c in ranking if max(c[0]) == 1]
  return sorted(trees + chains, key=lambda c: -c[2])


def _calibration(k: int) -> tuple:
  return tuple(CALIBRATION[d] if d < len(CALIBRATION) else 1 for d in range(k))


# per target/draft/k/sampling: the calibration's per-rank acceptance, the lookup's gain and
# the prompts they were measured on (up to 4)
_ACCEPTANCE: dict = {}
_CHOSEN: dict = {}  # ... and batch size: the chosen tree


def timing_batches(calibration: list, prompts: list) -> list:
  """Batches of the caller's size (len(prompts)) that the finalists are timed on: the
  calibration prompts in consecutive groups (the last, short group dropped), or the
  caller's own batch when it is as large as the calibration."""
  b = len(prompts)
  if b >= len(calibration):
    return [prompts]
  return [calibration[i:i + b] for i in range(0, len(calibration) - b + 1, b)]


def time_finalists(run, finalists: list, batches: list, rounds: int = 2) -> list:
  """Measured tokens/s of each finalist over all `batches`: rounds go round-robin over
  finalists and batches; per (finalist, batch) the fastest round counts, and a finalist's
  rate is its new tokens over its summed wall time. run(finalist, batch) -> SpecStats."""
  best = {}  # (finalist index, batch index) -> (wall seconds, new tokens)
  for _ in range(rounds):
    for i, f in enumerate(finalists):
      for j, batch in enumerate(batches):
        st = run(f, batch)
        wall, new = float(st.wall_time_s), float(st.new_tokens.sum())
        if (i, j) not in best or wall < best[(i, j)][0]:
          best[(i, j)] = (wall, new)
  return [sum(best[(i, j)][1] for j in range(len(batches)))
          / sum(best[(i, j)][0] for j in range(len(batches))) for i in range(len(finalists))]


def auto_tree(target, drafter, k: int, prompts: list, sampling, max_new: int = 32,
              verbose: bool = True) -> TreeSpec:
  """Calibrates on (up to 4 of) `prompts`, measures c(T) and the draft, shortlists trees
  of depth at most k by the model and picks the fastest measured at the caller's batch
  size on the calibration prompts (its depth is the k the caller then decodes with).
  Once per process for each target, draft, k, sampling and batch size; the acceptance and
  its prompts are kept across batch sizes."""
  key = (getattr(target, "name", id(target)), store.fingerprint(drafter), k, sampling,
         store.store_dir())  # another cost store: measured anew
  if (key, len(prompts)) in _CHOSEN:
    return _CHOSEN[(key, len(prompts))]
  sampled = dict(sampling=sampling)
  # A drafter that adds candidates beside the draft's tree (`tree_spec`: a lookup chain) is
  # calibrated on its draft alone: the model's per-rank acceptance is the draft's.
  # What the lookup adds is measured by a lookup-first chain of depth k (`lookup_gain`).
  lookup = isinstance(drafter, LookupFirstDrafter)
  if key not in _ACCEPTANCE:
    calib = decode(target, prompts[:4], max_new, drafter=drafter.base if lookup else drafter, k=k,
                   tree=TreeSpec.static(_calibration(k)), **sampled)
    accept = calib.stats.per_rank_acceptance
    gain = None
    if lookup:
      chain = decode(target, prompts[:4], max_new, drafter=drafter, k=k, **sampled)
      gain = lookup_gain(accept, chain.stats.per_position_acceptance)
    _ACCEPTANCE[key] = (accept, gain, list(prompts[:4]))
  accept, gain, calibration = _ACCEPTANCE[key]
  context = max(8, min(len(p) for p in calibration))
  max_len = costs.cache_len(context, max_new, MAX_NODES)
  sizes = sorted({1, 2, 4, 8, 16, 32, MAX_NODES + 1, k + 1})
  measured = auto_k.pass_costs(target, context, max_len, sizes)
  ts = np.array(sizes, float)
  cs = np.maximum.accumulate([measured[t] for t in sizes])  # a larger pass never costs less
  step = auto_k.draft_step_cost(target, drafter, context, max_len, sampling.temperature)
  cost = lambda t: float(np.interp(t, ts, cs))
  finalists = shortlist(ranked(accept, cost, step, k, lookup_gain=gain))
  run = lambda f, batch: decode(target, batch, max_new, drafter=drafter, k=len(f[0]),
                                tree=None if max(f[0]) == 1 else TreeSpec.static(f[0]),
                                **sampled).stats
  batches = timing_batches(calibration, list(prompts))
  rates = time_finalists(run, finalists, batches)
  timed = [(t, b, e) for t, (b, e, _) in zip(rates, finalists)]  # (tokens/s, branching, E)
  tps, branching, e = max(timed)
  spec = TreeSpec.static(branching)
  if verbose:
    name = lambda b: "static:" + ",".join(map(str, b))
    listed = ", ".join(f"{name(b)} {t:.1f}" for t, b, _ in timed)
    t = pass_tokens(branching, lookup)
    extra = t - spec.n_nodes - 1  # the lookup chain's nodes
    print(f"tree='auto': {name(branching)} (depth {len(branching)} of at most {k}, "
          f"{spec.n_nodes} nodes{', the chain' if max(branching) == 1 else ''}"
          f"{f' + a lookup chain of {extra}' if extra else ''}), expected "
          f"{e:.2f} tokens per pass, c(T)/c(1) at T = {t}: "
          f"{cost(t) / cs[0]:.2f}; finalists in the model's order, measured "
          f"tokens/s at batch {len(prompts)} over {len(batches) * len(batches[0])} "
          f"prompt{'s' if len(batches) * len(batches[0]) > 1 else ''}: {listed}", flush=True)
  _CHOSEN[(key, len(prompts))] = spec
  return spec
