"""Exactness of autoregressive and speculative decoding on tiny random models."""
import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.decoding.drafters import DrafterBase
from specjax.decoding.drafters import EarlyExitDrafter, ngram_matches
from specjax.decoding.stats import expected_tokens_per_pass
from specjax.training.draft import build_feature_draft
from specjax.training.export import with_head_kernel
from specjax.models.params import cast
from tiny_models import perturbed, random_prompts, reference_greedy, tiny

TARGET = tiny("llama", seed=0)
DRAFT = tiny("llama", layers=1, seed=1)  # a random draft: accepts 1-4%


def _copy_feature_draft(target, embed_scale: float, feature_weight: float):
  """A feature draft whose blocks are the target's own, fed embed_scale * unit_rms(token
  embedding) + feature_weight * unit_rms(feature) (the tiny embeddings have RMS ~0.3):
  nearly the target run on the tokens after the first, so it agrees often, not always."""
  cfg, params = build_feature_draft(target.cfg, target.params, n_layers=target.cfg.n_layers,
                                    key=jax.random.PRNGKey(3))
  d = target.cfg.d_model
  fc = jnp.concatenate([embed_scale * jnp.eye(d), feature_weight * jnp.eye(d)], 0)
  return dataclasses.replace(target, cfg=cfg, name="feature-copy",
                             params=dict(params, layers=target.params["layers"], fc={"kernel": fc}))


# Drafts that agree with the target often but not always (greedy alpha ~0.5-0.7 on the
# prompts below), so rounds reach every draft position and end in partial acceptance;
# the random drafts above accept 1-4% and rarely get past position 1.
CLOSE_DRAFT = perturbed(TARGET, 0.03)
CLOSE_REDUCED = dataclasses.replace(CLOSE_DRAFT, params=with_head_kernel(  # drops every 5th id
    CLOSE_DRAFT.cfg, dict(CLOSE_DRAFT.params, head_vocab=jnp.asarray(
        [i for i in range(TARGET.cfg.vocab_size) if i % 5]))))
CLOSE_FEATURE = _copy_feature_draft(TARGET, 0.3, 0.02)
CLOSE = {"model": CLOSE_DRAFT, "reduced_head": CLOSE_REDUCED, "feature": CLOSE_FEATURE}


def assert_counters_consistent(stats):
  """What the counters mean (`specjax.decoding.stats`), checked row by row."""
  acc, chk, rounds, gained = stats.accepted, stats.checked, stats.rounds, stats.new_tokens - 1
  assert (chk[:, 0] == rounds).all()  # every round checks (and keeps) its first position
  assert (acc <= chk).all() and (np.diff(chk, axis=1) <= 0).all()
  assert (acc[:, :-1] >= chk[:, 1:]).all()  # position i + 1 is reached only after i is accepted
  assert ((chk - acc).sum(1) <= rounds).all()  # at most one rejection per round
  # Each round keeps its accepted drafts and the target's token; only a row's last
  # round can be cut, and then it loses the target's token.
  assert set((acc.sum(1) + rounds - gained).tolist()) <= {0, 1}
  assert stats.tokens_per_pass == pytest.approx(gained.sum() / rounds.sum())
  for b in range(len(rounds)):  # a row that ends on the prefill's token has no rounds
    want = gained[b] / rounds[b] if rounds[b] else None
    assert stats.row(b)["tokens_per_pass"] == (want and pytest.approx(want))


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
@pytest.mark.parametrize("draft", ["ngram:2", "early_exit:1"])
def test_speculative_greedy_equals_target(draft, k):
  """The model-free drafters: exact output, each row's full length, no more target passes."""
  prompts = random_prompts(6, TARGET.cfg.vocab_size, seed=k)
  prompts[0] = prompts[0] * 3  # a repetitive row, so n-gram lookup gets accepted too
  base = specjax.generate(TARGET, prompts, 24)
  out = specjax.generate(TARGET, prompts, 24, draft=draft, k=k)
  assert out.tokens == base.tokens
  assert out.stats.new_tokens.tolist() == [24] * 6
  assert (out.stats.target_passes <= base.stats.target_passes).all()


@pytest.mark.parametrize("k", [1, 2, 4, 7])
@pytest.mark.parametrize("draft", ["model", "reduced_head", "feature"])
def test_partial_acceptance_greedy_equals_target(draft, k):
  """Model drafts that agree often but not always (a separate model, one with a reduced
  head, a feature draft): exact output, position k reached, positions past the first
  accepted, rejections. (Random drafts, which accept 1-4% and rarely pass position 1, exercised only
  rejection; `test_rows_stop_at_eos_independently` keeps one.)"""
  prompts = random_prompts(6, TARGET.cfg.vocab_size, seed=2)
  base = specjax.generate(TARGET, prompts, 24)
  out = specjax.generate(TARGET, prompts, 24, draft=CLOSE[draft], k=k)
  assert out.tokens == base.tokens
  s = out.stats
  assert 0.3 <= s.acceptance_rate <= 0.95, s.acceptance_rate
  assert s.checked[:, k - 1].sum() >= 1  # position k reached
  assert s.accepted[:, min(1, k - 1):].sum() >= 3  # and positions past the first accepted
  assert (s.checked > s.accepted).any()  # and rejections happen
  assert (out.stats.target_passes < base.stats.target_passes).any()
  assert_counters_consistent(s)


def test_counters_count_only_kept_tokens():
  """max_new_tokens and EOS cut an accepted run of drafts: the cut drafts count nowhere."""
  prompts = random_prompts(3, TARGET.cfg.vocab_size, seed=5)  # shapes compiled above: k = 3
  # A draft equal to the target: every draft is accepted, each round offers k + 1 = 4 tokens.
  s = specjax.generate(TARGET, prompts, 7, draft=TARGET, k=3).stats
  # The prefill gives token 1; round 1 keeps 4; round 2 keeps 2 of its 4 (max_new_tokens 7).
  assert s.new_tokens.tolist() == [7] * 3 and s.rounds.tolist() == [2] * 3
  assert s.checked.tolist() == [[2, 2, 1]] * 3 and s.accepted.tolist() == [[2, 2, 1]] * 3
  assert s.acceptance_rate == 1.0 and s.tokens_per_pass == 3.0 == s.row(0)["tokens_per_pass"]
  assert s.to_dict()["accepted"] == 15 and s.to_dict()["checked"] == 15
  assert_counters_consistent(s)
  # EOS as row 0's second drafted token: round 1 keeps d_1 and d_2 = EOS; d_3 and the
  # target's token are cut.
  free = specjax.generate(TARGET, prompts, 7).tokens[0]
  assert free[2] not in free[:2]
  out = specjax.generate(TARGET, prompts, 7, draft=TARGET, k=3, eos_ids=[free[2]])
  assert out.tokens[0] == free[:3]
  s = out.stats
  assert s.new_tokens[0] == 3 and s.rounds[0] == 1
  assert s.checked[0].tolist() == [1, 1, 0] and s.accepted[0].tolist() == [1, 1, 0]
  assert s.row(0)["tokens_per_pass"] == 2.0 and s.row(0)["acceptance_rate"] == 1.0
  assert_counters_consistent(s)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_greedy_mismatch_rate_by_dtype(dtype):
  """float32: speculative greedy equals the target alone, token for token. bfloat16: it
  equals the target's greedy output under the verify pass's numerics, so a near-tie may
  flip against 1-token decoding; the rate is measured (experiments/bf16_exactness/), and
  every divergence must sit at a near-tie of the target's own logits."""
  target = dataclasses.replace(TARGET, params=cast(TARGET.params, dtype))
  draft = dataclasses.replace(CLOSE_DRAFT, params=cast(CLOSE_DRAFT.params, dtype))
  prompts = random_prompts(6, TARGET.cfg.vocab_size, seed=2)
  base = specjax.generate(target, prompts, 24).tokens
  out = specjax.generate(target, prompts, 24, draft=draft, k=4)
  assert out.stats.acceptance_rate > 0.3
  first_diff = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), None)
                for x, y in zip(base, out.tokens)]
  mismatch_rate = np.mean([d is not None for d in first_diff])
  print(f"{dtype}: {mismatch_rate:.3f} of rows differ from the target alone")
  if dtype == "float32":
    assert mismatch_rate == 0
  for prompt, row, spec, d in zip(prompts, base, out.tokens, first_diff):
    if d is not None:  # the two tokens nearly tie in the target's logits on the common prefix
      ids = prompt + row[:d]
      padded = np.zeros((1, 64), np.int32)
      padded[0, :len(ids)] = ids
      logits = np.asarray(target.logits(padded)[0, len(ids) - 1], np.float32)
      assert abs(logits[row[d]] - logits[spec[d]]) < 0.05 * (1 + np.abs(logits).max())


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
  np.testing.assert_array_equal(ngram_matches(row, jnp.int32(9), 3, 4)[0][0], [8, 9, 1, 5])
  # match runs into the end: periodic continuation
  row2 = jnp.array([3, 4, 3, 4, 3, 0, 0, 0], jnp.int32)
  np.testing.assert_array_equal(ngram_matches(row2, jnp.int32(5), 2, 5)[0][0], [4, 3, 4, 3, 4])
  # no match at all: repeat the last token (q is one-hot, so it is simply verified)
  row3 = jnp.array([1, 2, 3, 0], jnp.int32)
  np.testing.assert_array_equal(ngram_matches(row3, jnp.int32(3), 2, 2)[0][0], [3, 3])


@flax.struct.dataclass
class NoisyOracle(DrafterBase):
  """Drafts the target's own greedy tokens, each replaced by a wrong one w.p. 1 - alpha."""
  inner: EarlyExitDrafter
  alpha: float = flax.struct.field(pytree_node=False)

  name = "noisyoracle"

  @property
  def caps(self):
    return self.inner.caps

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
