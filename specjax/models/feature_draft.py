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

EAGLE-3 style multi-layer features: a draft with

    "feature_layers": [L] int32       # target layers read, ending with the last one
    "fc_layers": {"kernel": [L*D, D]} # their concatenation (each unit RMS) -> one feature

reads the concatenated outputs of L target layers (e.g. early, middle, late) where the
target's features are known, [B, T, L*D]; its own predictions (of the last layer's
next feature, [B, T, D]) are fed back as they are. Without them it reads the last
layer only (L = 1).
Drafting k tokens: one pass over the positions whose target features are known,
then k - 1 passes that feed back the draft's own predicted features.

Published EAGLE-1 drafts (`specjax.loading.draft_formats.eagle1`) map onto the same
forward with these optional parts (specjax's own drafts have none of them):

    "fc": {"bias": [D]}               # a bias on the fc (EAGLE-1's default, HASS)
    "embed_norm": {"scale": [D]}      # RMSNorm of the embedding half (speculators layernorms)
    "feature_norm": {"scale": [D]}    # the target's final norm: the draft reads the target's
                                      # final-normed hidden state, as EAGLE-1 does
    layers[i] without "attn_norm"     # no input norm (EAGLE-1's first layer)
    no "final_norm"                   # the prediction goes to the head as it is

plus `FeatureStyle(unit_rms=False)`, a static switch: EAGLE-1 feeds fc its inputs raw.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from specjax.models.cache import KVCache
from specjax.models.config import ModelConfig
from specjax.models.transformer import (attend, blocks, embed, full_head, head, mlp, norm,
                                        positions_for, project_qkv)


@dataclasses.dataclass(frozen=True)
class FeatureStyle:
  """Static choices where a published feature draft computes differently from specjax's
  own (hashable: a jit static argument; the defaults are specjax's drafts).

  unit_rms: scale both halves of fc's input to unit RMS (specjax); EAGLE-1 feeds them raw.
  feature_norm_eps: the epsilon of the target's final RMSNorm that "feature_norm" applies.
  """
  unit_rms: bool = True
  feature_norm_eps: float = 1e-6


SPECJAX_STYLE = FeatureStyle()


def is_feature_draft(params: dict) -> bool:
  return "fc" in params


def unit_rms(x: jax.Array, eps: float = 1e-6) -> jax.Array:
  """x / RMS(x) over the last axis, in float32 (a parameter-free RMSNorm)."""
  xf = x.astype(jnp.float32)
  return xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + eps)


def layer_rms(x: jax.Array, d: int) -> jax.Array:
  """Each D-wide slice of x [..., L*D] scaled to unit RMS (one layer's feature each)."""
  return unit_rms(x.reshape(x.shape[:-1] + (x.shape[-1] // d, d))).reshape(x.shape)


def feature_layers_of(params: dict) -> Optional[tuple]:
  """The target layers a feature draft reads (a host tuple), or None for the last only."""
  if "feature_layers" not in params:
    return None
  import numpy as np  # host read: params are concrete wherever a drafter is built
  return tuple(int(i) for i in np.asarray(params["feature_layers"]))


def _rms_norm(p: dict, x: jax.Array, eps: float) -> jax.Array:
  return (unit_rms(x, eps) * p["scale"]).astype(x.dtype)


def target_features(params: dict, style: FeatureStyle, hidden: jax.Array) -> jax.Array:
  """The target's hidden states [..., D] as the draft reads them: as they are (specjax),
  or through the target's final RMSNorm where the draft holds it ("feature_norm": EAGLE-1)."""
  if "feature_norm" not in params:
    return hidden
  return _rms_norm(params["feature_norm"], hidden, style.feature_norm_eps)


def draft_head(params: dict, cfg: ModelConfig, f: jax.Array) -> jax.Array:
  """Predicted features [B, T, D] -> float32 logits [B, T, V]: the final norm and the head
  (`transformer.head`), or the head alone for a draft without "final_norm" (EAGLE-1
  predicts the target's normed feature)."""
  if "final_norm" in params:
    return head(params, cfg, f)
  return full_head(params, cfg, f)[..., :cfg.vocab_size].astype(jnp.float32)


def _fc(params: dict, cfg: ModelConfig, e: jax.Array, features: jax.Array,
        style: FeatureStyle = SPECJAX_STYLE) -> jax.Array:
  """[unit_rms(embedding); unit_rms(feature)] @ fc: the blocks' input [B, T, D] (the
  halves raw without `style.unit_rms`; the embedding normed first with "embed_norm").

  features [B, T, L*D] with L > 1 (the target's, multi-layer) first go through fc_layers;
  [B, T, D] ones (the last layer's, or the draft's own predictions) go in as they are."""
  if features.shape[-1] != e.shape[-1]:
    if "fc_layers" not in params:
      raise ValueError(f"Features of width {features.shape[-1]} for a draft of width "
                       f"{e.shape[-1]} without fc_layers (a multi-layer feature draft).")
    features = layer_rms(features, e.shape[-1]).astype(e.dtype) @ params["fc_layers"]["kernel"]
  dtype = e.dtype
  if "embed_norm" in params:
    e = _rms_norm(params["embed_norm"], e, cfg.norm_eps)
  if style.unit_rms:
    e, features = unit_rms(e), unit_rms(features)
  x = jnp.concatenate([e.astype(dtype), features.astype(dtype)], axis=-1)
  y = x @ params["fc"]["kernel"]
  return y + params["fc"]["bias"] if "bias" in params["fc"] else y


def feature_forward(params: dict, cfg: ModelConfig, features: jax.Array, next_tokens: jax.Array,
                    cache: Optional[KVCache] = None, positions: Optional[jax.Array] = None,
                    mask: Optional[jax.Array] = None, style: FeatureStyle = SPECJAX_STYLE):
  """features [B, T, D] or [B, T, L*D] (f_j), next_tokens [B, T] (token j + 1) ->
  (predicted features f_{j+1} [B, T, D], cache advanced by T).
  positions [B, T] and mask [B, T, S] as in `transformer.forward_hidden` (token trees)."""
  if positions is None:
    positions = positions_for(cache, *next_tokens.shape)
  e = embed(params, cfg, next_tokens, positions)  # [B, T, D]
  return blocks(params, cfg, _fc(params, cfg, e, features, style), positions, cache, mask=mask)


def feature_forward_unrolled(params: dict, cfg: ModelConfig, features: jax.Array,
                             next_tokens: jax.Array, steps: int,
                             style: FeatureStyle = SPECJAX_STYLE) -> list:
  """Cache-free training forward that also drafts from the draft's own features
  ("training-time test", as in EAGLE-3): what the draft sees at its s-th drafting step.

  features [B, T, D] (or [B, T, L*D]) are the target's f_0..f_{T-1}, next_tokens [B, T]
  tokens 1..T.
  Stream 1 is `feature_forward`. Stream s > 1 at position i reads stream s-1's
  prediction at i - 1 (for f_i) and token i + 1, and attends to stream 1's entries at
  positions <= i - s + 1 and to stream r's entry at i - (s - r) for 1 < r <= s: exactly
  the cache a draft holds at its s-th step. Every stream predicts f_{i+1}; stream s is
  defined for i >= s - 1. Returns [stream 1 .. stream `steps`], each [B, T, D].
  """
  b, t = next_tokens.shape
  positions = positions_for(None, b, t)
  e = embed(params, cfg, next_tokens, positions)
  i = jnp.arange(t)
  kv = [[] for _ in params["layers"]]  # per layer: (k, v) of each stream so far
  outs, inp = [], features
  for s in range(1, steps + 1):
    mask = jnp.concatenate(
        [i[None, :] <= i[:, None] - (s - 1)] +
        [i[None, :] == i[:, None] - (s - r) for r in range(2, s + 1)], axis=1)[None]  # [1, T, sT]
    x = _fc(params, cfg, e, inp, style)
    for layer, p in enumerate(params["layers"]):
      h = norm(p["attn_norm"], cfg, x) if "attn_norm" in p else x
      q, k, v = project_qkv(p["attn"], cfg, h, positions)
      kv[layer].append((k, v))
      keys = jnp.concatenate([kk for kk, _ in kv[layer]], axis=1)
      values = jnp.concatenate([vv for _, vv in kv[layer]], axis=1)
      x = x + attend(p["attn"], cfg, q, keys, values, mask)
      x = x + mlp(p["mlp"], cfg, norm(p["mlp_norm"], cfg, x))
    outs.append(x)
    inp = jnp.concatenate([x[:, :1], x[:, :-1]], axis=1)  # stream s+1 at i reads x[i - 1]
  return outs
