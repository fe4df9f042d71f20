"""Exactness of autoregressive and speculative decoding on tiny random models."""
import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.decoding.drafters import EarlyExitDrafter, _ngram_row
from specjax.decoding.stats import expected_tokens_per_pass
from specjax.training.draft import build_feature_draft
from specjax.training.export import with_head_kernel
from tiny_models import random_prompts, reference_greedy, tiny

TARGET = tiny("llama", seed=0)
DRAFT = tiny("llama", layers=1, seed=1)
# An FR-Spec style draft: its head scores only every other id (q = 0 for the rest).
REDUCED_DRAFT = dataclasses.replace(DRAFT, params=with_head_kernel(
    DRAFT.cfg, dict(DRAFT.params, head_vocab=jnp.arange(0, DRAFT.cfg.vocab_size, 2))))
# An EAGLE-style feature draft over the target's hidden states, with a reduced head.
_FCFG, _FPARAMS = build_feature_draft(TARGET.cfg, TARGET.params, n_layers=1,
                                      key=jax.random.PRNGKey(3), init_std=0.3,
                                      head_vocab=np.arange(1, TARGET.cfg.vocab_size, 2))
FEATURE_DRAFT = dataclasses.replace(DRAFT, cfg=_FCFG, params=with_head_kernel(_FCFG, _FPARAMS),
                                    name="feature")


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_autoregressive_greedy_matches_reference(family):
  target = tiny(family, seed=2)
  prompts = random_prompts(3, target.cfg.vocab_size, seed=1)
  out = specjax.generate(target, prompts, 12)
  for prompt, toks in zip(prompts, out.tokens):
    assert toks == reference_greedy(target, prompt, 12)
  assert out.stats.target_passes.tolist() == [12, 12, 12]


def test_rows_stop_at_eos_independently():
  prompts = random_prompts(4, TARGET.cfg.vocab_size, seed=3)
  free = specjax.generate(TARGET, prompts, 15).tokens
  eos = free[0][4]  # a token row 0 emits: every row must stop at its first occurrence
  out = specjax.generate(TARGET, prompts, 15, eos_ids=[eos])
  for row, toks in zip(free, out.tokens):
    want = row[:row.index(eos) + 1] if eos in row else row
    assert toks == want
  spec = specjax.generate(TARGET, prompts, 15, draft=DRAFT, k=3, eos_ids=[eos])
  assert spec.tokens == out.tokens


@pytest.mark.parametrize("k", [1, 2, 4, 7])
@pytest.mark.parametrize("draft", ["model", "reduced_head", "feature", "ngram:2", "early_exit:1"])
def test_speculative_greedy_equals_target(draft, k):
  prompts = random_prompts(6, TARGET.cfg.vocab_size, seed=k)
  prompts[0] = prompts[0] * 3  # a repetitive row, so n-gram lookup gets accepted too
  base = specjax.generate(TARGET, prompts, 24)
  drafter = {"model": DRAFT, "reduced_head": REDUCED_DRAFT, "feature": FEATURE_DRAFT}.get(draft, draft)
  out = specjax.generate(TARGET, prompts, 24, draft=drafter, k=k)
  assert out.tokens == base.tokens
  assert out.stats.new_tokens.tolist() == [24] * 6
  assert (out.stats.target_passes <= base.stats.target_passes).all()


def test_batch_rows_equal_rows_alone():
  drafter = tiny("llama", layers=2, seed=0)  # shares the target's first layers: high, varied alpha
  drafter.params = {**TARGET.params, "layers": TARGET.params["layers"][:2]}
  drafter.cfg = dataclasses.replace(TARGET.cfg, n_layers=2)
  prompts = random_prompts(5, TARGET.cfg.vocab_size, lo=2, hi=20, seed=11)
  batch = specjax.generate(TARGET, prompts, 20, draft=drafter, k=3)
  rates = [batch.stats.row(b)["acceptance_rate"] for b in range(5)]
  assert len(set(np.round(rates, 6))) > 1, "rows should accept different numbers of tokens"
  for b, prompt in enumerate(prompts):
    alone = specjax.generate(TARGET, [prompt], 20, draft=drafter, k=3)
    assert alone.tokens[0] == batch.tokens[b]
    assert alone.stats.row(0) == batch.stats.row(b)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_draft_equal_to_target_accepts_everything(k):
  out = specjax.generate(TARGET, random_prompts(3, 61, seed=5), 1 + 6 * (k + 1), draft=TARGET, k=k)
  assert out.stats.acceptance_rate == 1.0
  assert out.stats.tokens_per_pass == k + 1
  assert out.stats.target_passes.tolist() == [7, 7, 7]  # prefill + 6 rounds


def test_ngram_lookup_row():
  row = jnp.array([5, 6, 7, 8, 9, 1, 5, 6, 7, 0, 0, 0, 0, 0], jnp.int32)
  # last 3 tokens "5 6 7" match at 0 -> continue with 8 9 1 5 ...
  np.testing.assert_array_equal(_ngram_row(row, jnp.int32(9), 3, 4), [8, 9, 1, 5])
  # match runs into the end: periodic continuation
  row2 = jnp.array([3, 4, 3, 4, 3, 0, 0, 0], jnp.int32)
  np.testing.assert_array_equal(_ngram_row(row2, jnp.int32(5), 2, 5), [4, 3, 4, 3, 4])
  # no match at all: repeat the last token (q is one-hot, so it is simply verified)
  row3 = jnp.array([1, 2, 3, 0], jnp.int32)
  np.testing.assert_array_equal(_ngram_row(row3, jnp.int32(3), 2, 2), [3, 3])


@flax.struct.dataclass
class NoisyOracle:
  """Drafts the target's own greedy tokens, each replaced by a wrong one w.p. 1 - alpha."""
  inner: EarlyExitDrafter
  alpha: float = flax.struct.field(pytree_node=False)

  def init(self, *args):
    return ()

  def propose(self, state, ctx, key):
    k1, k2 = jax.random.split(key)
    drafts, _, state, cache = self.inner.propose(state, ctx, k1)
    wrong = jax.random.uniform(k2, drafts.shape) >= self.alpha
    drafts = jnp.where(wrong, (drafts + 1) % ctx.target_cfg.vocab_size, drafts)
    return drafts, jax.nn.one_hot(drafts, ctx.target_cfg.vocab_size), state, cache

  def commit(self, state, n_tokens, hidden):
    return state

  def passes_per_round(self, k):
    return k


@pytest.mark.parametrize("alpha,k", [(0.6, 4), (0.85, 3)])
def test_tokens_per_pass_matches_closed_form(alpha, k):
  oracle = NoisyOracle(EarlyExitDrafter(n_layers=TARGET.cfg.n_layers), alpha)
  prompts = random_prompts(48, TARGET.cfg.vocab_size, seed=7)
  out = specjax.generate(TARGET, prompts, 80, draft=oracle, k=k, seed=1)
  rounds = int(out.stats.rounds.sum())
  assert rounds > 900
  # alpha is a Bernoulli rate estimated from >= 900 rounds: 0.03 is > 3 standard errors.
  assert abs(out.stats.acceptance_rate - alpha) < 0.03
  want = expected_tokens_per_pass(alpha, k)
  # Tokens per round has variance < k^2 / 4; 0.1 is > 3 standard errors at 900 rounds.
  assert abs(out.stats.tokens_per_pass - want) < 0.1
  assert out.tokens == specjax.generate(TARGET, prompts, 80).tokens


def test_bad_inputs():
  prompts = [[1, 2, 3]]
  with pytest.raises(ValueError, match="k .*>= 1"):
    specjax.generate(TARGET, prompts, 5, draft="ngram:2", k=0)
  with pytest.raises(ValueError, match="does not fit the cache"):
    specjax.generate(TARGET, [[1] * 500], 20)
  other = tiny("llama", vocab=50, layers=1)
  with pytest.raises(ValueError, match="Vocabulary mismatch"):
    specjax.generate(TARGET, prompts, 5, draft=other)
  with pytest.raises(ValueError, match="top_p"):
    specjax.generate(TARGET, prompts, 5, temperature=1.0, top_p=1.5)
  with pytest.raises(ValueError, match="top_p"):
    specjax.generate(TARGET, prompts, 5, temperature=1.0, top_p=0.0)
  with pytest.raises(ValueError, match="temperature"):
    specjax.generate(TARGET, prompts, 5, temperature=-1.0)
  with pytest.raises(ValueError, match="max_new_tokens"):
    specjax.generate(TARGET, prompts, 0)
  with pytest.raises(ValueError, match="early_exit"):
    specjax.generate(TARGET, prompts, 5, draft="early_exit:3")
  with pytest.raises(ValueError, match="Empty prompt"):
    specjax.generate(TARGET, [[]], 5)
