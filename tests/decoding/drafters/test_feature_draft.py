"""EAGLE-style feature drafts: the engine's cached drafting equals a cache-free
reference round by round, the unrolled training forward equals drafting on the draft's
own features, training on a toy target raises alpha, and the asset round-trips."""
from __future__ import annotations

import dataclasses
import os
import sys
import types

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.drafters import DrafterBase, FeatureDrafter
from specjax.decoding.loop import run
from specjax.models import feature_forward, forward_hidden, head
from specjax.models.feature_draft import feature_forward_unrolled
from specjax.sampling import SamplingParams
from specjax.training.draft import build_feature_draft
from tiny_models import random_prompts, tiny

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TARGET = tiny("llama", seed=0)
ROUNDS = 32  # >= max_new: every round yields at least one token
DRAFT_CFG = dataclasses.replace(TARGET.cfg, n_layers=2)  # the feature drafts tested here


@flax.struct.dataclass
class Recorder(DrafterBase):
  """Wraps a drafter and logs, per round, each row's final-token count and its drafts."""
  inner: FeatureDrafter
  k: int = flax.struct.field(pytree_node=False)

  name = "recorder"

  @property
  def caps(self):
    return self.inner.caps

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    b = prompt.shape[0]
    return (self.inner.init(target_params, prompt, prompt_lens, max_len, hidden),
            jnp.zeros((ROUNDS, b, self.k), jnp.int32), jnp.zeros((ROUNDS, b), jnp.int32),
            jnp.int32(0))

  def propose(self, state, ctx, key):
    inner, drafts_log, n_log, r = state
    drafts, q, inner, cache = self.inner.propose(inner, ctx, key)
    state = (inner, drafts_log.at[r].set(drafts), n_log.at[r].set(ctx.n_tokens), r + 1)
    return drafts, q, state, cache

  def commit(self, state, n_tokens, hidden):
    return (self.inner.commit(state[0], n_tokens, hidden),) + state[1:]

  def passes_per_round(self, k):
    return k

  @property
  def feature_layers(self):  # the loop hands the wrapped drafter the features it reads
    return self.inner.feature_layers


WIDTH = 64  # reference calls are right-padded to one width: one compile, causal models
             # keep the padding out of the real positions. Shapes that grow (the fed-back
             # features and tokens) stay numpy arrays on the host, so no call recompiles.


@jax.jit
def _padded_target_features(tokens):
  return forward_hidden(TARGET.params, TARGET.cfg, tokens)[0]


def _target_features(tokens):
  return np.asarray(_padded_target_features(_pad(tokens)))


def _pad(x):
  x = np.asarray(x)
  return np.pad(x, ((0, 0), (0, WIDTH - x.shape[1])) + ((0, 0),) * (x.ndim - 2))


@jax.jit
def _last_prediction(params, features, next_tokens, n):
  """feature_forward over the first n positions (cache-free) -> prediction at n - 1 [B, D]."""
  pred, _ = feature_forward(params, DRAFT_CFG, features, next_tokens)
  return jnp.take(pred, n - 1, axis=1)


def _predict(params, feats, nxt):
  return np.asarray(_last_prediction(params, _pad(feats), _pad(nxt), nxt.shape[1]))


@jax.jit
def _greedy_draft(params, f):
  """f [1, 1, D] -> the draft head's greedy token."""
  return jnp.argmax(head(params, DRAFT_CFG, f)[0, 0])


def _reference_drafts(draft_params, tokens, k):
  """Cache-free: target features of tokens[:-1], then k feature-draft steps feeding back
  the draft's own predicted features -> k greedy drafts."""
  toks = np.asarray(tokens)[None]
  feats = _target_features(toks[:, :-1])[:, :toks.shape[1] - 1]  # f_0 .. f_{n-2}
  return _feed_back(draft_params, feats, toks[:, 1:], k)  # tokens 1 .. n-1


def _feed_back(draft_params, feats, nxt, k):
  """k greedy drafts from features [1, n, D] and next tokens [1, n], each step appending
  the draft's own predicted feature and token (host arrays: no step recompiles)."""
  out = []
  for _ in range(k):
    f = _predict(draft_params, feats, nxt)[:, None]  # [1, 1, D]
    d = int(_greedy_draft(draft_params, f))
    out.append(d)
    feats = np.concatenate([feats, f], 1)
    nxt = np.concatenate([nxt, np.array([[d]], nxt.dtype)], 1)
  return out


def test_engine_drafts_equal_cache_free_reference():
  k = 3
  # The draft shares the target's embeddings; its block is the target's first block so that
  # it agrees often enough for rounds to accept different numbers of tokens.
  cfg, params = build_feature_draft(TARGET.cfg, TARGET.params, n_layers=2,
                                    key=jax.random.PRNGKey(1), init_std=0.3)
  params["layers"] = TARGET.params["layers"][:2]
  prompts = random_prompts(3, TARGET.cfg.vocab_size, lo=3, hi=9, seed=2)
  p_len = 16
  prompt = np.zeros((3, p_len), np.int32)
  for b, p in enumerate(prompts):
    prompt[b, :len(p)] = p
  lens = np.array([len(p) for p in prompts], np.int32)
  state = run(TARGET.params, Recorder(FeatureDrafter(params=params, cfg=cfg), k=k),
              jnp.asarray(prompt), jnp.asarray(lens), jnp.int32(24), jax.random.PRNGKey(0),
              target_cfg=TARGET.cfg, sampling=SamplingParams(), k=k, eos_ids=(), max_len=128)
  _, drafts_log, n_log, _ = jax.device_get(state.draft_state)
  tokens = np.asarray(state.tokens)
  gains = set()
  for b in range(3):
    rounds = int(state.rounds[b])
    for r in range(rounds):
      n = int(n_log[r, b])
      want = _reference_drafts(params, tokens[b, :n], k)
      assert drafts_log[r, b].tolist() == want, (b, r)
      if r + 1 < rounds:
        gains.add(int(n_log[r + 1, b]) - n)
  assert len(gains) > 1, f"rounds should gain different numbers of tokens, got {gains}"


def test_unrolled_training_forward_equals_drafting_on_own_features():
  """Stream s of `feature_forward_unrolled` at position i equals drafting s steps with
  `feature_forward` from the target's features up to i - s + 1, cache-free."""
  cfg, params = build_feature_draft(TARGET.cfg, TARGET.params, n_layers=2,
                                    key=jax.random.PRNGKey(1), init_std=0.3)
  assert cfg == DRAFT_CFG
  toks = jnp.asarray(np.random.default_rng(0).integers(0, TARGET.cfg.vocab_size, (2, 12)))
  f, _ = forward_hidden(TARGET.params, TARGET.cfg, toks)
  outs = feature_forward_unrolled(params, cfg, f[:, :-1], toks[:, 1:], 3)
  first, _ = feature_forward(params, cfg, f[:, :-1], toks[:, 1:])
  np.testing.assert_array_equal(outs[0], first)
  f, toks = np.asarray(f), np.asarray(toks)  # host slices below: no compile per shape
  for s in (2, 3):
    for i in range(s - 1, 11):
      j0 = i - s + 1  # the last position with a target feature
      feats = f[:, :j0 + 1]
      for step in range(1, s):
        pred = _predict(params, feats, toks[:, 1:j0 + 1 + step])
        feats = np.concatenate([feats, pred[:, None]], 1)
      pred = _predict(params, feats, toks[:, 1:j0 + 1 + s])
      np.testing.assert_allclose(outs[s - 1][:, i], pred, atol=1e-4, rtol=1e-4)


def test_toy_feature_distillation_raises_alpha(tmp_path):
  sys.path.insert(0, ROOT)
  from tests.training.test_training import _tiny_config, _toy
  from specjax.training import read_metrics, train
  c = _tiny_config(num_steps=60, **{"data.teacher": "topk"})
  c.draft.kind, c.draft.init_std = "feature", 0.02
  c.draft.feature_weight, c.draft.feature_noise, c.draft.unroll_steps = 1.0, 0.05, 2
  c.eval.engine, c.eval.every = True, 60
  t, tp, hp = _toy(c)
  summary = train(c, str(tmp_path), t, tp, hp, progress=False)
  rows = read_metrics(str(tmp_path))
  loss = [r["distill_loss"] for r in rows if "distill_loss" in r]
  feat = [r["feature_loss"] for r in rows if "feature_loss" in r]
  evals = [r for r in rows if "alpha" in r]
  assert np.mean(loss[-10:]) < 0.5 * np.mean(loss[:5])
  assert np.mean(feat[-10:]) < np.mean(feat[:5])
  second = [r["distill_loss_s2"] for r in rows if "distill_loss_s2" in r]
  assert np.mean(second[-10:]) < 0.5 * np.mean(second[:5])
  assert evals[-1]["alpha"] >= evals[0]["alpha"] + 0.2, evals
  assert evals[-1]["heldout_top1_agree"] > evals[0]["heldout_top1_agree"]
  assert "fc" in summary["draft_params"]


def test_feature_draft_asset_roundtrip(tmp_path):
  """save_asset / load_asset keep a feature draft (fc, block, reduced head) to float16."""
  import pytest
  from specjax.errors import LoadError
  from specjax.training import export
  cfg, params = build_feature_draft(TARGET.cfg, TARGET.params, n_layers=1,
                                    key=jax.random.PRNGKey(5), head_vocab=np.arange(0, 61, 3))
  export.save_asset(cfg, params, str(tmp_path / "asset"), target="tiny")
  target = types.SimpleNamespace(params=TARGET.params, cfg=TARGET.cfg, tokenizer=None,
                                 eos_ids=(), bos_id=None)
  loaded = export.load_asset(str(tmp_path / "asset"), target=target)
  np.testing.assert_allclose(loaded.params["fc"]["kernel"], params["fc"]["kernel"], atol=1e-3)
  for a, b in zip(jax.tree.leaves(loaded.params["layers"]), jax.tree.leaves(params["layers"])):
    np.testing.assert_allclose(a, b, atol=1e-3)
  assert loaded.params["head_vocab"].tolist() == params["head_vocab"].tolist()
  with pytest.raises(LoadError, match="feature"):
    export.materialize_hf(str(tmp_path / "asset"), target, cache_dir=str(tmp_path / "cache"))
  with pytest.raises(ValueError, match="feature"):
    export.export_hf(cfg, params, str(tmp_path / "hf"))


# ------------------------------------------------------------ EAGLE-3 style multi-layer features

ML_LAYERS = (0, 1, 2)  # every layer of the 3-layer tiny target: early, middle, late


def _ml_draft(key=1, std=0.3):
  """A 2-block draft over the target's 3 layers; fc_layers perturbed so that the early and
  middle layers matter (its initialisation reads the last layer only)."""
  cfg, params = build_feature_draft(TARGET.cfg, TARGET.params, n_layers=2,
                                    key=jax.random.PRNGKey(key), init_std=std,
                                    feature_layers=ML_LAYERS)
  params["layers"] = TARGET.params["layers"][:2]
  d = TARGET.cfg.d_model
  params["fc_layers"]["kernel"] = params["fc_layers"]["kernel"] + 0.5 * jax.random.normal(
      jax.random.PRNGKey(key + 7), (3 * d, d))
  return cfg, params


def test_forward_hidden_collects_layer_outputs():
  toks = jnp.asarray(np.random.default_rng(1).integers(0, TARGET.cfg.vocab_size, (2, 9)))
  last, _, both = forward_hidden(TARGET.params, TARGET.cfg, toks, collect=(0, 2))
  one, _ = forward_hidden(TARGET.params, TARGET.cfg, toks, n_layers=1)
  np.testing.assert_array_equal(both[..., :32], one)
  np.testing.assert_array_equal(both[..., 32:], last)
  import pytest
  with pytest.raises(ValueError, match="collect"):
    forward_hidden(TARGET.params, TARGET.cfg, toks, n_layers=2, collect=(2,))


@jax.jit
def _ml_projected_features(params, tokens):
  """The target's 3-layer features of padded tokens, projected by the draft's fc_layers."""
  from specjax.models.feature_draft import layer_rms
  feats = forward_hidden(TARGET.params, TARGET.cfg, tokens, collect=ML_LAYERS)[-1]  # [1, W, 3D]
  return layer_rms(feats, TARGET.cfg.d_model) @ params["fc_layers"]["kernel"]  # [1, W, D]


def _ml_reference_drafts(draft_params, tokens, k):
  """Cache-free: the target's 3-layer features of tokens[:-1], projected by fc_layers (what
  the draft reads where target features exist), then k steps feeding back its own
  predicted (last-layer) features -> k greedy drafts."""
  toks = np.asarray(tokens)[None]
  n = toks.shape[1]
  feats = np.asarray(_ml_projected_features(draft_params, _pad(toks[:, :-1])))[:, :n - 1]
  return _feed_back(draft_params, feats, toks[:, 1:], k)


def test_multi_layer_engine_drafts_equal_cache_free_reference():
  """The loop hands a multi-layer draft the target's layers 0, 1, 2 (prefill and every
  verify pass) and its cached drafting equals the cache-free reference round by round."""
  k = 3
  cfg, params = _ml_draft()
  drafter = FeatureDrafter.of(params, cfg)
  assert drafter.feature_layers == ML_LAYERS
  prompts = random_prompts(3, TARGET.cfg.vocab_size, lo=3, hi=9, seed=2)
  prompt = np.zeros((3, 16), np.int32)
  for b, p in enumerate(prompts):
    prompt[b, :len(p)] = p
  lens = np.array([len(p) for p in prompts], np.int32)
  state = run(TARGET.params, Recorder(drafter, k=k), jnp.asarray(prompt), jnp.asarray(lens),
              jnp.int32(24), jax.random.PRNGKey(0), target_cfg=TARGET.cfg,
              sampling=SamplingParams(), k=k, eos_ids=(), max_len=128)
  _, drafts_log, n_log, _ = jax.device_get(state.draft_state)
  tokens = np.asarray(state.tokens)
  gains, accepted = set(), int(np.asarray(state.accepted).sum())
  for b in range(3):
    rounds = int(state.rounds[b])
    for r in range(rounds):
      n = int(n_log[r, b])
      assert drafts_log[r, b].tolist() == _ml_reference_drafts(params, tokens[b, :n], k), (b, r)
      if r + 1 < rounds:
        gains.add(int(n_log[r + 1, b]) - n)
  assert len(gains) > 1 and accepted > 0, gains


def test_multi_layer_draft_greedy_equals_target_alone():
  import specjax
  cfg, params = _ml_draft()
  draft = types.SimpleNamespace(name="ml", cfg=cfg, params=params)
  prompts = random_prompts(4, TARGET.cfg.vocab_size, lo=2, hi=12, seed=5)
  alone = specjax.generate(TARGET, prompts, 20)
  for k in (1, 4):
    spec = specjax.generate(TARGET, prompts, 20, draft=draft, k=k)
    assert spec.tokens == alone.tokens, k
    assert spec.stats.acceptance_rate > 0


def test_multi_layer_draft_sampling_is_exact():
  """Chi-square of the first sampled tokens (two rounds, a bonus, a rollback) against exact enumeration (the helpers and
  negative control of tests/test_exact_sampling.py) for a draft over both target layers."""
  import dataclasses as dc
  import test_exact_sampling as ex
  cfg, params = build_feature_draft(ex.TARGET.cfg, ex.TARGET.params, n_layers=1,
                                    key=jax.random.PRNGKey(4), init_std=0.5, feature_layers=(0, 1))
  params["fc_layers"]["kernel"] = 0.5 * jax.random.normal(jax.random.PRNGKey(8),
                                                          params["fc_layers"]["kernel"].shape)
  draft = dc.replace(ex.DRAFT, cfg=cfg, params=params)
  sampling = SamplingParams(1.0)
  counts, stats = ex.sampled_joint(sampling, 2, draft=draft)
  ex.assert_rounds_covered(stats, 2)
  fails, stat, df = ex.chi_square_fails(counts, ex.exact_joint(sampling, ex.NEW_TOKENS[2]))
  assert not fails, f"chi2={stat:.1f} with df={df}"


def test_toy_three_layer_feature_distillation_raises_alpha(tmp_path):
  """3-layer features (EAGLE-3 style) on a 3-layer toy target: losses fall, alpha rises,
  fc_layers trains; the pool caches the 3-layer features under their own file name."""
  sys.path.insert(0, ROOT)
  from tests.training.test_training import _tiny_config, _toy
  from specjax.training import read_metrics, train
  c = _tiny_config(num_steps=60, **{"data.teacher": "topk"})
  c.toy.n_layers = 3
  c.draft.kind, c.draft.init_std, c.draft.feature_layers = "feature", 0.02, (0, 1, 2)
  c.draft.feature_weight, c.draft.feature_noise, c.draft.unroll_steps = 1.0, 0.05, 2
  c.eval.engine, c.eval.every = True, 60
  t, tp, hp = _toy(c)
  summary = train(c, str(tmp_path), t, tp, hp, progress=False)
  rows = read_metrics(str(tmp_path))
  loss = [r["distill_loss"] for r in rows if "distill_loss" in r]
  evals = [r for r in rows if "alpha" in r]
  assert np.mean(loss[-10:]) < 0.5 * np.mean(loss[:5])
  assert evals[-1]["alpha"] >= evals[0]["alpha"] + 0.2, evals
  params = summary["draft_params"]
  assert params["feature_layers"].tolist() == [0, 1, 2]
  _, init = build_feature_draft(t.cfg, t.params, n_layers=1, feature_layers=(0, 1, 2),
                                key=jax.random.fold_in(jax.random.PRNGKey(c.seed), 2), init_std=0.02)
  assert not np.allclose(params["fc_layers"]["kernel"], init["fc_layers"]["kernel"])
  assert os.path.exists(tmp_path / "data" / "target_features_l0-1-2.npz")
  assert not os.path.exists(tmp_path / "data" / "target_features.npz")


def test_multi_layer_asset_roundtrip_and_bad_layers(tmp_path):
  import pytest
  from specjax.training import draft as draft_lib, export
  cfg, params = _ml_draft()
  export.save_asset(cfg, params, str(tmp_path / "asset"), target="tiny")
  target = types.SimpleNamespace(params=TARGET.params, cfg=TARGET.cfg, tokenizer=None,
                                 eos_ids=(), bos_id=None)
  loaded = export.load_asset(str(tmp_path / "asset"), target=target)
  assert loaded.params["feature_layers"].tolist() == list(ML_LAYERS)
  np.testing.assert_allclose(loaded.params["fc_layers"]["kernel"], params["fc_layers"]["kernel"],
                             atol=2e-3)
  draft = lambda **kw: types.SimpleNamespace(get=lambda k, d=None: kw.get(k, d))
  assert draft_lib.feature_layers(draft(feature_layers="last"), 3) is None
  assert draft_lib.feature_layers(draft(feature_layers=(2,)), 3) is None
  assert draft_lib.feature_layers(draft(feature_layers=(0, 1, 2)), 3) == (0, 1, 2)
  assert draft_lib.feature_layers(draft(feature_layers=(-1,)), 3) is None
  assert draft_lib.feature_layers(draft(feature_layers=(0, 1, -1)), 3) == (0, 1, 2)
  for bad in ((0, 1), (2, 1, 2), (1, 1, 2), "first", ()):
    with pytest.raises(ValueError, match="feature_layers"):
      draft_lib.feature_layers(draft(feature_layers=bad), 3)
