"""The draft vocabulary (d2t offsets, t2d mask): speculators' builder, mapping, checks."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import sampling
from specjax.models import draft_vocab as dv

V, VD = 40, 12


def _counts(seed=0, n=V):
  rng = np.random.default_rng(seed)
  return {int(i): int(c) for i, c in zip(rng.permutation(n)[:25], rng.integers(1, 6, 25))}


def test_frequencies_match_speculators():
  from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution
  for seed, vd in ((0, VD), (1, 25), (2, 30)):  # 30 > the 25 ids seen: filled from low ids
    counts = _counts(seed)
    d2t, t2d = dv.vocab_from_frequencies(counts, vd, V)
    ref_d2t, ref_t2d = build_vocab_mappings_from_distribution(counts, vd, V)
    np.testing.assert_array_equal(d2t, ref_d2t.numpy())
    np.testing.assert_array_equal(t2d, ref_t2d.numpy())
    ids = dv.check_vocab(d2t, t2d, V, vd)
    top = sorted(counts, key=lambda i: (-counts[i], i))[:vd]
    assert set(top) <= set(ids.tolist())
  # A [V] count array is the same as its dict.
  arr = np.zeros(V, np.int64)
  for i, c in _counts(0).items():
    arr[i] = c
  np.testing.assert_array_equal(dv.vocab_from_frequencies(arr, VD, V)[0],
                                dv.vocab_from_frequencies(_counts(0), VD, V)[0])


def test_mapping_gives_zero_q_outside():
  d2t, t2d = dv.vocab_from_frequencies(_counts(), VD, V)
  ids = dv.check_vocab(d2t, t2d, V, VD)
  logits = jax.random.normal(jax.random.PRNGKey(0), (3, VD)) * 2.0
  full = dv.to_target_logits(logits, jnp.asarray(ids), V)
  for s in (sampling.SamplingParams(0.7), sampling.SamplingParams(1.3, top_k=5),
            sampling.SamplingParams(1.0, top_p=0.8)):
    q = np.asarray(sampling.warp(full, s))
    assert (q[:, ~t2d] == 0).all()
    # The warp over the target vocabulary = the warp over the draft's, mapped.
    ref = np.asarray(dv.to_target_probs(sampling.warp(logits, s), jnp.asarray(ids), V))
    np.testing.assert_allclose(q, ref, atol=1e-6)
  g = np.asarray(sampling.warp(full, sampling.SamplingParams(0.0)))
  assert (g.argmax(-1) == ids[np.asarray(logits).argmax(-1)]).all()


@pytest.mark.parametrize("bad, match", [
    ("t2d_len", "t2d has shape"),
    ("d2t_len", "d2t has 11 entries"),
    ("range", "outside the target's vocabulary"),
    ("dup", "already taken"),
    ("disagree", "disagree"),
    ("float", "integer array"),
])
def test_bad_vocab_is_one_line(bad, match):
  d2t, t2d = dv.vocab_from_frequencies(_counts(), VD, V)
  vd = VD
  if bad == "t2d_len":
    t2d = t2d[:-1]
  elif bad == "d2t_len":
    d2t = d2t[:-1]
  elif bad == "range":
    d2t = d2t.copy()
    d2t[-1] = V
  elif bad == "dup":
    d2t = d2t.copy()
    d2t[1] = d2t[0] - 1  # draft id 1 -> the same target id as draft id 0
  elif bad == "disagree":
    t2d = t2d.copy()
    t2d[np.nonzero(t2d)[0][0]] = False
    t2d[np.nonzero(~t2d)[0][-1]] = True
  elif bad == "float":
    d2t = d2t.astype(np.float32)
  with pytest.raises(ValueError, match=match) as e:
    dv.check_vocab(d2t, t2d, V, vd)
  assert "\n" not in str(e.value)


def test_bad_builder_args():
  with pytest.raises(ValueError, match="draft_vocab_size"):
    dv.vocab_from_frequencies({1: 2}, V + 1, V)
  with pytest.raises(ValueError, match="outside"):
    dv.vocab_from_frequencies({V: 2}, 3, V)
