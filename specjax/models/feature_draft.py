"""EAGLE-style feature drafts (Li et al., 2024): predict the target's next hidden state.

Axes: B batch, T positions, S cache slots, D model width.

A feature draft reads, at position j, the token at j + 1 and the target's *feature*
f_j (its hidden state after the last block, before the final norm) and predicts
f_{j+1}; the target's own final norm and head (or a reduced FR-Spec head) turn the
prediction into a distribution for the token at j + 2. Params are the usual layout
(see `specjax.models.params`) plus

    "fc": {"kernel": [2D, D]}    # [embed(token); feature] -> the blocks' input

with "embed", "final_norm" and the head shared with (and frozen as) the target's.
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


def feature_forward(params: dict, cfg: ModelConfig, features: jax.Array, next_tokens: jax.Array,
                    cache: Optional[KVCache] = None):
  """features [B, T, D] (f_j), next_tokens [B, T] (token j + 1) ->
  (predicted features f_{j+1} [B, T, D], cache advanced by T)."""
  positions = positions_for(cache, *next_tokens.shape)
  e = embed(params, cfg, next_tokens, positions)  # [B, T, D]
  x = jnp.concatenate([e, features.astype(e.dtype)], axis=-1) @ params["fc"]["kernel"]
  return blocks(params, cfg, x, positions, cache)
