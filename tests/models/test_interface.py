"""The loop behind the model interface, tested with a stub model (as t5x tests decoding).

The stub's logits for the token after position t are a closed-form function of the
(token, position) pairs it attends to, so greedy decoding has a numpy reference that
involves no transformer; the stub keeps those pairs in a `KVCache` (one layer, width 1),
so cache writes, rollback by lengths, tree masks and path gathering are all exercised.
"""
import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.models import KVCache
from specjax.models.cache import write_keys, write_values
from specjax.models.interface import Decoder, as_decoder
from tiny_models import random_prompts, tiny

V = 17


@dataclasses.dataclass(frozen=True)
class StubConfig:
  vocab_size: int = V
  n_layers: int = 2
  max_positions: int = 512


def _weight(pos):
  return jnp.cos(0.7 * pos + 0.3)


def _logits(score, v=V):
  return 4.0 * jnp.sin(score[..., None] * (jnp.arange(v) + 1) * 0.37 + jnp.arange(v))


@flax.struct.dataclass
class StubModel:
  """hidden(t) = sum over attended slots s of (token_s + 1) * cos(0.7 pos_s + 0.3);
  logits(t)[v] = 4 sin(0.37 hidden (v + 1) + v). n_layers is ignored, so an early-exit
  draft of the stub is the stub itself."""
  params: dict
  cfg: StubConfig = flax.struct.field(pytree_node=False)
  name: str = flax.struct.field(pytree_node=False, default="stub")
  eos_ids: tuple = flax.struct.field(pytree_node=False, default=())

  @property
  def vocab_size(self):
    return self.cfg.vocab_size

  def init_cache(self, batch, max_len):
    z = jnp.zeros((batch, 1, max_len), jnp.float32)  # in KVCache's layouts, K = E = 1
    return KVCache(k=(z[:, :, None],), v=(z[..., None],), lengths=jnp.zeros((batch,), jnp.int32))

  def prefill(self, tokens, lengths, max_len):
    hidden, cache = self.step(tokens, None, None, self.init_cache(tokens.shape[0], max_len))
    return hidden, cache.with_lengths(lengths)

  def step(self, tokens, positions, mask, cache, n_layers=None):
    b, t = tokens.shape
    if positions is None:
      positions = cache.lengths[:, None] + jnp.arange(t)[None]
    toks = write_keys(cache.k[0], (tokens + 1).astype(jnp.float32)[..., None, None], cache.lengths)
    pos = write_values(cache.v[0], positions.astype(jnp.float32)[..., None, None], cache.lengths)
    if mask is None:
      mask = jnp.arange(toks.shape[3])[None, None] <= positions[:, :, None]  # [B, T, S]
    contrib = toks[:, 0, 0, :] * _weight(pos[:, 0, :, 0])  # [B, S]
    hidden = jnp.sum(jnp.where(mask, contrib[:, None], 0.0), -1)[..., None]  # [B, T, 1]
    return hidden, KVCache(k=(toks,), v=(pos,), lengths=cache.lengths + t)

  def head(self, hidden):
    return _logits(hidden[..., 0])


STUB = StubModel(params={"embed": jnp.zeros((V, 1))}, cfg=StubConfig())


def reference_greedy(prompt, n):
  ids = list(prompt)
  for _ in range(n):
    score = sum((t + 1) * np.cos(0.7 * i + 0.3) for i, t in enumerate(ids))
    ids.append(int(np.argmax(np.asarray(_logits(jnp.float32(score))))))
  return ids[len(prompt):]


def test_loop_with_stub_model_matches_closed_form():
  prompts = random_prompts(4, V, lo=1, hi=9, seed=3)  # ragged rows
  out = specjax.generate(STUB, prompts, 14)
  assert out.tokens == [reference_greedy(p, 14) for p in prompts]
  assert out.stats.target_passes.tolist() == [14] * 4


@pytest.mark.parametrize("tree", [None, "static:2,2,1", "dynamic:5"])
def test_speculative_loop_with_stub_model(tree):
  """The stub as its own (early-exit) draft: the chain and a static tree (whose top-ranked
  path is the draft's greedy chain) accept every draft, so each round gains k + 1 tokens,
  and the tokens still follow the closed form. A dynamic tree keeps the best N nodes by
  cumulative draft probability, which need not reach depth k; an n-gram draft (chain) is
  accepted only sometimes: both must give the same tokens."""
  prompts = random_prompts(3, V, lo=2, hi=9, seed=5)
  want = [reference_greedy(p, 17) for p in prompts]
  out = specjax.generate(STUB, prompts, 17, draft="early_exit:1", k=3, tree=tree)
  assert out.tokens == want
  hist = out.stats.path_lengths.sum(0)
  assert hist.sum() == out.stats.rounds.sum()
  assert (hist * np.arange(4)).sum() == out.stats.accepted.sum()
  if tree is None or tree.startswith("static"):
    assert out.stats.acceptance_rate == 1.0 and out.stats.tokens_per_pass == 4
    assert out.stats.target_passes.tolist() == [1 + 4] * 3  # prefill + 16 / 4 rounds
  if tree is None:
    assert specjax.generate(STUB, prompts, 17, draft="ngram:2", k=3).tokens == want


def test_decoder_wraps_a_loaded_model():
  model = tiny("gpt2", seed=1)
  dec = as_decoder(model)
  assert isinstance(dec, Decoder) and as_decoder(dec) is dec and as_decoder(STUB) is STUB
  tokens = jnp.array([[3, 1, 4, 1, 5, 9, 2, 6]])
  hidden, cache = dec.prefill(tokens, jnp.array([5]), 16)
  assert cache.lengths.tolist() == [5]
  np.testing.assert_allclose(dec.head(hidden), model.logits(tokens), atol=1e-5)
  step_hidden, cache = dec.step(tokens[:, 5:], None, None, cache)
  np.testing.assert_allclose(dec.head(step_hidden), model.logits(tokens)[:, 5:], atol=1e-4)
  assert cache.lengths.tolist() == [8]
