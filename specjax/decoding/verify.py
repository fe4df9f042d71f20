"""Speculative verification for ONE row; `verify_batch` vmaps it over the batch.

Axes: k drafted tokens, V vocabulary.

Accept drafted x_i with probability min(1, p_i(x_i) / q_i(x_i)); at the first
rejection draw the replacement from norm(max(0, p_i - q_i)); after k acceptances
draw a bonus token from p_k. With one-hot p (greedy) this is exact-match
verification, so greedy and sampled decoding share this one rule.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax import sampling as sampling_lib


def verify_row(drafts: jax.Array, q: jax.Array, p: jax.Array,
               key: jax.Array) -> tuple[jax.Array, jax.Array]:
  """drafts [k] int, q [k, V], p [k+1, V], key -> (n_accepted in [0, k], next token)."""
  k = drafts.shape[0]
  key_accept, key_next = jax.random.split(key)
  idx = jnp.arange(k)
  p_x = p[idx, drafts]  # [k]
  q_x = q[idx, drafts]  # [k]
  u = jax.random.uniform(key_accept, (k,))
  accept = u * q_x < p_x  # u < p/q without dividing by q
  n = jnp.sum(jnp.cumprod(accept.astype(jnp.int32)))  # length of the accepted prefix
  q_ext = jnp.concatenate([q, jnp.zeros_like(p[:1])], axis=0)  # [k+1, V]; bonus: q = 0
  residual = jnp.maximum(p[n] - q_ext[n], 0.0)
  mass = residual.sum()
  # p == q at the rejected position has probability 0 of rejection; fall back to p.
  residual = jnp.where(mass > 0, residual / jnp.where(mass > 0, mass, 1.0), p[n])
  next_token = sampling_lib.sample(key_next, residual)
  return n.astype(jnp.int32), next_token


def verify_batch(drafts: jax.Array, q: jax.Array, p: jax.Array, key: jax.Array,
                 row_fn=verify_row) -> tuple[jax.Array, jax.Array]:
  """drafts [B, k], q [B, k, V], p [B, k+1, V] -> (n_accepted [B], next [B]).

  row_fn: the per-row rule; `verify_row` unless a study swaps in another one.
  """
  keys = jax.random.split(key, drafts.shape[0])
  return jax.vmap(row_fn)(drafts, q, p, keys)
