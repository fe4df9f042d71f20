"""The P-EAGLE objective (speculators' `PEagleDraftModel.forward`, without COD subsampling).

Axes: B batch, T positions, K depths, M = (T - 1) * K elements, A*Dt aux states, V / Vd.

Element (anchor j, depth d) reads g_j and token j + 1 at depth 0, mask_hidden and the mask
token at depths >= 1 (`peagle.cod_logits`), and predicts token j + d + 2, whose target
distribution is the target's logits at position j + d + 1 (restricted to the draft
vocabulary). Every anchor is taken at every depth (speculators subsamples deeper depths
to save memory; its down-sampling only changes which elements are scored). The loss is
KL(target || draft) averaged over the elements whose target position is in the row.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.models import peagle as peagle_lib


def elements(t: int, depths: int) -> tuple:
  """(anchor [M], depth [M]): anchors 0 .. t - 1 at every depth, depth-major."""
  anchor = jnp.tile(jnp.arange(t), depths)
  return anchor, jnp.repeat(jnp.arange(depths), t)


def peagle_loss(params: dict, cfg: peagle_lib.PEagleConfig, aux: jax.Array, seqs: jax.Array,
                target_logits: jax.Array, lengths: jax.Array, depths: int) -> tuple:
  """aux [B, T, A*Dt] the target's aux states, seqs [B, T] tokens, target_logits [B, T, V]
  (position t predicts token t + 1), lengths [B] -> (loss, per-depth argmax agreement [K])."""
  b, t = seqs.shape
  anchor, depth = elements(t - 1, depths)
  pos = jnp.minimum(anchor + depth, t - 2)  # the element's own position (shifted sequence)
  logits = jax.vmap(lambda a, s: peagle_lib.cod_logits(params, cfg, a[None], s[None], anchor,
                                                       depth)[0])(aux[:, :-1], seqs[:, 1:])
  idx = jnp.minimum(anchor + depth + 1, t - 1)  # the target position it imitates
  tgt = target_logits[:, idx]  # [B, M, V]
  if "draft_ids" in params:
    tgt = jnp.take(tgt, params["draft_ids"], axis=-1)
  valid = ((anchor + depth + 1)[None] < lengths[:, None]) & (pos == anchor + depth)[None]
  log_p = jax.nn.log_softmax(tgt.astype(jnp.float32), -1)
  log_q = jax.nn.log_softmax(logits, -1)
  kl = jnp.sum(jnp.exp(log_p) * (log_p - log_q), -1)  # [B, M]
  w = valid.astype(jnp.float32)
  hit = (jnp.argmax(logits, -1) == jnp.argmax(tgt, -1)) * w
  per_depth = lambda x: x.reshape(b, depths, t - 1).sum((0, 2))
  return jnp.sum(w * kl) / jnp.maximum(jnp.sum(w), 1.0), per_depth(hit) / jnp.maximum(
      per_depth(w), 1.0)
