"""The shared warp function against a direct numpy reference."""
import jax
import numpy as np
import pytest

from specjax.sampling import SamplingParams, argmax, sample, warp


def numpy_warp(logits, temperature, top_k, top_p):
  """The rule, written out. Ties: top-k keeps every id whose logit is >= the k-th
  largest (so more than k when ids tie with the k-th); top-p keeps the smallest prefix
  of the sorted ids whose mass reaches top_p, then every id tied with its last one.
  Greedy: the lowest id among tied maxima."""
  logits = np.asarray(logits, np.float64)
  if temperature == 0:
    out = np.zeros_like(logits)
    out[np.argmax(logits)] = 1
    return out
  z = logits / temperature
  if 0 < top_k < len(z):
    kth = np.sort(z)[::-1][top_k - 1]
    z = np.where(z < kth, -np.inf, z)
  if top_p < 1:
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    keep, mass = [], 0.0
    for i in order:  # smallest prefix of the sorted tokens whose mass reaches top_p
      keep.append(i)
      mass += probs[i]
      if mass >= top_p:
        break
    keep += [i for i in order if z[i] == z[keep[-1]]]  # and every id tied with the last
    mask = np.full_like(z, -np.inf)
    mask[keep] = 0
    z = z + mask
  p = np.exp(z - z.max())
  return p / p.sum()


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.9), (0.8, 10, 0.7), (2.0, 3, 0.5),
    (1.0, 1, 1.0), (1.0, 0, 0.05), (0.0, 0, 1.0), (0.0, 5, 0.3)])
def test_warp_matches_numpy(temperature, top_k, top_p):
  logits = np.random.default_rng(0).normal(size=(6, 40)) * 2
  got = np.asarray(warp(logits, SamplingParams(temperature, top_k, top_p)))
  want = np.stack([numpy_warp(row, temperature, top_k, top_p) for row in logits])
  np.testing.assert_allclose(got, want, atol=1e-5)
  assert np.allclose(got.sum(-1), 1, atol=1e-5)


@pytest.mark.parametrize("top_p", [0.001, 0.3, 0.9, 0.95, 0.999])
def test_top_p_on_a_large_vocabulary(top_p):
  """The sort-free top-p (a bisection over the logits' order keys) keeps exactly the ids
  the sorted rule keeps on a 4096-id vocabulary: negative, zero (-0.0 too) and large
  logits, peaked and flat rows, and -inf entries left by top-k."""
  rng = np.random.default_rng(2)
  logits = rng.normal(size=(5, 4096)) * np.array([[0.3], [2.0], [6.0], [1.0], [1.0]])
  logits[3, :100] = 0.0
  logits[3, 100:200] = -0.0
  logits[4, rng.permutation(4096)[:3000]] = -np.inf
  logits = logits.astype(np.float32)
  got = np.asarray(warp(logits, SamplingParams(1.0, 0, top_p)))
  for row, g in zip(logits, got):
    want = numpy_warp(row, 1.0, 0, top_p)
    np.testing.assert_array_equal(g > 0, want > 0)
    np.testing.assert_allclose(g, want, atol=1e-6)


# Tied logits: groups of 2, 3, 2 and 3 equal values. Mass of the groups at T = 1:
# ~0.46, 0.38, 0.09, 0.06, so each top_p below lands inside a group, away from a group edge.
TIED = np.log(np.array([6, 6, 3.33, 3.33, 3.33, 1.2, 1.2, 0.5, 0.5, 0.5]))


@pytest.mark.parametrize("top_k,top_p,n_kept", [
    (1, 1.0, 2), (2, 1.0, 2), (3, 1.0, 5), (4, 1.0, 5), (6, 1.0, 7), (8, 1.0, 10),
    (0, 0.2, 2), (0, 0.5, 5), (0, 0.7, 5), (0, 0.9, 7), (0, 0.97, 10), (3, 0.3, 2),
    (3, 0.6, 5), (6, 0.95, 7), (8, 0.99, 10)])
def test_warp_keeps_whole_tie_groups(top_k, top_p, n_kept):
  """top-k and top-p with ties, against the numpy rule: a tie group at the cut is kept
  whole, and shuffling the ids only shuffles the output (no order dependence)."""
  sampling = SamplingParams(1.0, top_k, top_p)
  got = np.asarray(warp(TIED[None], sampling))[0]
  np.testing.assert_allclose(got, numpy_warp(TIED, 1.0, top_k, top_p), atol=1e-6)
  assert (got > 0).sum() == n_kept
  perm = np.random.default_rng(1).permutation(len(TIED))
  np.testing.assert_allclose(np.asarray(warp(TIED[perm][None], sampling))[0], got[perm], atol=1e-6)


def test_greedy_tie_takes_the_lowest_id():
  logits = np.array([[0.0, 2.0, 1.0, 2.0], [3.0, 3.0, 3.0, 3.0]], np.float32)
  np.testing.assert_array_equal(np.asarray(warp(logits, SamplingParams(0.0))),
                                [[0, 1, 0, 0], [1, 0, 0, 0]])


def test_argmax_is_numpy_argmax():
  """The max-and-masked-min argmax against numpy's: random rows, ties (the first wins),
  rows of -inf, a NaN (numpy returns the first NaN), float32 and bfloat16 logits."""
  rng = np.random.default_rng(0)
  x = rng.standard_normal((3, 7, 1000)).astype(np.float32)
  x[0, 1, [5, 900]] = 50.0  # a tie: the lower id
  x[1, 2] = -np.inf
  x[2, 3, [17, 400]] = np.nan  # the first NaN
  x[2, 4, 3] = np.inf
  want = np.argmax(x, -1)
  got = np.asarray(jax.jit(argmax)(x))
  np.testing.assert_array_equal(got, want)
  assert got.dtype == np.int32
  xb = jax.numpy.asarray(x).astype(jax.numpy.bfloat16)
  np.testing.assert_array_equal(np.asarray(argmax(xb)), np.argmax(np.asarray(xb.astype(np.float32)), -1))


def test_sampling_is_reproducible_and_follows_probs():
  probs = warp(np.log(np.array([[0.1, 0.2, 0.3, 0.4]] * 20000)), SamplingParams(1.0))
  a = np.asarray(sample(jax.random.PRNGKey(3), probs))
  b = np.asarray(sample(jax.random.PRNGKey(3), probs))
  np.testing.assert_array_equal(a, b)
  freq = np.bincount(a, minlength=4) / len(a)
  np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.015)


def test_sample_never_draws_zero_probability_ids_and_one_hot_is_argmax():
  # Zeros at both ends and in the middle, unnormalised (the verifier's residual), and
  # one-hot rows (greedy): 20,000 draws each.
  probs = np.zeros((20000, 7), np.float32)
  probs[:, [1, 3, 4]] = [0.5, 0.25, 1.25]  # sums to 2.0
  got = np.asarray(sample(jax.random.PRNGKey(0), probs))
  assert set(np.unique(got)) <= {1, 3, 4}
  np.testing.assert_allclose(np.bincount(got, minlength=7)[[1, 3, 4]] / len(got),
                             [0.25, 0.125, 0.625], atol=0.015)
  one_hot = np.eye(7, dtype=np.float32)[np.arange(20000) % 7]
  np.testing.assert_array_equal(np.asarray(sample(jax.random.PRNGKey(1), one_hot)),
                                np.arange(20000) % 7)


@pytest.mark.parametrize("kwargs,match", [
    (dict(temperature=-0.5), "temperature"), (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"), (dict(top_k=-1), "top_k")])
def test_bad_sampling_params(kwargs, match):
  with pytest.raises(ValueError, match=match):
    SamplingParams(**kwargs)
