"""Tree speculative sampling follows the target's warped distribution exactly.

As tests/test_exact_sampling.py: on a 5-token vocabulary the joint law of the first
three generated tokens is enumerated exactly (125 outcomes) and compared with 12,000
tree-speculative samples by chi-square (fail above df + 6 sqrt(2 df)) and by total
variation (fail above the 0.999 quantile of the TV of 12,000 exact samples, simulated).
The trees branch at two depths (static:3,2 and static:2,2), so a round's three tokens
can come from any branch; children are sampled i.i.d. from the draft or taken top-k.
Negative controls (siblings tried against p instead of the residual; the next token
drawn from p instead of the residual) must fail.
"""
import dataclasses
import functools

import jax
import numpy as np
import pytest

import specjax
from specjax.decoding.tree import TreeSpec, verify_tree_row
from specjax.sampling import SamplingParams
from test_exact_sampling import DRAFT, PROMPT, TARGET, V, chi_square_fails, exact_joint

N_CALLS, ROWS = 4, 3000


def sampled_joint(sampling, tree, draft=DRAFT, verifier=None) -> np.ndarray:
  counts = np.zeros((V, V, V))
  for seed in range(N_CALLS):
    out = specjax.generate(TARGET, [PROMPT] * ROWS, 3, draft=draft, k=tree.depth, seed=seed,
                           temperature=sampling.temperature, top_k=sampling.top_k,
                           top_p=sampling.top_p, tree=tree, verifier=verifier)
    for toks in out.tokens:
      counts[tuple(toks[:3])] += 1
  return counts


def tv_fails(counts: np.ndarray, probs: np.ndarray) -> tuple:
  n = int(counts.sum())
  tv = 0.5 * np.abs(counts / n - probs).sum()
  rng = np.random.default_rng(0)
  p = probs.ravel() / probs.sum()
  null = [0.5 * np.abs(rng.multinomial(n, p) / n - p).sum() for _ in range(2000)]
  return tv > np.quantile(null, 0.999), tv


SETTINGS = [(SamplingParams(1.0), "sample", (3, 2)), (SamplingParams(1.0), "topk", (2, 2)),
            (SamplingParams(0.8, top_k=3), "sample", (2, 2)),
            (SamplingParams(1.2, top_p=0.8), "topk", (3, 2))]


@pytest.mark.parametrize("sampling,children,branching", SETTINGS)
def test_tree_sampling_is_exact(sampling, children, branching):
  probs = exact_joint(sampling, 3)
  assert (probs > 0.01).sum() >= 8, "the target law should not be nearly deterministic"
  counts = sampled_joint(sampling, TreeSpec.static(branching, children))
  fails, stat, df = chi_square_fails(counts, probs)
  assert not fails, f"chi2={stat:.1f} with df={df}"
  fails, tv = tv_fails(counts, probs)
  assert not fails, f"TV={tv:.4f}"


def test_dynamic_tree_and_feature_draft_sampling_are_exact():
  """EAGLE-2 dynamic trees (top-k children chosen per row) from a feature draft."""
  from specjax.training.draft import build_feature_draft
  cfg, params = build_feature_draft(TARGET.cfg, TARGET.params, n_layers=1,
                                    key=jax.random.PRNGKey(4), init_std=0.5)
  draft = dataclasses.replace(DRAFT, cfg=cfg, params=params)
  sampling = SamplingParams(1.0)
  counts = sampled_joint(sampling, TreeSpec.dynamic(5, 2, beam=3), draft=draft)
  fails, stat, df = chi_square_fails(counts, exact_joint(sampling, 3))
  assert not fails, f"chi2={stat:.1f} with df={df}"


WRONG = {"no_residual_update": functools.partial(verify_tree_row, residual_update=False),
         "draw_from_p": functools.partial(verify_tree_row, draw_from_residual=False)}


@pytest.mark.parametrize("rule,children", [("no_residual_update", "sample"),
                                           ("draw_from_p", "topk")])
def test_negative_controls_fail(rule, children):
  sampling = SamplingParams(1.0)
  probs = exact_joint(sampling, 3)
  counts = sampled_joint(sampling, TreeSpec.static((3, 2), children), verifier=WRONG[rule])
  fails, stat, df = chi_square_fails(counts, probs)
  assert fails, f"the wrong rule passed: chi2={stat:.1f} with df={df}"


def _lookup_beside(min_match: int, chain: int = 0):
  """A feature draft's tree with a prompt-lookup chain under the root (`LookupFirstDrafter`);
  min_match 0 puts the chain first in every row, 2 after the tree (PROMPT never repeats)."""
  from specjax.decoding.drafters import LookupFirstDrafter
  from specjax.api import resolve_drafter
  from specjax.training.draft import build_feature_draft
  cfg, params = build_feature_draft(TARGET.cfg, TARGET.params, n_layers=1,
                                    key=jax.random.PRNGKey(4), init_std=0.5)
  base = resolve_drafter(dataclasses.replace(DRAFT, cfg=cfg, params=params), TARGET)
  return LookupFirstDrafter(base=base, n=3, min_match=min_match, chain=chain)


@pytest.mark.parametrize("min_match,tree", [(0, TreeSpec.static((2, 2))),
                                            (2, TreeSpec.dynamic(4, 2, beam=2))])
def test_lookup_chain_beside_the_tree_is_exact(min_match, tree):
  """The lookup chain's one-hot tokens often repeat a draft child's (a 5-token vocabulary):
  the residual update must remove the first copy's mass before the second is tried."""
  sampling = SamplingParams(1.0)
  probs = exact_joint(sampling, 3)
  counts = sampled_joint(sampling, tree, draft=_lookup_beside(min_match))
  fails, stat, df = chi_square_fails(counts, probs)
  assert not fails, f"chi2={stat:.1f} with df={df}"
  fails, tv = tv_fails(counts, probs)
  assert not fails, f"TV={tv:.4f}"


def test_lookup_chain_negative_control_fails():
  """Siblings tried against p, not the residual (the lookup chain's first token among the
  root's children): the law is wrong and the test must see it."""
  sampling = SamplingParams(1.0)
  counts = sampled_joint(sampling, TreeSpec.static((2, 2)), draft=_lookup_beside(0),
                         verifier=WRONG["no_residual_update"])
  fails, stat, df = chi_square_fails(counts, exact_joint(sampling, 3))
  assert fails, f"the wrong rule passed: chi2={stat:.1f} with df={df}"


@pytest.mark.parametrize("wrong", [False, True])
def test_a_lookup_chain_deeper_than_the_tree_is_exact(wrong):
  """A depth-1 tree (static:2) beside a lookup chain of 3 tried first: all three tokens
  of a round can come from the chain, past the tree's depth. The law is the target's;
  with siblings tried against p (the negative control) it is not."""
  sampling = SamplingParams(1.0)
  probs = exact_joint(sampling, 3)
  counts = sampled_joint(sampling, TreeSpec.static((2,)), draft=_lookup_beside(0, chain=3),
                         verifier=WRONG["no_residual_update"] if wrong else None)
  fails, stat, df = chi_square_fails(counts, probs)
  assert fails == wrong, f"chi2={stat:.1f} with df={df}"
  if not wrong:
    assert not tv_fails(counts, probs)[0]
