"""The train step: losses, optimiser, mixed precision and gradient accumulation.

Axes: B global batch, A micro-batches (gradient accumulation), L sequence length,
D model width, F = L_f * D feature width (L_f target layers read), N draft support.

    tx, schedule = make_optimizer(config.optim, config.num_steps)
    step_fn = make_train_step(draft_cfg, target_cfg, tx, schedule, ...)
    state, metrics = step_fn(state, frozen, target_params, batch)

Only the draft's trainable params are optimised, always held in float32 (the master
weights); with precision="bfloat16" the forward and backward passes run on bfloat16
copies of every floating param and feature, while losses, log-softmaxes and the
optimizer stay float32. With accum = A > 1 the global batch is split into A micro-batches
whose gradients are averaged (a `lax.scan`) before one optimizer update.
"""
from __future__ import annotations

from typing import Any, Optional

import flax.struct
import jax
import jax.numpy as jnp
import optax

from specjax.models import ModelConfig, forward_hidden
from specjax.models.feature_draft import feature_forward_unrolled, layer_rms, unit_rms
from specjax.training.losses import LOSSES, distill_loss
from specjax.training.teacher import (student_logits, support_ids, support_logits,
                                     teacher_logp_on_support)

PRECISIONS = ("float32", "bfloat16")
SCHEDULES = ("cosine", "linear", "constant")


@flax.struct.dataclass
class TrainState:
  """Everything that changes during training (and is checkpointed).

  step: [] int32 updates applied so far. params: the draft's trainable params.
  opt_state: optax state of `params`. rng: [2] uint32 base key; the key used at step s
  is fold_in(rng, s) (on-policy draft sampling).
  """
  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array


def make_optimizer(optim, total_steps: int):
  """AdamW after global-norm clipping; learning rate: linear warm-up, then
  optim.schedule ("cosine" by default, "linear" or "constant") down to lr x end_lr_fraction."""
  kind = optim.get("schedule", "cosine")
  warmup = min(optim.warmup_steps, total_steps)
  end = optim.lr * optim.end_lr_fraction
  if kind == "cosine":
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=optim.lr, warmup_steps=warmup,
        decay_steps=max(total_steps, optim.warmup_steps + 1), end_value=end)
  elif kind in ("linear", "constant"):
    decay = (optax.linear_schedule(optim.lr, end, max(total_steps - warmup, 1))
             if kind == "linear" else optax.constant_schedule(optim.lr))
    schedule = optax.join_schedules([optax.linear_schedule(0.0, optim.lr, max(warmup, 1)), decay],
                                    [warmup])
  else:
    raise ValueError(f"optim.schedule must be one of {SCHEDULES}, got {kind!r}.")
  tx = optax.chain(optax.clip_by_global_norm(optim.clip_norm),
                   optax.adamw(schedule, b1=optim.b1, b2=optim.b2,
                               weight_decay=optim.weight_decay))
  return tx, schedule


def cast_floats(tree, dtype):
  """Every floating leaf of a pytree as `dtype` (integer leaves such as head_vocab kept)."""
  return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                      tree)


def make_train_step(draft_cfg: ModelConfig, target_cfg: ModelConfig, tx, schedule,
                    loss_name: str, beta: float, feature: bool = False,
                    feature_weight: float = 1.0, feature_noise: float = 0.0,
                    unroll_steps: int = 1, precision: str = "float32", accum: int = 1,
                    feature_layers: Optional[tuple] = None):
  """Jitted (state, frozen, target_params, batch) -> (state, metrics); state donated.

  feature: the draft is a feature draft (EAGLE); the batch then carries the target's
  features (or, without batch["features"], they are computed here from target_params:
  the layers `feature_layers`, else the last) and the teacher is the target's head on
  them (see `feature_losses`). precision: "float32" or "bfloat16" (module docstring).
  accum: micro-batches per update (the global batch must divide by it).
  """
  if loss_name not in LOSSES:
    raise ValueError(f"Unknown loss {loss_name!r}; expected one of {LOSSES}.")
  if precision not in PRECISIONS:
    raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
  if accum < 1:
    raise ValueError(f"grad_accum must be at least 1, got {accum}.")
  compute = jnp.bfloat16 if precision == "bfloat16" else None
  low = (lambda t: cast_floats(t, compute)) if compute else (lambda t: t)

  def micro_loss(trainable, frozen, target_params, batch, key):
    """(loss, (hits, mask sum, parts)) of one micro-batch."""
    params = low({**frozen, **trainable})
    if feature:
      if "features" not in batch:
        hidden = forward_hidden(low(jax.lax.stop_gradient(target_params)), target_cfg,
                                batch["tokens"], collect=feature_layers)
        batch = dict(batch, features=jax.lax.stop_gradient(hidden[-1] if feature_layers else hidden[0]))
      batch = dict(batch, features=low(batch["features"].astype(jnp.float32)))
      loss, (student, teacher, parts) = feature_losses(
          params, draft_cfg, batch, loss_name, beta, feature_weight, feature_noise, key,
          unroll_steps)
      mask = batch["mask"][:, 1:]
    else:
      support = support_ids(params, draft_cfg)  # [N]
      teacher = teacher_logp_on_support(batch, support, draft_cfg.vocab_size,
                                        (low(target_params), target_cfg))  # [B, L, N]
      logits = student_logits(params, draft_cfg, batch["tokens"])  # [B, L, N]
      student = jax.nn.log_softmax(logits, axis=-1)
      loss, parts = distill_loss(loss_name, teacher, student, batch["mask"], beta), {}
      mask = batch["mask"]
    agree = (jnp.argmax(student, -1) == jnp.argmax(teacher, -1)).astype(jnp.float32)
    return loss, ((agree * mask).sum(), mask.sum(), parts)

  grad_fn = jax.value_and_grad(micro_loss, has_aux=True)

  def train_step(state: TrainState, frozen, target_params, batch):
    key = jax.random.fold_in(state.rng, state.step)
    if accum == 1:
      (loss, (hits, tokens, parts)), grads = grad_fn(state.params, frozen, target_params, batch, key)
    else:
      micro = jax.tree.map(lambda x: x.reshape((accum, x.shape[0] // accum) + x.shape[1:]), batch)

      def body(acc, xs):
        i, mb = xs
        out, g = grad_fn(state.params, frozen, target_params, mb, jax.random.fold_in(key, i))
        return jax.tree.map(jnp.add, acc, (out, g)), None

      zero = jax.eval_shape(grad_fn, state.params, frozen, target_params,
                            jax.tree.map(lambda x: x[0], micro), key)
      zero = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), zero)
      ((loss, (hits, tokens, parts)), grads), _ = jax.lax.scan(body, zero,
                                                                 (jnp.arange(accum), micro))
      # Micro-batch losses (each a masked mean) are averaged with equal weight.
      loss, grads = loss / accum, jax.tree.map(lambda g: g / accum, grads)
      parts = {k: v / accum for k, v in parts.items()}
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), "lr": schedule(state.step),
               "train_top1_agree": hits / jnp.maximum(tokens, 1.0), "tokens": tokens, **parts}
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return jax.jit(train_step, donate_argnums=(0,))


def feature_losses(params: dict, cfg: ModelConfig, batch: dict, loss_name: str, beta: float,
                   feature_weight: float, noise: float, key: jax.Array, unroll_steps: int = 1):
  """The feature draft's loss on a batch with the target's features [B, L, F].

  Position j reads (f_j, token j+1) and predicts f_{j+1}: loss = distillation loss between
  the head on the prediction and the head on the target's f_{j+1} (the target's own
  distribution for token j+2, on the draft's support) + feature_weight x smooth-L1 between
  the (unit-RMS) features. noise: std of Gaussian noise added to the unit-RMS input features
  (as EAGLE does). unroll_steps > 1 also trains the draft on its own predicted features,
  as it drafts tokens 2..k (`feature_forward_unrolled`); the streams' losses are averaged.
  With multi-layer features (F = L_f x D, the last layer last) the prediction and the
  teacher are the last layer's. Returns (loss, (stream-1 student log-probs, teacher
  log-probs) at positions 0..L-2, {"distill_loss", "feature_loss"} of stream 1, and
  "distill_loss_s{s}" of later streams).
  """
  feats = batch["features"]  # [B, L, F]
  d = cfg.d_model
  inp = feats[:, :-1]
  if noise:  # noise relative to each layer's RMS
    inp = (layer_rms(inp, d) + noise * jax.random.normal(key, inp.shape)).astype(feats.dtype)
  preds = feature_forward_unrolled(params, cfg, inp, batch["tokens"][:, 1:], unroll_steps)
  target_feats = feats[:, 1:, -d:]  # the last layer's features
  teacher = jax.lax.stop_gradient(jax.nn.log_softmax(support_logits(params, cfg, target_feats), -1))
  mask = batch["mask"][:, 1:]  # position j+1 predicts a sampled token
  total, parts, first = 0.0, {}, None
  for s, pred in enumerate(preds):
    m = mask * (jnp.arange(mask.shape[1]) >= s)[None]  # stream s+1 starts at position s
    student = jax.nn.log_softmax(support_logits(params, cfg, pred), -1)
    dist = distill_loss(loss_name, teacher, student, m, beta)
    # Smooth L1 on unit-RMS features: the head's final norm ignores scale.
    reg = optax.huber_loss(unit_rms(pred), unit_rms(target_feats)).mean(-1)  # [B, L-1]
    reg = (reg * m).sum() / jnp.maximum(m.sum(), 1.0)
    total = total + dist + feature_weight * reg
    if s == 0:
      first = student
      parts.update(distill_loss=dist, feature_loss=reg)
    else:
      parts[f"distill_loss_s{s + 1}"] = dist
  return total / len(preds), (first, teacher, parts)
