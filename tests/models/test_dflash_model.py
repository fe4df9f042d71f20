"""The DFlash model: the cached block pass equals the cache-free anchored forward."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models import dflash as dflash_lib
from specjax.models.cache import KVCache
from tiny_models import tiny

TARGET = tiny("llama", vocab=29, layers=3, seed=0)


@pytest.mark.parametrize("windows,non_causal,sfa", [((), False, False), ((3, 0), False, True)])
def test_cached_block_equals_anchored(windows, non_causal, sfa):
  import dataclasses
  layers = dataclasses.replace(TARGET.cfg, n_layers=len(windows) or 1, qk_norm=True,
                               tie_embeddings=False)
  cfg = dflash_lib.DFlashConfig(layers=layers, block_size=4, aux_layer_ids=(1, 3),
                                mask_token_id=28, sample_from_anchor=sfa, windows=windows,
                                window_non_causal=non_causal, draft_vocab_size=10)
  params = dflash_lib.init_params(cfg, jax.random.PRNGKey(1), TARGET.params["embed"])
  params["draft_ids"] = jnp.asarray([0, 2, 3, 5, 7, 11, 13, 17, 19, 23], jnp.int32)
  rng = np.random.default_rng(0)
  t = 12
  feats = jnp.asarray(rng.normal(size=(2, t, 2 * 32)), jnp.float32)
  tokens = jnp.asarray(rng.integers(0, 29, (2, t)), jnp.int32)
  anchors = jnp.arange(t)
  want = jax.jit(dflash_lib.anchored_logits, static_argnums=(1, 5))(params, cfg, feats, tokens,
                                                                     anchors, True)
  # The cache: context written in two pieces (a prefill, then a verify pass), as the drafter does.
  cache = KVCache.init(cfg.layers, 2, t + 4)
  cache = dflash_lib.write_context(params, cfg, cache, feats[:, :5], jnp.zeros((2,), jnp.int32))
  cache = dflash_lib.write_context(params, cfg, cache, feats[:, 5:], jnp.full((2,), 5, jnp.int32))
  block = jax.jit(dflash_lib.block_logits, static_argnums=1)
  for a in (0, 1, 5, 9, 11):
    got = block(params, cfg, cache.with_lengths(jnp.full((2,), a)), tokens[:, a])
    np.testing.assert_allclose(got, want[:, a], rtol=1e-5, atol=1e-5)
  outside = np.setdiff1d(np.arange(29), np.asarray(params["draft_ids"]))
  assert (np.asarray(jax.nn.softmax(want, -1))[..., outside] == 0).all()
