"""P-EAGLE: the drafter's one cached pass equals speculators' element semantics
(`peagle.cod_logits`) at the anchor n - 2 and depths 0 .. k - 1."""
import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import eagle3, peagle as peagle_lib
from specjax.models.config import ModelConfig
from tiny_models import tiny

TARGET = tiny("llama", vocab=29, layers=3, seed=0)


def test_parallel_pass_equals_cod_elements():
  layer = ModelConfig("llama", 29, 32, 2, 4, 2, 8, 64, max_positions=512, qk_norm=True)
  e3 = eagle3.Eagle3Config(layer=layer, aux_layers=(1, 3), target_d_model=32,
                           draft_vocab_size=29, fc_norm=True)
  params = eagle3.init_params(e3, jax.random.PRNGKey(0), TARGET.params["embed"], std=0.3)
  params["mask_hidden"] = jax.random.normal(jax.random.PRNGKey(1), (64,))
  cfg = peagle_lib.PEagleConfig(eagle3=e3, mask_token_id=28, n_depths=3)
  rng = np.random.default_rng(0)
  t, k = 12, 3
  aux = jnp.asarray(rng.normal(size=(1, t, 64)), jnp.float32)
  seqs = jnp.asarray(rng.integers(0, 28, (1, t)), jnp.int32)  # x_0 .. x_{T-1}
  g = eagle3.fuse(params, e3, aux)
  fwd = jax.jit(eagle3.forward, static_argnums=1)
  pas = jax.jit(peagle_lib.parallel_pass, static_argnums=(1, 6))
  cod = jax.jit(peagle_lib.cod_logits, static_argnums=1)
  for n, start in ((9, 7), (9, 5), (12, 8)):  # n final tokens; entries < start cached
    cache = eagle3.init_cache(params, e3, 1, 32)
    _, cache = fwd(params, e3, g[:, :start], seqs[:, 1:start + 1], cache)
    c = k + 1
    gc = jnp.pad(g, ((0, 0), (0, c), (0, 0)))[:, start:start + c]
    tc = jnp.pad(seqs, ((0, 0), (0, c)))[:, start + 1:start + 1 + c]
    got, _ = pas(params, cfg, cache, gc, tc, jnp.asarray([n - 2]), k)
    anchor = jnp.concatenate([jnp.arange(n - 1), jnp.full((k - 1,), n - 2)])
    depth = jnp.concatenate([jnp.zeros((n - 1,), jnp.int32), jnp.arange(1, k)])
    want = cod(params, cfg, aux[:, :n - 1], seqs[:, 1:n], anchor, depth)
    np.testing.assert_allclose(got[0], want[0, n - 2:], atol=1e-5, rtol=1e-5)
