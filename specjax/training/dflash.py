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


# ------------------------------------------------------------------ the trainer's task

def target_pool(target, drafter, prompts, max_new_tokens: int) -> dict:
  """The target's greedy continuations of prompts and what the objective reads of them:
  {"tokens" [N, T], "lengths" [N], "feats" [N, T, L*D], "logits" [N, T, V]} (numpy)."""
  import numpy as np
  from specjax.decoding.generate import generate
  from specjax.models.interface import Decoder, target_pass
  out = generate(target, prompts, max_new_tokens)
  seqs = [list(p) + list(t) for p, t in zip(prompts, out.tokens)]
  t = max(map(len, seqs))
  tokens = np.asarray([s + [0] * (t - len(s)) for s in seqs], np.int32)
  lengths = np.asarray([len(s) for s in seqs], np.int32)
  dec = Decoder(params=target.params, cfg=target.cfg)
  hidden, _, feats = jax.jit(lambda x, n: target_pass(dec, drafter.cfg.feature_layers, x,
                                                      prefill=(n, t)))(tokens, lengths)
  return {"tokens": tokens, "lengths": lengths, "feats": np.asarray(feats),
          "logits": np.asarray(dec.head(hidden))}


def dflash_task(config, target, drafter, train_prompts, heldout_prompts, log=print):
  """A DFlash draft (`drafter` at initialisation) as a `loop.Task`: the target's greedy
  continuations as the pool, `dflash_loss` (config.dflash.gamma), held-out per-slot
  agreement and the engine's greedy alpha (config.eval.k drafts) as the evaluation.
  The target's embeddings and the draft vocabulary stay frozen."""
  import numpy as np
  import optax
  from specjax.training import data as data_lib
  from specjax.training import loop
  cfg, gamma = drafter.cfg, config.dflash.gamma
  pool = target_pool(target, drafter, train_prompts, config.data.max_new_tokens)
  held = target_pool(target, drafter, heldout_prompts, config.data.max_new_tokens)
  log(f"DFlash pool: {pool['tokens'].shape[0]} training / {held['tokens'].shape[0]} held-out "
      "sequences.")
  frozen_keys = ("embed", "draft_ids")

  def loss_of(params, batch):
    anchors, valid = anchors_of(cfg, batch["lengths"], batch["tokens"].shape[1])
    return dflash_loss(params, cfg, batch["feats"], batch["tokens"], batch["logits"], anchors,
                       valid, gamma)

  def make_step(tx, schedule):
    @jax.jit
    def step(state, frozen, batch):
      (loss, m), g = jax.value_and_grad(lambda p: loss_of({**frozen, **p}, batch),
                                        has_aux=True)(state.params)
      updates, opt_state = tx.update(g, state.opt_state, state.params)
      state = state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                            opt_state=opt_state)
      return state, {"loss": loss, "lr": schedule(state.step),
                     **{f"acc_s{i}": a for i, a in enumerate(m["acc"])}}
    return step

  held_j = jax.tree.map(jnp.asarray, held)

  def evaluate(params) -> dict:
    _, m = jax.jit(loss_of)(params, held_j)
    out = {f"heldout_acc_s{i}": float(a) for i, a in enumerate(m["acc"]) if i >= cfg.first_slot}
    if config.eval.engine:
      from specjax.decoding.generate import generate
      res = generate(target, list(heldout_prompts), config.eval.max_new_tokens,
                     drafter=drafter.replace(params=params), k=config.eval.k)
      out["alpha"] = float(res.stats.acceptance_rate)
    return out

  n = pool["tokens"].shape[0]
  return loop.Task(
      name="dflash", params=drafter.params,
      trainable_keys=tuple(k for k in drafter.params if k not in frozen_keys),
      make_step=make_step,
      batch_at=lambda step, *_: data_lib.take(
          pool, data_lib.batch_indices(config.seed, step, n, config.batch_size)),
      evaluate=evaluate,
      select=lambda m: m.get("alpha", float(np.mean([v for k, v in m.items()
                                                      if k.startswith("heldout_acc")]))),
      summary=lambda p: {"params": p})


def train_dflash(config, workdir: str, target, drafter, train_prompts, heldout_prompts,
                 log=print, progress: bool = False, stop_at=None) -> dict:
  """Trains a DFlash draft in workdir with the one training loop (resuming from its newest
  checkpoint). Returns loop.run's summary ({"metrics", "latest_step", "best_step", "params"})."""
  import os
  from specjax.training import loop
  os.makedirs(workdir, exist_ok=True)
  task = dflash_task(config, target, drafter, train_prompts, heldout_prompts, log)
  return loop.run(task, config, workdir, log=log, progress=progress, stop_at=stop_at)
