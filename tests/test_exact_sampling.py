"""Speculative sampling follows the target's warped distribution exactly.

On a 5-token vocabulary the joint law of the first three generated tokens is
enumerated exactly from the target (125 outcomes) and compared with N = 12,000
speculative samples by a chi-square test: df <= 124, and we fail above
df + 6 sqrt(2 df) (~ p < 1e-6), so a correct sampler essentially never fails. The
negative control (accept every draft) must fail the same test.
"""
import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.sampling import SamplingParams, warp
from tiny_models import tiny

V = 5
TARGET = tiny("llama", vocab=V, layers=2, seed=0, std=0.5)
DRAFT = tiny("llama", vocab=V, layers=1, seed=1, std=0.5)
PROMPT = [1, 3, 0]
N_CALLS, ROWS = 4, 3000


def exact_joint(sampling: SamplingParams) -> np.ndarray:
  """P(t1, t2, t3 | PROMPT) under the target's warped conditionals, by enumeration."""
  pairs = list(itertools.product(range(V), repeat=2))
  seqs = np.array([PROMPT + list(p) for p in pairs])  # [25, 5]
  probs = np.asarray(warp(TARGET.logits(seqs), sampling), np.float64)  # [25, 5, V]
  n = len(PROMPT)
  joint = np.zeros((V, V, V))
  for row, (a, b) in enumerate(pairs):
    joint[a, b, :] = probs[row, n - 1, a] * probs[row, n, b] * probs[row, n + 1]
  return joint


def sampled_joint(sampling, k, verifier=None, draft=DRAFT) -> np.ndarray:
  counts = np.zeros((V, V, V))
  for seed in range(N_CALLS):
    out = specjax.generate(TARGET, [PROMPT] * ROWS, 3, draft=draft, k=k, seed=seed,
                           temperature=sampling.temperature, top_k=sampling.top_k,
                           top_p=sampling.top_p, verifier=verifier)
    for toks in out.tokens:
      counts[tuple(toks[:3])] += 1
  return counts


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


SETTINGS = [(SamplingParams(1.0), 1), (SamplingParams(0.8, top_k=3), 2),
            (SamplingParams(1.2, top_p=0.8), 2)]


@pytest.mark.parametrize("sampling,k", SETTINGS)
def test_speculative_sampling_is_exact(sampling, k):
  probs = exact_joint(sampling)
  assert (probs > 0.01).sum() >= 8, "the target law should not be nearly deterministic"
  fails, stat, df = chi_square_fails(sampled_joint(sampling, k), probs)
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
  counts = np.zeros((V, V, V))
  for seed in range(N_CALLS):
    out = specjax.generate(TARGET, [PROMPT] * ROWS, 3, draft=reduced, k=2, seed=seed,
                           temperature=1.0)
    for toks in out.tokens:
      counts[tuple(toks[:3])] += 1
  fails, stat, df = chi_square_fails(counts, exact_joint(sampling))
  assert not fails, f"chi2={stat:.1f} with df={df}"


def test_feature_draft_sampling_is_exact():
  """An EAGLE-style draft (q from the target's features, then its own predicted ones)."""
  from specjax.training.draft import build_feature_draft
  cfg, params = build_feature_draft(TARGET.cfg, TARGET.params, n_layers=1,
                                    key=jax.random.PRNGKey(4), init_std=0.5)
  draft = dataclasses.replace(DRAFT, cfg=cfg, params=params)
  sampling = SamplingParams(1.0)
  fails, stat, df = chi_square_fails(sampled_joint(sampling, 2, draft=draft), exact_joint(sampling))
  assert not fails, f"chi2={stat:.1f} with df={df}"


@pytest.mark.parametrize("sampling,k", SETTINGS[:2])
def test_negative_control_fails(sampling, k):
  probs = exact_joint(sampling)
  fails, stat, df = chi_square_fails(sampled_joint(sampling, k, accept_everything), probs)
  assert fails, f"the wrong rule passed: chi2={stat:.1f} with df={df}"
