"""Speculative sampling follows the target's warped distribution exactly.

On a 5-token vocabulary the joint law of the first n generated tokens is enumerated
exactly from the target (n = 4 at k = 1, n = 5 at k = 2: 625 / 3,125 outcomes) and
compared with N = 12,000 speculative samples by a chi-square test (cells of expectation
< 5 merged): we fail above df + 6 sqrt(2 df) (~ p < 1e-6), so a correct sampler
essentially never fails. n is long enough that rows run two or more full rounds, keep
bonus tokens and continue after a rejection rolled the caches back (asserted from the
stats). Two wrong rules must fail the same test: accept every draft, and resample a
rejected position from p instead of norm(max(0, p - q)).
"""
import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import sampling as sampling_lib
from specjax.sampling import SamplingParams, warp
from tiny_models import tiny

V = 5
TARGET = tiny("llama", vocab=V, layers=2, seed=0, std=0.5)
DRAFT = tiny("llama", vocab=V, layers=1, seed=1, std=0.5)
PROMPT = [1, 3, 0]
N_CALLS, ROWS = 4, 3000


NEW_TOKENS = {1: 4, 2: 5}  # k -> n: e.g. at k = 2 a rejection at d_1, then 3 tokens with a bonus


def exact_joint(sampling: SamplingParams, n: int) -> np.ndarray:
  """P(t_1..t_n | PROMPT) under the target's warped conditionals, by enumeration."""
  prefixes = list(itertools.product(range(V), repeat=n - 1))
  seqs = np.array([PROMPT + list(p) for p in prefixes])  # [V^(n-1), len(PROMPT) + n - 1]
  probs = np.asarray(warp(TARGET.logits(seqs), sampling), np.float64)  # [V^(n-1), ., V]
  start = len(PROMPT) - 1
  joint = np.zeros((V,) * n)
  for row, prefix in enumerate(prefixes):
    mass = np.prod([probs[row, start + i, t] for i, t in enumerate(prefix)])
    joint[prefix] = mass * probs[row, start + n - 1]
  return joint


def sampled_joint(sampling, k, verifier=None, draft=DRAFT, calls=N_CALLS) -> tuple:
  """Counts of the first NEW_TOKENS[k] tokens over calls x ROWS speculative samples,
  and the run statistics of each call."""
  n = NEW_TOKENS[k]
  counts, stats = np.zeros((V,) * n), []
  for seed in range(calls):
    out = specjax.generate(TARGET, [PROMPT] * ROWS, n, draft=draft, k=k, seed=seed,
                           temperature=sampling.temperature, top_k=sampling.top_k,
                           top_p=sampling.top_p, verifier=verifier)
    for toks in out.tokens:
      counts[tuple(toks[:n])] += 1
    stats.append(out.stats)
  return counts, stats


def assert_rounds_covered(stats_list, k):
  """From the counters: rows ran >= 2 full rounds, kept a bonus token, and ran a round
  after a rejection (two rejections in a row: at most one per round, so one was not in
  the last round and the caches were rolled back before the next)."""
  for s in stats_list:
    uncut = s.new_tokens - 1 == s.accepted.sum(1) + s.rounds  # no round lost its last token
    rejections = (s.checked - s.accepted).sum(1)
    assert ((s.rounds >= 2) & uncut).mean() > 0.1
    assert (uncut & (s.accepted[:, k - 1] > 0)).mean() > 0.02  # all k accepted + bonus kept
    assert ((s.rounds >= 2) & (rejections >= 2)).mean() > 0.1


def chi_square_fails(counts: np.ndarray, probs: np.ndarray) -> tuple:
  """Chi-square with cells of expectation < 5 merged; returns (fails, stat, df)."""
  n = counts.sum()
  exp, obs = probs.ravel() * n, counts.ravel()
  if obs[exp == 0].sum() > 0:  # an impossible outcome was sampled
    return True, np.inf, 0
  small = exp < 5
  e = np.append(exp[~small], exp[small].sum())
  o = np.append(obs[~small], obs[small].sum())
  keep = e > 0
  stat = float(((o[keep] - e[keep]) ** 2 / e[keep]).sum())
  df = int(keep.sum()) - 1
  return stat > df + 6 * np.sqrt(2 * df), stat, df


def accept_everything(drafts, q, p, key):
  """A wrong rule: keep all k drafts, then sample the bonus token from p."""
  k = drafts.shape[0]
  return jnp.int32(k), jax.random.categorical(key, jnp.log(p[k])).astype(jnp.int32)


def resample_from_p(drafts, q, p, key):
  """A subtler wrong rule: the exact acceptance test, but a rejected position is
  resampled from p rather than from the residual norm(max(0, p - q))."""
  k = drafts.shape[0]
  key_accept, key_next = jax.random.split(key)
  idx = jnp.arange(k)
  accept = jax.random.uniform(key_accept, (k,)) * q[idx, drafts] < p[idx, drafts]
  n = jnp.sum(jnp.cumprod(accept.astype(jnp.int32)))
  return n.astype(jnp.int32), sampling_lib.sample(key_next, p[n])


SETTINGS = [(SamplingParams(1.0), 1), (SamplingParams(0.8, top_k=3), 2),
            (SamplingParams(1.2, top_p=0.8), 2)]


@pytest.mark.parametrize("sampling,k", SETTINGS)
def test_speculative_sampling_is_exact(sampling, k):
  probs = exact_joint(sampling, NEW_TOKENS[k])
  assert (probs > 0.01).sum() >= 8, "the target law should not be nearly deterministic"
  counts, stats = sampled_joint(sampling, k)
  assert_rounds_covered(stats, k)
  fails, stat, df = chi_square_fails(counts, probs)
  assert not fails, f"chi2={stat:.1f} with df={df}"


def test_reduced_head_draft_sampling_is_exact():
  """A draft whose head scores only some ids (q = 0 elsewhere, FR-Spec style) still
  yields the target's law: the residual norm(max(0, p - q)) covers the missing ids."""
  from specjax.training.export import with_head_kernel
  params = with_head_kernel(DRAFT.cfg, dict(DRAFT.params,
                                            head_vocab=jnp.asarray([0, 2, 3], jnp.int32)))
  reduced = dataclasses.replace(DRAFT, params=params)
  q = np.asarray(warp(reduced.logits([PROMPT]), SamplingParams(1.0)))
  assert (q[..., [1, 4]] == 0).all() and np.allclose(q.sum(-1), 1)
  sampling = SamplingParams(1.0)
  counts, stats = sampled_joint(sampling, 2, draft=reduced)
  assert_rounds_covered(stats, 2)
  fails, stat, df = chi_square_fails(counts, exact_joint(sampling, NEW_TOKENS[2]))
  assert not fails, f"chi2={stat:.1f} with df={df}"


def test_feature_draft_sampling_is_exact():
  """An EAGLE-style draft (q from the target's features, then its own predicted ones)."""
  from specjax.training.draft import build_feature_draft
  cfg, params = build_feature_draft(TARGET.cfg, TARGET.params, n_layers=1,
                                    key=jax.random.PRNGKey(4), init_std=0.5)
  draft = dataclasses.replace(DRAFT, cfg=cfg, params=params)
  sampling = SamplingParams(1.0)
  counts, stats = sampled_joint(sampling, 2, draft=draft)
  assert_rounds_covered(stats, 2)
  fails, stat, df = chi_square_fails(counts, exact_joint(sampling, NEW_TOKENS[2]))
  assert not fails, f"chi2={stat:.1f} with df={df}"


@pytest.mark.parametrize("sampling,k,rule", [(*SETTINGS[0], accept_everything),
                                             (*SETTINGS[1], accept_everything),
                                             (*SETTINGS[1], resample_from_p)])
def test_negative_control_fails(sampling, k, rule):
  """The wrong rules fail by far (chi2 > 10x the threshold at N = 12,000): N = 3,000 does."""
  probs = exact_joint(sampling, NEW_TOKENS[k])
  counts, stats = sampled_joint(sampling, k, rule, calls=1)
  if rule is resample_from_p:  # the exact acceptance test: rounds still cover every case
    assert_rounds_covered(stats, k)
  fails, stat, df = chi_square_fails(counts, probs)
  assert fails, f"the wrong rule passed: chi2={stat:.1f} with df={df}"
