"""The EAGLE-3 draft forward against speculators' torch Eagle3DraftModel (1e-4, float32),
over given target aux states, for three training-time-test steps; and the cached forward
(what the drafter runs) against the cache-free one."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eagle3_helpers import AUX, D, TARGET, V, speculators_model, torch_logits
from specjax.loading import draft_formats
from specjax.models import KVCache, eagle3

T = 9


def _inputs(seed=1, a=len(AUX)):
  rng = np.random.default_rng(seed)
  return (3 * rng.normal(size=(1, T, a * D))).astype(np.float32), rng.integers(0, V, (1, T))


@pytest.mark.parametrize("variant", [
    dict(),
    dict(norm_before_residual=True),
    dict(norm_before_fc=True, norm_output=True),
    dict(fc_norm=True, layers=2),
    dict(layer_type="qwen3", vd=V),  # Qwen3 layers (q/k norms), no draft vocabulary
])
def test_logits_match_speculators(variant, tmp_path):
  m = speculators_model(**variant)
  m.save_pretrained(str(tmp_path))
  draft = draft_formats.load(str(tmp_path), TARGET, "tiny-eagle3")
  assert draft.kind == "eagle3" and draft.fmt == "speculators:eagle3"
  aux, toks = _inputs()
  want = torch_logits(m, aux, toks, steps=3)
  hs = eagle3.unrolled(draft.params, draft.cfg, jnp.asarray(aux), jnp.asarray(toks), 3)
  for s in range(3):
    got = np.asarray(eagle3.draft_logits(draft.params, draft.cfg, hs[s]))
    np.testing.assert_allclose(got, want[s], atol=1e-4, rtol=0)
    # Mapped to target ids: draft id j lands on d2t's target id, the rest at the minimum.
    full = np.asarray(eagle3.logits(draft.params, draft.cfg, hs[s]))
    ids = np.arange(want[s].shape[-1]) + (m.d2t.numpy() if m.d2t is not None else 0)
    np.testing.assert_allclose(full[..., ids], want[s], atol=1e-4, rtol=0)
    assert (np.delete(full, ids, axis=-1) == np.finfo(np.float32).min).all()


def test_cached_steps_match_unrolled():
  """Drafting with the cache (one step at a time from position i, feeding back h) gives
  the unrolled forward's steps at i: the drafter computes what speculators trains."""
  m = speculators_model(norm_output=True)
  import tempfile
  with tempfile.TemporaryDirectory() as d:
    m.save_pretrained(d)
    draft = draft_formats.load(d, TARGET, "tiny-eagle3")
  p, cfg = draft.params, draft.cfg
  aux, toks = _inputs(2)
  hs = eagle3.unrolled(p, cfg, jnp.asarray(aux), jnp.asarray(toks), 3)
  g = eagle3.fuse(p, cfg, jnp.asarray(aux))
  # All T positions from the target's states at once; then from each i, rolled back by
  # lengths, two steps feeding back h (the cache past i is never attended).
  full_h, full = jax.jit(lambda g, x: eagle3.forward(p, cfg, g, x, KVCache.init(cfg.layer, 1, 32)))(
      g, jnp.asarray(toks))
  np.testing.assert_allclose(full_h, hs[0], atol=1e-5)
  assert full.lengths.tolist() == [T]
  step = jax.jit(lambda h, x, c: eagle3.forward(p, cfg, eagle3.feedback(p, cfg, h), x, c))
  for i in (0, 3, T - 3):
    h, c = full_h[:, i:i + 1], full.with_lengths(jnp.asarray([i + 1]))
    for s in (1, 2):
      h, c = step(h, jnp.asarray(toks[:, i + s:i + s + 1]), c)
      np.testing.assert_allclose(h[:, 0], hs[s][:, i], atol=1e-5)
