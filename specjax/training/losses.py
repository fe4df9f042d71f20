"""Token-level distillation losses (DistillSpec, Zhou et al. 2023).

Axes: B batch, T positions, N support (the draft's output vocabulary: the full
vocabulary, or the reduced `head_vocab` ids of an FR-Spec style draft).

Every loss takes the teacher's and the student's log-probabilities over the same
support and a mask of the positions that count, and returns the masked mean over
positions of the per-position divergence:

  forward KL   D(p || q)   = sum_x p(x) (log p(x) - log q(x))
  reverse KL   D(q || p)   = sum_x q(x) (log q(x) - log p(x))
  JSD(beta)                = beta D(p || m) + (1 - beta) D(q || m),  m = beta p + (1 - beta) q
  total variation          = 1/2 sum_x |p(x) - q(x)|

p is the teacher (target) and q the student (draft). Terms with zero probability
contribute 0 (0 log 0 = 0). For greedy acceptance the token-level TVD is exactly
1 - acceptance probability of the draft under the speculative rule.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

LOSSES = ("fkl", "rkl", "jsd", "tvd")


def _xlogy_diff(w_logp: jax.Array, logp: jax.Array, logq: jax.Array) -> jax.Array:
  """sum_x exp(w_logp) (logp - logq), with 0 where exp(w_logp) == 0."""
  w = jnp.exp(w_logp)
  terms = jnp.where(w > 0, w * (logp - jnp.where(w > 0, logq, 0.0)), 0.0)
  return terms.sum(-1)


def forward_kl(teacher_logp: jax.Array, student_logp: jax.Array) -> jax.Array:
  """[..., N] x [..., N] -> [...] D(p || q)."""
  return _xlogy_diff(teacher_logp, teacher_logp, student_logp)


def reverse_kl(teacher_logp: jax.Array, student_logp: jax.Array) -> jax.Array:
  """[..., N] x [..., N] -> [...] D(q || p)."""
  return _xlogy_diff(student_logp, student_logp, teacher_logp)


def jsd(teacher_logp: jax.Array, student_logp: jax.Array, beta: float = 0.5) -> jax.Array:
  """[..., N] x [..., N] -> [...] generalised Jensen-Shannon divergence JSD(beta).

  beta -> 0 behaves like forward KL / beta and beta -> 1 like reverse KL, up to scale;
  beta must lie strictly in (0, 1).
  """
  if not 0.0 < beta < 1.0:
    raise ValueError(f"JSD beta must be in (0, 1), got {beta}.")
  log_m = jnp.logaddexp(jnp.log(beta) + teacher_logp, jnp.log1p(-beta) + student_logp)
  return (beta * _xlogy_diff(teacher_logp, teacher_logp, log_m)
          + (1.0 - beta) * _xlogy_diff(student_logp, student_logp, log_m))


def tvd(teacher_logp: jax.Array, student_logp: jax.Array) -> jax.Array:
  """[..., N] x [..., N] -> [...] total variation distance."""
  return 0.5 * jnp.abs(jnp.exp(teacher_logp) - jnp.exp(student_logp)).sum(-1)


def divergence(name: str, teacher_logp: jax.Array, student_logp: jax.Array,
               beta: float = 0.5) -> jax.Array:
  """Per-position divergence selected by name (one of LOSSES)."""
  if name == "fkl":
    return forward_kl(teacher_logp, student_logp)
  if name == "rkl":
    return reverse_kl(teacher_logp, student_logp)
  if name == "jsd":
    return jsd(teacher_logp, student_logp, beta)
  if name == "tvd":
    return tvd(teacher_logp, student_logp)
  raise ValueError(f"Unknown loss {name!r}; expected one of {LOSSES}.")


def masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
  """Mean of values [B, T] over positions where mask [B, T] is nonzero (0 if none)."""
  mask = mask.astype(jnp.float32)
  return (values * mask).sum() / jnp.maximum(mask.sum(), 1.0)


def distill_loss(name: str, teacher_logp: jax.Array, student_logp: jax.Array,
                 mask: jax.Array, beta: float = 0.5) -> jax.Array:
  """Masked mean over [B, T] of the per-position divergence; a float32 scalar."""
  return masked_mean(divergence(name, teacher_logp, student_logp, beta), mask)
