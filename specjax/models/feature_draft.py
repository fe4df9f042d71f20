"""EAGLE-style feature drafts (Li et al., 2024): predict the target's next hidden state.

Axes: B batch, T positions, S cache slots, D model width.

A feature draft reads, at position j, the token at j + 1 and the target's *feature*
f_j (its hidden state after the last block, before the final norm) and predicts
f_{j+1}; the target's own final norm and head (or a reduced FR-Spec head) turn the
prediction into a distribution for the token at j + 2. Params are the usual layout
(see `specjax.models.params`) plus

    "fc": {"kernel": [2D, D]}    # [embed(token); feature] -> the blocks' input

with "embed", "final_norm" and the head shared with (and frozen as) the target's.
Both halves of the fc input are scaled to unit RMS first: the target's features are
large (RMS ~30 for SmolLM2, a few dims ~300) and its embeddings small, and only a
feature's direction matters to the head (its final norm is scale-free).
Drafting k tokens: one pass over the positions whose target features are known,
then k - 1 passes that feed back the draft's own predicted features.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from specjax.models.cache import KVCache
from specjax.models.config import ModelConfig
from specjax.models.transformer import blocks, embed, positions_for


def is_feature_draft(params: dict) -> bool:
  return "fc" in params


def unit_rms(x: jax.Array, eps: float = 1e-6) -> jax.Array:
  """x / RMS(x) over the last axis, in float32 (a parameter-free RMSNorm)."""
  xf = x.astype(jnp.float32)
  return xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + eps)


def feature_forward(params: dict, cfg: ModelConfig, features: jax.Array, next_tokens: jax.Array,
                    cache: Optional[KVCache] = None):
  """features [B, T, D] (f_j), next_tokens [B, T] (token j + 1) ->
  (predicted features f_{j+1} [B, T, D], cache advanced by T)."""
  positions = positions_for(cache, *next_tokens.shape)
  e = embed(params, cfg, next_tokens, positions)  # [B, T, D]
  x = jnp.concatenate([unit_rms(e), unit_rms(features)], axis=-1).astype(e.dtype)
  x = x @ params["fc"]["kernel"]
  return blocks(params, cfg, x, positions, cache)
