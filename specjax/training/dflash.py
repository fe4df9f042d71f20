"""The DFlash objective (speculators' `DFlashDraftModel.forward` with its default loss).

Axes: B batch, T positions, A anchors, N block size, L*D aux features, V / Vd vocabularies.

For every anchor a of a sequence (a + N - 1 < T, so the whole block has targets), the
block [x_a, mask, ...] over the context x_{<a} (`dflash.anchored_logits`) is scored
against the target: slot i predicts the token at a + i (a + i + 1 with
sample_from_anchor), whose target distribution is the target's logits at position
a + i - 1 (a + i), restricted to the draft vocabulary. The loss is the KL divergence
KL(target || draft) per slot with speculators' "fixed-exp-decay" weights: slot
`first_slot` + j weighs exp(-j / gamma) (the anchor slot 0 weighs 0 without
sample_from_anchor), averaged over the weighted slots of valid anchors.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.models import dflash as dflash_lib


def slot_weights(cfg: dflash_lib.DFlashConfig, gamma: float = 4.0) -> jax.Array:
  """[N] speculators' fixed-exp-decay weights (0 on the anchor slot without
  sample_from_anchor)."""
  i = jnp.arange(cfg.block_size, dtype=jnp.float32) - cfg.first_slot
  return jnp.where(i >= 0, jnp.exp(-jnp.maximum(i, 0) / gamma), 0.0)


def dflash_loss(params: dict, cfg: dflash_lib.DFlashConfig, feats: jax.Array, tokens: jax.Array,
                target_logits: jax.Array, anchors: jax.Array, valid: jax.Array,
                gamma: float = 4.0) -> tuple:
  """feats [B, T, L*D] the target's aux features, tokens [B, T], target_logits [B, T, V]
  (position t predicts token t + 1), anchors [A], valid [B, A] -> (loss, metrics).

  metrics: "acc" [N] the draft's argmax agreement with the target's per slot (on the
  draft vocabulary), "kl" the unweighted mean KL."""
  n = cfg.block_size
  logits = dflash_lib.anchored_logits(params, cfg, feats, tokens, anchors)  # [B, A, N, Vd]
  shift = 0 if cfg.sample_from_anchor else -1
  idx = jnp.clip(anchors[:, None] + jnp.arange(n)[None] + shift, 0, tokens.shape[1] - 1)  # [A, N]
  tgt = target_logits[:, idx]  # [B, A, N, V]
  if "draft_ids" in params:
    tgt = jnp.take(tgt, params["draft_ids"], axis=-1)  # [B, A, N, Vd]
  log_p = jax.nn.log_softmax(tgt.astype(jnp.float32), -1)
  log_q = jax.nn.log_softmax(logits, -1)
  kl = jnp.sum(jnp.exp(log_p) * (log_p - log_q), -1)  # [B, A, N]
  w = slot_weights(cfg, gamma)[None, None] * valid[:, :, None].astype(jnp.float32)  # [B, A, N]
  loss = jnp.sum(w * kl) / jnp.maximum(jnp.sum(w), 1e-9)
  hit = (jnp.argmax(logits, -1) == jnp.argmax(tgt, -1)).astype(jnp.float32)  # [B, A, N]
  cnt = jnp.maximum(jnp.sum(valid.astype(jnp.float32)), 1.0)
  metrics = {"acc": jnp.sum(hit * valid[:, :, None], (0, 1)) / cnt,
             "kl": jnp.sum((w > 0) * kl) / jnp.maximum(jnp.sum(w > 0), 1)}
  return loss, metrics


def anchors_of(cfg: dflash_lib.DFlashConfig, lengths: jax.Array, t: int) -> tuple:
  """Every anchor of sequences of `lengths` [B] padded to t: (anchors [A] = 0 .. t - 1,
  valid [B, A]: every slot's target token lies within the row)."""
  anchors = jnp.arange(t)
  last = cfg.block_size - 1 + (1 if cfg.sample_from_anchor else 0)  # the last slot's offset
  valid = anchors[None] + last < lengths[:, None]
  return anchors, valid
