"""Teacher and student distributions over the draft's support.

Axes: B batch, T positions, K sparse teacher entries, N support, V full vocabulary.

The support is the set of token ids the draft can emit: the whole vocabulary, or
`params["head_vocab"]` for an FR-Spec style reduced head. Losses compare the teacher
(the frozen target) and the student (the draft) on that support; teacher mass on ids
the draft can never emit is dropped and the rest renormalised, which is the best a
reduced-vocabulary draft can do (verification stays exact whatever the draft emits).

Two ways to get the teacher, both computed from the frozen target's logits, never
stored for the whole vocabulary:
  online  the target runs on the training batch inside the train step;
  top-k   the target's top-K log-probabilities per position are stored with the
          sampled sequences (computed while the target generates them, or by one
          target pass over draft-generated ones), and densified on the support at
          train time, the remaining mass spread uniformly over the other ids.

A feature (EAGLE-style) draft's teacher is the target's head on the target's own
features; `add_features` computes those features for a pool (the last layer, or the
concatenation of several layers [N, L, L_f * D]) once and caches them.
"""
from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import ModelConfig
from specjax.models.transformer import forward, forward_hidden, norm
from specjax.training.store import cached_pool, live_width

_RESIDUAL_FLOOR = 1e-6


def support_ids(params: dict, cfg: ModelConfig) -> jax.Array:
  """[N] int32 token ids the draft can emit."""
  if "head_vocab" in params:
    return jnp.asarray(params["head_vocab"], jnp.int32)
  return jnp.arange(cfg.vocab_size, dtype=jnp.int32)


def support_index(support: jax.Array, vocab_size: int) -> jax.Array:
  """[V] int32 map from token id to its support position, -1 when outside."""
  return jnp.full((vocab_size,), -1, jnp.int32).at[support].set(
      jnp.arange(support.shape[0], dtype=jnp.int32))


def student_logits(params: dict, cfg: ModelConfig, tokens: jax.Array) -> jax.Array:
  """Draft logits on its support, cache-free: tokens [B, T] -> float32 [B, T, N].

  Same numbers as `specjax.models.forward` at the support ids, without building the
  [B, T, V] array (the other ids have probability exactly zero there).
  """
  hidden, _ = forward_hidden(params, cfg, tokens)
  return support_logits(params, cfg, hidden)


def support_logits(params: dict, cfg: ModelConfig, hidden: jax.Array) -> jax.Array:
  """Final norm and head on the support only: hidden [B, T, D] -> float32 [B, T, N]."""
  x = norm(params["final_norm"], cfg, hidden)  # [B, T, D]
  support = support_ids(params, cfg)
  if cfg.tie_embeddings:
    kernel = jnp.take(params["embed"], support, axis=0).T  # [D, N]
  else:
    kernel = jnp.take(params["lm_head"]["kernel"], support, axis=1)
  return (x @ kernel).astype(jnp.float32)


def online_teacher_logp(target_params: dict, target_cfg: ModelConfig, tokens: jax.Array,
                        support: jax.Array) -> jax.Array:
  """Frozen target's log-probabilities renormalised on the support: [B, T] -> [B, T, N]."""
  logits, _ = forward(jax.lax.stop_gradient(target_params), target_cfg, tokens)  # [B, T, V]
  return jax.nn.log_softmax(jnp.take(logits, support, axis=-1), axis=-1)


def topk_logp(logits: jax.Array, k: int):
  """Full logits [..., V] -> (ids [..., K] int32, log-probs [..., K] float32) of the top K."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  vals, ids = jax.lax.top_k(logp, k)
  return ids.astype(jnp.int32), vals


def dense_teacher_logp(teacher_ids: jax.Array, teacher_logp: jax.Array,
                       index: jax.Array, n_support: int) -> jax.Array:
  """Sparse top-K teacher [B, T, K] -> log-probabilities on the support [B, T, N].

  Top-K entries inside the support keep their probability; the mass the top K leave
  uncovered is spread uniformly over the support ids outside the top K (floored at
  1e-6 so every support id has nonzero probability); then renormalised.
  """
  p = jnp.exp(teacher_logp)  # [B, T, K]
  pos = index[teacher_ids]  # [B, T, K], -1 outside the support
  inside = pos >= 0
  pos = jnp.where(inside, pos, 0)
  b, t, _ = p.shape
  bi = jnp.arange(b)[:, None, None]
  ti = jnp.arange(t)[None, :, None]
  dense = jnp.zeros((b, t, n_support), jnp.float32).at[bi, ti, pos].add(jnp.where(inside, p, 0.0))
  covered = jnp.zeros((b, t, n_support), jnp.bool_).at[bi, ti, pos].max(inside)
  n_rest = jnp.maximum(n_support - covered.sum(-1, keepdims=True), 1)
  residual = jnp.maximum(1.0 - p.sum(-1, keepdims=True), _RESIDUAL_FLOOR)
  dense = jnp.where(covered, dense, residual / n_rest)
  return jnp.log(dense) - jnp.log(dense.sum(-1, keepdims=True))


def teacher_logp_on_support(batch: dict, support: jax.Array, vocab_size: int,
                            target: Optional[tuple] = None) -> jax.Array:
  """The teacher for a batch: online from `target` = (params, cfg), else from the stored top K."""
  if "teacher_ids" in batch:
    return dense_teacher_logp(batch["teacher_ids"], batch["teacher_logp"],
                              support_index(support, vocab_size), support.shape[0])
  if target is None:
    raise ValueError("The batch carries no stored teacher and no target was given for the online teacher.")
  return online_teacher_logp(target[0], target[1], batch["tokens"], support)


def stored_teacher(batch: dict, draft_ids: Optional[jax.Array], vocab_size: int) -> tuple:
  """A pool batch's stored teacher for an online-teacher draft (EAGLE-3, P-EAGLE, DFlash):
  (features [B, T, F] float32, log-probabilities [B, T, Vd] on the draft vocabulary
  `draft_ids`, the whole vocabulary when None), the float16 top K read in float32."""
  ids = jnp.arange(vocab_size) if draft_ids is None else draft_ids
  logp = dense_teacher_logp(batch["teacher_ids"], batch["teacher_logp"].astype(jnp.float32),
                            support_index(ids, vocab_size), ids.shape[0])
  return batch["features"].astype(jnp.float32), logp


@functools.partial(jax.jit, static_argnames=("cfg", "layers"))
def _features(params, cfg: ModelConfig, tokens, *, layers=None):
  out = forward_hidden(params, cfg, tokens, collect=layers)
  return out[-1] if layers else out[0]


def target_features(pool: dict, target_params, target_cfg: ModelConfig, batch_size: int = 8,
                    layers: Optional[tuple] = None) -> np.ndarray:
  """[N, L, F] float16: the target's last hidden state (before its final norm; F = D) at
  every position of the pool's sequences, or with `layers` the concatenation of those
  layers' outputs (F = len(layers) x D), for feature drafts (one cache-free target pass)."""
  n, seq_len = pool["tokens"].shape
  width = target_cfg.d_model * (len(layers) if layers else 1)
  out = np.zeros((n, seq_len, width), np.float16)
  for start in range(0, n, batch_size):
    toks = pool["tokens"][start:start + batch_size]
    rows = toks.shape[0]
    # Causal: the columns up to just past the last masked position (a multiple of 64, few
    # shapes to compile) give the same features; the padding after them stays zero.
    cols = live_width(pool["mask"][start:start + batch_size]) if "mask" in pool else seq_len
    toks = np.pad(toks[:, :cols], ((0, batch_size - rows), (0, 0)))
    out[start:start + rows, :cols] = np.asarray(_features(
        target_params, target_cfg, jnp.asarray(toks), layers=layers))[:rows].astype(np.float16)
  return out


def features_file(stem: str, layers: Optional[tuple]) -> str:
  """Cache file stem of a pool's features: `stem` for the last layer, stem_l2-15-29 for layers."""
  return stem if not layers else f"{stem}_l{'-'.join(map(str, layers))}"


def add_features(pool: dict, target, path: Optional[str], log, layers: Optional[tuple] = None) -> None:
  """pool["features"]: the target's features of the pool's sequences, cached at `path`.
  A cache of another shape (written for another pool or other layers) is a ValueError."""

  def make():
    log(f"Target features of {pool['tokens'].shape[0]} sequences ...")
    return {"features": target_features(pool, target.params, target.cfg, layers=layers)}
  feats = cached_pool(path, make)["features"]
  want = pool["tokens"].shape + (target.cfg.d_model * (len(layers) if layers else 1),)
  if feats.shape != want:
    raise ValueError(f"Cached features {path} have shape {feats.shape} but this config's pool "
                     f"needs {want}: the cache was written by another config. Delete it (or use a "
                     "fresh --workdir) to recompute it.")
  pool["features"] = feats
