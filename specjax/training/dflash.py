"""The DFlash objective (speculators' `DFlashDraftModel.forward` with its default loss) and
its task in the one training loop.

Axes: B batch, T positions, A anchors, N block size, L*D aux features, V / Vd vocabularies.

For every anchor a of a sequence (a + N - 1 < T, so the whole block has targets), the
block [x_a, mask, ...] over the context x_{<a} (`dflash.anchored_logits`) is scored
against the target: slot i predicts the token at a + i (a + i + 1 with
sample_from_anchor), whose target distribution is the target's logits at position
a + i - 1 (a + i), restricted to the draft vocabulary. The loss is the KL divergence
KL(target || draft) per slot with speculators' "fixed-exp-decay" weights: slot
`first_slot` + j weighs exp(-j / gamma) (the anchor slot 0 weighs 0 without
sample_from_anchor), summed over the slots that count and divided by their number (plus
speculators' 1e-5), as speculators' `loss_function`. A slot counts where its anchor is
valid, it predicts (not the anchor slot without sample_from_anchor) and, given a loss
mask, the token it predicts is one the mask names (speculators' aligned loss mask).
Unlike speculators, every anchor is scored (not max_anchors drawn at random), and an
anchor need not be a masked token itself: the last prompt token anchors the first round
at inference, so its block is trained too.

The trainer's task (`dflash_task`, `train_dflash`) runs it in the one loop
(`training.loop`, through `training.online`) with the target's sampled pools and the target as
online teacher; every anchor of a row is scored (speculators samples max_anchors).
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.drafters import DFlashDrafter
from specjax.models import dflash as dflash_lib
from specjax.training import online


def slot_weights(cfg: dflash_lib.DFlashConfig, gamma: float = 4.0) -> jax.Array:
  """[N] speculators' fixed-exp-decay weights (0 on the anchor slot without
  sample_from_anchor)."""
  i = jnp.arange(cfg.block_size, dtype=jnp.float32) - cfg.first_slot
  return jnp.where(i >= 0, jnp.exp(-jnp.maximum(i, 0) / gamma), 0.0)


def dflash_loss(params: dict, cfg: dflash_lib.DFlashConfig, feats: jax.Array, tokens: jax.Array,
                target_logits: jax.Array, anchors: jax.Array, valid: jax.Array,
                gamma: float = 4.0, loss_mask: Optional[jax.Array] = None,
                on_draft_vocab: bool = False) -> tuple:
  """feats [B, T, L*D] the target's aux features, tokens [B, T], target_logits [B, T, V]
  (position t predicts token t + 1; [B, T, Vd] already on the draft vocabulary with
  on_draft_vocab, e.g. a stored teacher's log-probabilities), anchors [A] (every row's) or
  [B, A] (each row's own), valid [B, A], loss_mask [B, T] (optional: 1 where the
  prediction of token t + 1 counts, the pools' "mask") -> (loss, metrics).

  metrics: "acc" [N] the draft's argmax agreement with the target's per slot (on the
  draft vocabulary, over the slots that count), "kl" the unweighted mean KL."""
  n, b = cfg.block_size, tokens.shape[0]
  anchors = jnp.broadcast_to(anchors, (b, anchors.shape[-1]))  # [B, A]
  logits = dflash_lib.anchored_logits(params, cfg, feats, tokens, anchors)  # [B, A, N, Vd]
  shift = 0 if cfg.sample_from_anchor else -1
  idx = jnp.clip(anchors[..., None] + jnp.arange(n) + shift, 0, tokens.shape[1] - 1)  # [B, A, N]
  rows = jnp.arange(b)[:, None, None]
  if "draft_ids" in params and not on_draft_vocab:  # restricted before the gather: [B, T, Vd]
    target_logits = jnp.take(target_logits, params["draft_ids"], axis=-1)
  tgt = target_logits[rows, idx]  # [B, A, N, Vd]
  ok = jnp.broadcast_to(valid[:, :, None], logits.shape[:3])  # [B, A, N]
  if loss_mask is not None:
    ok = ok & (loss_mask[rows, idx] > 0)
  ok = (ok & (jnp.arange(n) >= cfg.first_slot)).astype(jnp.float32)  # [B, A, N]
  log_p = jax.nn.log_softmax(tgt.astype(jnp.float32), -1)
  log_q = jax.nn.log_softmax(logits, -1)
  kl = jnp.sum(jnp.exp(log_p) * (log_p - log_q), -1)  # [B, A, N]
  w = slot_weights(cfg, gamma)[None, None] * ok  # [B, A, N]
  loss = jnp.sum(w * kl) / (jnp.sum(ok) + 1e-5)
  hit = (jnp.argmax(logits, -1) == jnp.argmax(tgt, -1)).astype(jnp.float32)  # [B, A, N]
  metrics = {"acc": jnp.sum(hit * ok, (0, 1)) / jnp.maximum(jnp.sum(ok, (0, 1)), 1.0),
             "kl": jnp.sum((w > 0) * kl) / jnp.maximum(jnp.sum(w > 0), 1)}
  return loss, metrics


def anchors_of(cfg: dflash_lib.DFlashConfig, lengths: jax.Array, t: int) -> tuple:
  """Every anchor of sequences of `lengths` [B] padded to t: (anchors [A] = 0 .. t - 1,
  valid [B, A]: every slot's target token lies within the row)."""
  anchors = jnp.arange(t)
  last = cfg.block_size - 1 + (1 if cfg.sample_from_anchor else 0)  # the last slot's offset
  valid = anchors[None] + last < lengths[:, None]
  return anchors, valid


def sample_anchors(cfg: dflash_lib.DFlashConfig, mask: np.ndarray, num: int,
                   rng: np.random.Generator) -> tuple:
  """Per row of a pool batch, `num` anchors drawn without replacement among those with a
  slot that counts (speculators' max_anchors; the rest of a row's positions cost the same
  and teach nothing): mask [B, T] -> (anchors [B, num] int32, valid [B, num] bool); a row
  with fewer keeps them all, padded with invalid anchor 0."""
  b, t = mask.shape
  shift = 0 if cfg.sample_from_anchor else -1
  counts = np.zeros((b, t), bool)  # anchor a has a slot j whose prediction the mask names
  for j in range(cfg.first_slot, cfg.block_size):
    src = np.arange(t) + j + shift
    inside = (src >= 0) & (src < t)
    counts[:, inside] |= mask[:, src[inside]] > 0
  counts &= np.asarray(anchors_of(cfg, np.full((b,), t), t)[1])  # the block lies in the row
  anchors, valid = np.zeros((b, num), np.int32), np.zeros((b, num), bool)
  for r in range(b):
    cand = np.flatnonzero(counts[r])
    pick = np.sort(rng.choice(cand, min(num, len(cand)), replace=False))
    anchors[r, :len(pick)], valid[r, :len(pick)] = pick, True
  return anchors, valid


# ------------------------------------------------------------- the task in the one loop
# As EAGLE-3's and P-EAGLE's (`training.eagle3`, `training.peagle`): the same pools, draft
# vocabulary from the pool's counts and online teacher.


def init_draft(config, target, counts: Optional[np.ndarray] = None) -> tuple:
  """(DFlashConfig, params) at initialisation from config.dflash: n_layers (Qwen3-style
  layers of the target's widths and heads, speculators' layer class), aux_layers
  (speculators' ids; () : (2, L/2, L-3)), block_size (N: N - 1 drafts a pass, N with
  sample_from_anchor), mask_token_id (< 0 counts from the vocabulary's end),
  draft_vocab_size (0: the target's, whose head the draft then shares, frozen, as
  speculators does; else the most frequent ids of `counts`), init_std."""
  from specjax.models import draft_vocab
  from specjax.models.config import ModelConfig
  d, tc = config.dflash, target.cfg
  v = tc.vocab_size
  aux = tuple(d.get("aux_layers") or (2, tc.n_layers // 2, tc.n_layers - 3))
  vd, mask = int(d.get("draft_vocab_size", 0)) or v, int(d.get("mask_token_id", -1))
  if not -v <= mask < v or not 0 < vd <= v:
    raise ValueError(f"config.dflash: mask_token_id {mask} must lie in [-{v}, {v}) and "
                     f"draft_vocab_size {vd} in [1, {v}] (the target's vocabulary).")
  layers = ModelConfig("llama", v, tc.d_model, int(d.get("n_layers", 1)), tc.n_heads,
                       tc.n_kv_heads, tc.head_dim, int(d.get("d_ff", 0)) or tc.d_ff,
                       max_positions=tc.max_positions, norm_eps=tc.norm_eps,
                       rope_theta=tc.rope_theta, tie_embeddings=False, qk_norm=True)
  cfg = dflash_lib.DFlashConfig(layers=layers, block_size=int(d.get("block_size", 8)),
                                aux_layer_ids=aux, mask_token_id=mask % v,
                                sample_from_anchor=bool(d.get("sample_from_anchor", False)),
                                draft_vocab_size=vd)
  try:
    dflash_lib.check_target(cfg, tc, "config.dflash")
  except ValueError as e:
    raise ValueError(f"{e} (set config.dflash for this target)") from None
  ev = config.get("eval")
  if ev is not None and ev.get("engine") and int(ev.k) > cfg.n_drafts:
    raise ValueError(f"config.eval.k={ev.k} drafts more than the {cfg.n_drafts} a block of "
                     f"config.dflash.block_size={cfg.block_size} gives; lower eval.k or raise "
                     "block_size.")
  key = jax.random.fold_in(jax.random.PRNGKey(config.seed), 5)
  params = dflash_lib.init_params(cfg, key, jnp.asarray(target.params["embed"])[:v],
                                  std=float(d.get("init_std", 0.02)))
  if vd < v:
    d2t, t2d = draft_vocab.vocab_from_frequencies(counts, vd, v)
    params["draft_ids"] = jnp.asarray(draft_vocab.check_vocab(d2t, t2d, v, vd), jnp.int32)
  else:  # the target's head (as the speculators loader fills it in)
    tp = target.params
    kernel = tp["embed"].T if tc.tie_embeddings else tp["lm_head"]["kernel"]  # [D, V]
    params["lm_head"] = {"kernel": jnp.asarray(np.asarray(kernel)[:, :v], jnp.float32)}
  return cfg, params


def frozen_keys(params: dict) -> tuple:
  """The target's embeddings and the draft vocabulary; the head too without one (a
  full-vocabulary DFlash draft reads the target's, and its export leaves it out)."""
  return ("embed", "draft_ids") + (() if "draft_ids" in params else ("lm_head",))


def batch_loss(params, cfg, target_params, target_cfg, batch, gamma: float) -> tuple:
  """`dflash_loss` of a pool batch {"tokens" [B, T], "mask" [B, T]}: over its sampled
  anchors ("anchors", "anchor_valid" [B, A], `sample_anchors`) or else every anchor; with
  the pool's stored teacher ("features" [B, T, L*D] and the top-K "teacher_ids",
  "teacher_logp", renormalised on the draft vocabulary as the feature draft's stored
  teacher) or else the target's pass computed online."""
  from specjax.training.peagle import teacher
  from specjax.training.teacher import stored_teacher
  tokens = batch["tokens"]
  if "features" in batch:
    feats, logits = stored_teacher(batch, params.get("draft_ids"), target_cfg.vocab_size)
  else:
    feats, logits = teacher(target_params, target_cfg, cfg, tokens)
  if "anchors" in batch:
    anchors, valid = batch["anchors"], batch["anchor_valid"]
  else:
    anchors, valid = anchors_of(cfg, jnp.full(tokens.shape[:1], tokens.shape[1]), tokens.shape[1])
  return dflash_loss(params, cfg, feats, tokens, logits, anchors, valid, gamma,
                     loss_mask=batch["mask"], on_draft_vocab="features" in batch)


def with_anchors(config, cfg, batch: dict, step: int) -> dict:
  """A training batch with config.dflash.max_anchors anchors a row drawn for this step
  (a pure function of the seed and step, so a resumed run draws the same); 0: every one."""
  num = int(config.dflash.get("max_anchors", 0))
  if not num:
    return batch
  anchors, valid = sample_anchors(cfg, batch["mask"], num,
                                  np.random.default_rng([config.seed, 91, step]))
  return dict(batch, anchors=anchors, anchor_valid=valid)


def _gamma(config) -> float:
  return float(config.dflash.get("gamma", 4.0))


KIND = online.OnlineDraft(
    name="dflash", init_draft=init_draft, frozen=lambda config, params: frozen_keys(params),
    loss=lambda config, cfg, target_cfg: _pool_loss(cfg, target_cfg, _gamma(config)),
    metrics=lambda cfg, m: {f"acc_s{i}": a for i, a in enumerate(m["acc"]) if i >= cfg.first_slot},
    drafter=DFlashDrafter, stored_teacher=True, extend_batch=with_anchors)


def _pool_loss(cfg, target_cfg, gamma: float):
  return lambda p, tp, b: batch_loss(p, cfg, tp, target_cfg, b, gamma)


def make_train_step(cfg, target_cfg, tx, schedule, gamma: float):
  """Jitted (state, frozen, target_params, batch) -> (state, metrics); state donated."""
  return online.make_train_step(_pool_loss(cfg, target_cfg, gamma),
                                lambda aux: KIND.metrics(cfg, aux), tx, schedule)


def dflash_task(config, workdir: str, target, train_prompts, heldout_prompts, log=print):
  """A DFlash draft as a `loop.Task` (`online.task`): target pools, `dflash_loss`
  (config.dflash.gamma) over every anchor with the target as online teacher, held-out
  agreement per slot and the engine's greedy alpha (config.eval.k drafts, one draft pass a
  round)."""
  return online.task(KIND, config, workdir, target, train_prompts, heldout_prompts, log)


def train_dflash(config, workdir: str, target, train_prompts, heldout_prompts, log=print,
                 stop_at=None, max_seconds=None, progress: bool = False) -> dict:
  """Trains a DFlash draft for `target` in `workdir` with the one loop (resuming from its
  newest checkpoint); stop_at / max_seconds as in `specjax.training.train.train`."""
  return online.train(KIND, config, workdir, target, train_prompts, heldout_prompts, log,
                      stop_at, max_seconds, progress)


def published(config, workdir: str, target, train_prompts, best: bool = True):
  """A workdir's best (or latest) DFlash draft as a `PublishedDraft` for
  `draft_formats.save(draft, "speculators", out)` (speculators' dflash format)."""
  return online.published(KIND, config, workdir, target, train_prompts, best)
