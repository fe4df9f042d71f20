"""Fast verify passes: the inference layout, blocked matmuls, live-window attention,
prompt buckets and k="auto" (numerics and behaviour; no timing)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.tune import k as auto_k
from specjax.decoding.plan import prompt_bucket
from specjax.decoding.stats import expected_tokens_per_pass
from specjax.models import KVCache, ModelConfig, forward, init_params
from specjax.models import transformer as tf
from specjax.models.params import canonical, inference_layout
from tiny_models import TinyModel, random_prompts, tiny


def _wide(family="llama", tie=True, seed=0):
  """Wide enough that the head and the MLP run in blocks (8192 outputs of width 64)."""
  cfg = ModelConfig(family, 8192, 64, 2, 4, 4 if family == "gpt2" else 2, 16, 4096,
                    max_positions=512, tie_embeddings=tie)
  return cfg, init_params(cfg, jax.random.PRNGKey(seed), std=0.1)


@pytest.mark.parametrize("rows", [1, 2, 5, 33, 100])
def test_matmul_t_equals_plain_product(rows):
  rng = np.random.default_rng(rows)
  x = jnp.asarray(rng.standard_normal((rows, 576)), jnp.float32)
  wt = jnp.asarray(rng.standard_normal((3072, 576)), jnp.float32)
  got = jax.jit(tf.matmul_t)(x, wt)
  np.testing.assert_allclose(np.asarray(got), np.asarray(x) @ np.asarray(wt).T, rtol=1e-4,
                             atol=1e-3)


@pytest.mark.parametrize("family,tie", [("llama", True), ("llama", False), ("gpt2", True)])
def test_inference_layout_logits_equal_canonical(family, tie):
  cfg, params = _wide(family, tie)
  fast = inference_layout(params, cfg)
  assert set(canonical(fast)) == set(params) and "inference" in fast
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 9), 0, cfg.vocab_size)
  fwd = jax.jit(lambda p, t, c: forward(p, cfg, t, c)[0])
  free = jax.jit(lambda p, t: forward(p, cfg, t)[0])
  for t in (1, 5, 9):
    cache = KVCache.init(cfg, 2, 256).with_lengths(jnp.array([0, 0], jnp.int32))
    want = np.asarray(free(params, tokens[:, :t]))
    np.testing.assert_allclose(np.asarray(fwd(fast, tokens[:, :t], cache)), want, atol=2e-5)
    np.testing.assert_allclose(np.asarray(fwd(params, tokens[:, :t], cache)), want, atol=2e-5)
    np.testing.assert_allclose(np.asarray(free(fast, tokens[:, :t])), want, atol=2e-5)


@pytest.mark.parametrize("t,s,lengths", [(1, 128, [5, 100]), (5, 640, [300, 10]),
                                         (1, 300, [290, 0]), (768, 1024, [0, 100])])
def test_live_attention_equals_dense_attention(t, s, lengths):
  rng = np.random.default_rng(t + s)
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
  q, k, v = normal(2, t, 6, 16), normal(2, t, 2, 16), normal(2, t, 2, 16)
  cache = (normal(2, 2, 16, s), normal(2, 2, s, 16))  # keys [B, K, E, S], values [B, K, S, E]
  lengths = jnp.asarray(lengths, jnp.int32)
  positions = lengths[:, None] + jnp.arange(t)[None]
  y, (keys, values) = jax.jit(tf.cached_attention)(q, k, v, cache, positions, lengths)
  mask = jnp.arange(s)[None, None] <= positions[:, :, None]
  np.testing.assert_allclose(np.asarray(y), np.asarray(tf.attention_core(q, keys, values, mask, True)),
                             atol=1e-5)
  # A negative control: attending one slot too few must differ.
  short = tf.attention_core(q, keys, values, jnp.arange(s)[None, None] < positions[:, :, None],
                           True)
  assert np.abs(np.asarray(y) - np.asarray(short)).max() > 1e-3


def test_speculative_greedy_with_inference_layout_equals_target():
  cfg, params = _wide()
  target = TinyModel(cfg, inference_layout(params, cfg), name="wide")
  draft = TinyModel(*_wide(seed=1), name="wide-draft")
  prompts = random_prompts(3, cfg.vocab_size, seed=4)
  base = specjax.generate(target, prompts, 12)
  plain = specjax.generate(TinyModel(cfg, params), prompts, 12)
  assert base.tokens == plain.tokens
  for k in (2, 4):
    assert specjax.generate(target, prompts, 12, draft=draft, k=k).tokens == base.tokens
    assert specjax.generate(target, prompts, 12, draft="ngram:2", k=k).tokens == base.tokens


def test_prompt_buckets_grow_by_at_most_a_quarter_past_64():
  assert [prompt_bucket(n) for n in (1, 16, 17, 64, 65, 151, 1000, 1024)] == [
      16, 16, 32, 64, 80, 160, 1024, 1024]
  assert prompt_bucket(5000) == 5120 and prompt_bucket(1025) == 1280
  for n in range(65, 20000, 7):
    b = prompt_bucket(n)
    assert n <= b < 1.25 * n and b % 16 == 0, n
  assert len({prompt_bucket(n) for n in range(65, 1025)}) == 16  # four an octave


def test_long_prefill_says_so_and_matches_short_path(capfd):
  model = tiny("llama", seed=5, max_positions=2048)
  prompt = random_prompts(1, model.cfg.vocab_size, lo=1100, hi=1100, seed=2)[0]
  out = specjax.generate(model, [prompt], 4)
  assert "long prefill of 1100 tokens" in capfd.readouterr().err
  logits = np.asarray(model.logits(np.asarray([prompt + out.tokens[0][:3]])))[0]
  assert out.tokens[0] == np.argmax(logits[len(prompt) - 1:], -1).tolist()


def test_tokens_per_pass_formula_matches_closed_form():
  for a in (0.0, 0.3, 0.9):
    for k in (1, 3, 6):
      assert auto_k.tokens_per_pass([a] * k, k) == pytest.approx(expected_tokens_per_pass(a, k))
  costs = {1: 1.0, 2: 1.1, 3: 1.2, 4: 3.0}
  sp = auto_k.expected_speedups(costs, 0.05, [0.8, 0.8, 0.8], [1, 2, 3])
  assert sp[2] == pytest.approx((1 + 0.8 + 0.64) / (1.2 + 0.1)) and max(sp, key=sp.get) == 2


def test_smoothed_costs_undo_a_noisy_neighbour_and_keep_c1():
  line = {t: 2.0 + 0.25 * t for t in range(2, 10)}
  assert auto_k.smooth_costs({1: 1.0, **line}) == pytest.approx({1: 1.0, **line})
  noisy = {1: 1.0, **line, 9: line[9] * 1.3}  # one slow timing at T = 9
  full = [1.0] * 8  # every draft accepted: the best k is the largest, k = 8
  raw = auto_k.expected_speedups(noisy, 0.0, full, range(1, 9))
  smooth = auto_k.expected_speedups(auto_k.smooth_costs(noisy), 0.0, full, range(1, 9))
  assert max(raw, key=raw.get) == 7 and max(smooth, key=smooth.get) == 8
  assert auto_k.smooth_costs({1: 1.0, 2: 1.5, 3: 1.2})[1] == 1.0  # too few points: as given


def test_greedy_verify_equals_verify_row_with_one_hot_p():
  from specjax import sampling
  from specjax.decoding.loop import greedy_verify
  from specjax.decoding.verify import verify_batch
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.standard_normal((64, 5, 7)), jnp.float32)
  best = np.argmax(logits, -1)
  drafts = jnp.asarray(np.where(rng.random((64, 4)) < 0.7, best[:, :4], rng.integers(0, 7, (64, 4))))
  p = sampling.warp(logits, sampling.SamplingParams())
  want = verify_batch(drafts, jax.nn.one_hot(drafts, 7), p, jax.random.PRNGKey(1))
  got = greedy_verify(drafts, logits)
  assert np.asarray(got[0]).tolist() == np.asarray(want[0]).tolist()
  assert np.asarray(got[1]).tolist() == np.asarray(want[1]).tolist()
  assert len(set(np.asarray(got[0]).tolist())) >= 3  # partial acceptance is exercised
