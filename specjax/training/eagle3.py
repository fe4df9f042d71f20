"""Training an EAGLE-3 draft (`specjax.models.eagle3`) with the training-time test.

Axes: B batch, T positions, A*Dt aux width, Vd draft vocabulary, V target vocabulary.

A sequence x_0..x_T gives the draft the target's aux states at positions 0..T-1 and the
tokens x_1..x_T (speculators' `shift_batch`); step s of `eagle3.unrolled` at position i
predicts x_{i+2+s}, so it is taught the target's distribution at position i + 1 + s
restricted to the draft vocabulary (speculators' targets: the verifier head over the
draft ids), by forward KL; step s is weighted decay**s.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from specjax.models import eagle3
from specjax.models.transformer import forward_hidden, head
from specjax.training.losses import forward_kl, masked_mean


def teacher(target_params: dict, target_cfg, cfg: eagle3.Eagle3Config, seqs: jax.Array):
  """seqs [B, T+1] -> (aux [B, T, A*Dt] at positions 0..T-1, logits [B, T+1, V])."""
  h, _, aux = forward_hidden(target_params, target_cfg, seqs, collect=cfg.feature_layers)
  return aux[:, :-1], head(target_params, target_cfg, h)


def loss(params: dict, cfg: eagle3.Eagle3Config, aux: jax.Array, seqs: jax.Array,
         teacher_logits: jax.Array, mask: jax.Array, steps: int, decay: float = 1.0):
  """The training-time-test loss and per-step agreement (draft argmax == target's, over
  the draft vocabulary). mask [B, T+1]: positions whose prediction counts."""
  t = aux.shape[1]
  hs = eagle3.unrolled(params, cfg, aux, seqs[:, 1:], steps)
  ids = params.get("draft_ids")
  total, agree = 0.0, []
  for s, h in enumerate(hs):
    student = jax.nn.log_softmax(eagle3.draft_logits(params, cfg, h), -1)  # [B, T, Vd]
    tl = jnp.pad(teacher_logits[:, 1 + s:], ((0, 0), (0, s), (0, 0)))[:, :t]  # [B, T, V]
    tl = tl if ids is None else tl[..., ids]
    m = jnp.pad(mask[:, 1 + s:], ((0, 0), (0, s)))[:, :t] * (jnp.arange(t) < t - s)
    total = total + decay ** s * masked_mean(forward_kl(jax.nn.log_softmax(tl, -1), student), m)
    agree.append(masked_mean((student.argmax(-1) == tl.argmax(-1)).astype(jnp.float32), m))
  return total, jnp.stack(agree)


def fit(params: dict, cfg: eagle3.Eagle3Config, target_params: dict, target_cfg, seqs,
        mask=None, steps: int = 200, lr: float = 3e-3, ttt_steps: int = 3,
        batch_size: Optional[int] = None, seed: int = 0):
  """Adam on the draft's own weights (the embeddings stay the target's) over sequences
  seqs [N, T+1] of target tokens. Returns (params, per-step agreement of the last batch)."""
  seqs = jnp.asarray(seqs, jnp.int32)
  mask = jnp.ones(seqs.shape, jnp.float32) if mask is None else jnp.asarray(mask, jnp.float32)
  aux, logits = jax.jit(teacher, static_argnums=(1, 2))(target_params, target_cfg, cfg, seqs)
  frozen = {k: params[k] for k in ("embed", "draft_ids") if k in params}
  train = {k: v for k, v in params.items() if k not in frozen}
  tx = optax.adam(lr)
  opt = tx.init(train)
  n, bs = seqs.shape[0], batch_size or seqs.shape[0]

  @jax.jit
  def step(train, opt, idx):
    f = lambda p: loss({**p, **frozen}, cfg, aux[idx], seqs[idx], logits[idx], mask[idx],
                       ttt_steps)
    (_, agree), grads = jax.value_and_grad(f, has_aux=True)(train)
    updates, opt = tx.update(grads, opt, train)
    return optax.apply_updates(train, updates), opt, agree

  rng = np.random.default_rng(seed)
  agree = None
  for _ in range(steps):
    idx = jnp.asarray(rng.choice(n, bs, replace=False) if bs < n else np.arange(n))
    train, opt, agree = step(train, opt, idx)
  return {**train, **frozen}, np.asarray(agree)
