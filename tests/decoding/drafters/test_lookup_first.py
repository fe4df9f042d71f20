"""Prompt lookup first, a feature draft (or early exit) elsewhere (`LookupFirstDrafter`):
the per-row choice, greedy exactness with partial acceptance, the target's law under
sampling against exact enumeration (with a negative control that must fail), and the
spec string's errors."""
import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
import test_exact_sampling as ex
from specjax.decoding.drafters import DraftContext, DrafterBase, LookupFirstDrafter, best_match
from specjax.api import resolve_drafter
from specjax.sampling import SamplingParams
from specjax.training.draft import build_feature_draft
from test_decoding import CLOSE_FEATURE, TARGET, assert_counters_consistent
from tiny_models import random_prompts


@flax.struct.dataclass
class FixedDrafter(DrafterBase):
  """Proposes token 7 at every position with a uniform q (a stand-in base)."""
  name = "fixed"

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    return ()

  def propose(self, state, ctx, key):
    b, v = ctx.tokens.shape[0], ctx.target_cfg.vocab_size
    return (jnp.full((b, ctx.k), 7, jnp.int32), jnp.full((b, ctx.k, v), 1.0 / v), state,
            ctx.target_cache)

  def commit(self, state, n_tokens, hidden):
    return state

  def passes_per_round(self, k):
    return k


def _ctx(tokens, n_tokens, k, vocab):
  cfg = dataclasses.replace(TARGET.cfg, vocab_size=vocab)
  return DraftContext(target_params=None, target_cache=None, tokens=jnp.asarray(tokens, jnp.int32),
                      n_tokens=jnp.asarray(n_tokens, jnp.int32), target_cfg=cfg, k=k,
                      sampling=SamplingParams())


def test_lookup_where_the_suffix_repeats_else_the_base():
  rows = np.zeros((3, 12), np.int32)
  rows[0, :8] = [5, 1, 2, 3, 9, 4, 1, 2]  # suffix "1 2" seen before: continue "3 9 4"
  rows[1, :8] = [5, 1, 2, 3, 9, 4, 6, 2]  # only "2" seen before: a 1-token match
  rows[2, :6] = [1, 2, 3, 4, 5, 6]  # no match
  ctx = _ctx(rows, [8, 8, 6], k=3, vocab=10)
  _, size = best_match(ctx.tokens, ctx.n_tokens, 3, 3)
  assert size.tolist() == [2, 1, 0]
  for min_match, lookup_rows in [(2, {0}), (1, {0, 1})]:
    drafter = LookupFirstDrafter(base=FixedDrafter(), n=3, min_match=min_match)
    drafts, q, _, _ = drafter.propose((), ctx, jax.random.PRNGKey(0))
    for b in range(3):
      if b in lookup_rows:
        want = {0: [3, 9, 4], 1: [3, 9, 4]}[b]
        assert drafts[b].tolist() == want, (min_match, b)
        np.testing.assert_array_equal(q[b], jax.nn.one_hot(jnp.asarray(want), 10))
      else:
        assert drafts[b].tolist() == [7, 7, 7], (min_match, b)
        np.testing.assert_allclose(q[b], 0.1)


@pytest.mark.parametrize("k", [2, 4])
def test_greedy_equals_target_with_partial_acceptance(k):
  """Repetitive and random rows: the lookup and the feature draft both draft, both are
  partly accepted, and the output is the target's own."""
  prompts = random_prompts(6, TARGET.cfg.vocab_size, seed=2)
  prompts[0], prompts[3] = prompts[0] * 3, prompts[3] * 2
  alone = specjax.generate(TARGET, prompts, 24)
  feature = resolve_drafter(CLOSE_FEATURE, TARGET)
  only = specjax.generate(TARGET, prompts, 24, draft=feature, k=k)
  both = specjax.generate(TARGET, prompts, 24, draft=LookupFirstDrafter(base=feature), k=k)
  assert both.tokens == alone.tokens
  s = both.stats
  assert 0.3 <= s.acceptance_rate <= 0.97, s.acceptance_rate
  assert s.accepted[:, 1:].sum() >= 3 and (s.checked > s.accepted).any()
  assert (s.accepted != only.stats.accepted).any()  # the lookup drafted some rounds
  assert_counters_consistent(s)
  spec = specjax.generate(TARGET, prompts, 24, draft="early_exit:1+ngram:2", k=k)
  assert spec.tokens == alone.tokens


@flax.struct.dataclass
class LookupWithBaseQ(LookupFirstDrafter):
  """A wrong hybrid: drafts the lookup's tokens but reports the base's q for them."""

  def propose(self, state, ctx, key):
    _, base_q, _, _ = self.base.propose(state, ctx, key)  # the same proposal: same inputs
    drafts, _, state, cache = super().propose(state, ctx, key)
    return drafts, base_q, state, cache


def _feature_drafter():
  cfg, params = build_feature_draft(ex.TARGET.cfg, ex.TARGET.params, n_layers=1,
                                    key=jax.random.PRNGKey(4), init_std=0.5)
  return resolve_drafter(dataclasses.replace(ex.DRAFT, cfg=cfg, params=params), ex.TARGET)


@pytest.mark.parametrize("wrong", [False, True])
def test_sampling_is_exact_and_a_wrong_q_fails(wrong):
  """On the 5-token vocabulary the last two tokens often repeat, so rounds mix lookup
  and feature drafts; reporting the base's q for lookup tokens must fail."""
  kind = LookupWithBaseQ if wrong else LookupFirstDrafter
  sampling = SamplingParams(1.0)
  counts, stats = ex.sampled_joint(sampling, 2, draft=kind(base=_feature_drafter(), n=2,
                                                            min_match=2),
                                   calls=1 if wrong else ex.N_CALLS)
  ex.assert_rounds_covered(stats, 2)
  fails, stat, df = ex.chi_square_fails(counts, ex.exact_joint(sampling, ex.NEW_TOKENS[2]))
  assert fails == wrong, f"chi2={stat:.1f} with df={df}"


@pytest.mark.parametrize("spec,words", [
    ("ngram:3+early_exit:1", "the lookup last"),
    ("+ngram:3", "the lookup last"),
    ("early_exit:1+ngram:x", "not a positive integer"),
    ("ngram:2+ngram:3", "combines with a feature draft or early_exit"),
    ("early_exit:1+ngram:3:0", "lookup chain length '0' is not a positive integer"),
    ("early_exit:1+ngram:3:x", "lookup chain length 'x' is not a positive integer"),
])
def test_bad_combined_specs(spec, words):
  with pytest.raises(ValueError, match=words):
    specjax.generate(TARGET, [[1, 2, 3]], 4, draft=spec, k=2)


def test_trees_take_the_lookup_chain():
  """With tree=, the lookup's continuation is a chain beside early exit's tree: greedy
  output stays the target's (tree='auto' with the lookup: tests/decoding/test_tree.py)."""
  prompts = random_prompts(3, TARGET.cfg.vocab_size, seed=4)
  prompts[0] = prompts[0] * 3
  alone = specjax.generate(TARGET, prompts, 12)
  out = specjax.generate(TARGET, prompts, 12, draft="early_exit:1+ngram:2", k=2, tree="static:2,1")
  assert out.tokens == alone.tokens and out.stats.nodes_per_round == 4 + 2


@pytest.mark.parametrize("tree", [None, "auto"])
def test_a_lookup_chain_length_needs_a_given_tree(tree):
  """':L' sizes the chain beside a tree; without one it would be silently ignored."""
  with pytest.raises(ValueError, match="only a given tree uses: pass k and tree="):
    specjax.generate(TARGET, [[1, 2, 3]], 4, draft="early_exit:1+ngram:2:6", k=2, tree=tree)


def test_a_longer_lookup_chain_reaches_past_the_tree():
  """'+ngram:2:7' beside a depth-2 tree: where the target repeats itself (it continues
  [36] * 16 with 36s, [24] * 16 with 14 56s and then other tokens) rounds accept up to 7
  drafts, the output stays the target's, and there are fewer passes than with the chain
  as deep as the tree."""
  prompts = [[36] * 16, [24] * 16] + random_prompts(1, TARGET.cfg.vocab_size, seed=4)
  alone = specjax.generate(TARGET, prompts, 24)
  short = specjax.generate(TARGET, prompts, 24, draft="early_exit:1+ngram:2", k=2,
                           tree="static:2,1")
  long = specjax.generate(TARGET, prompts, 24, draft="early_exit:1+ngram:2:7", k=2,
                          tree="static:2,1")
  assert long.tokens == alone.tokens
  assert long.stats.nodes_per_round == 4 + 7 and "lookup chain of 7" in long.stats.tree
  assert long.stats.path_lengths.shape == (3, 8)
  assert long.stats.path_lengths[0, 7] > 0 and long.stats.path_lengths[1, 3:7].sum() > 0
  assert (long.stats.rounds[:2] < short.stats.rounds[:2]).all()
  assert_counters_consistent(long.stats)
