"""The P-EAGLE objective (speculators' `PEagleDraftModel.forward`).

Axes: B batch, T positions, K depths, M elements, A*Dt aux states, V / Vd.

Element (anchor j, depth d) reads g_j and token j + 1 at depth 0, mask_hidden and the mask
token at depths >= 1 (`peagle.cod_logits`), and predicts token j + d + 2, whose target
distribution is the target's logits at position j + d + 1 (restricted to the draft
vocabulary). Every anchor is taken at every depth, or (config.peagle.max_anchors) every
anchor at depth 0 and a fixed number of whole rollouts drawn per row (`sample_elements`:
speculators' COD sampling at a fixed count, which only changes which elements are
scored). The loss is KL(target || draft) averaged over the elements whose target position
is in the row (and, given a loss mask, counts).

The trainer's task (`peagle_task`, `train_peagle`) runs it in the one loop
(`training.loop`) with EAGLE-3's pools and initialisation and the target as online
teacher, or the pool's stored teacher (config.data.teacher = "topk", as DFlash's).
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.drafters import PEagleDrafter
from specjax.models import peagle as peagle_lib
from specjax.training import online


def elements(t: int, depths: int) -> tuple:
  """(anchor [M], depth [M]): anchors 0 .. t - 1 at every depth, depth-major."""
  anchor = jnp.tile(jnp.arange(t), depths)
  return anchor, jnp.repeat(jnp.arange(depths), t)


def peagle_loss(params: dict, cfg: peagle_lib.PEagleConfig, aux: jax.Array, seqs: jax.Array,
                target_logits: jax.Array, lengths: jax.Array, depths: int,
                loss_mask: Optional[jax.Array] = None, chosen: Optional[tuple] = None,
                on_draft_vocab: bool = False) -> tuple:
  """aux [B, T, A*Dt] the target's aux states, seqs [B, T] tokens, target_logits [B, T, V]
  (position t predicts token t + 1; [B, T, Vd] already on the draft vocabulary with
  on_draft_vocab, e.g. a stored teacher's log-probabilities), lengths [B], loss_mask [B, T]
  (optional: the positions whose prediction counts, speculators' loss_mask), chosen
  (optional: the elements to score, (anchor [M], depth [M]) for every row, e.g. speculators'
  COD sample, or (anchor [B, M], depth [B, M], valid [B, M]) per row, `sample_elements`;
  default every one) -> (loss, per-depth argmax agreement [K])."""
  b, t = seqs.shape
  anchor, depth = elements(t - 1, depths) if chosen is None else chosen[:2]
  anchor, depth = (jnp.broadcast_to(x, (b,) + x.shape[-1:]) for x in (anchor, depth))  # [B, M]
  picked = jnp.ones(anchor.shape, bool) if chosen is None or len(chosen) < 3 else chosen[2]
  pos = jnp.minimum(anchor + depth, t - 2)  # the element's own position (shifted sequence)
  logits = jax.vmap(lambda a, s, an, de: peagle_lib.cod_logits(params, cfg, a[None], s[None], an,
                                                               de)[0])(
      aux[:, :-1], seqs[:, 1:], anchor, depth)  # [B, M, Vd]
  idx = jnp.minimum(anchor + depth + 1, t - 1)  # the target position it imitates
  if "draft_ids" in params and not on_draft_vocab:  # restricted before the gather
    target_logits = jnp.take(target_logits, params["draft_ids"], axis=-1)  # [B, T, Vd]
  tgt = jnp.take_along_axis(target_logits, idx[..., None], axis=1)  # [B, M, Vd]
  valid = (anchor + depth + 1 < lengths[:, None]) & (pos == anchor + depth) & picked
  if loss_mask is not None:
    valid = valid & (jnp.take_along_axis(loss_mask, idx, axis=1) > 0)
  log_p = jax.nn.log_softmax(tgt.astype(jnp.float32), -1)
  log_q = jax.nn.log_softmax(logits, -1)
  kl = jnp.sum(jnp.exp(log_p) * (log_p - log_q), -1)  # [B, M]
  w = valid.astype(jnp.float32)
  hit = (jnp.argmax(logits, -1) == jnp.argmax(tgt, -1)) * w
  per_depth = lambda x: jnp.zeros(depths).at[depth.ravel()].add(x.ravel())  # [K]
  return jnp.sum(w * kl) / jnp.maximum(jnp.sum(w), 1.0), per_depth(hit) / jnp.maximum(
      per_depth(w), 1.0)


def sample_elements(mask: np.ndarray, depths: int, num: int, rng: np.random.Generator) -> tuple:
  """Per row of a pool batch [B, T]: every anchor at depth 0 (the context every deeper
  element reads) and `num` anchors, drawn without replacement among those whose depth-1
  prediction counts, at each depth 1 .. K - 1 (a whole rollout each, as speculators' COD
  sampling keeps a deeper element's shallower ones; its max_anchors, at a fixed count so
  the step keeps one shape). -> (anchor [B, M], depth [B, M], valid [B, M]) with
  M = T - 1 + num * (K - 1); a row with fewer candidates pads with invalid elements."""
  b, t = mask.shape
  shallow = np.broadcast_to(np.arange(t - 1), (b, t - 1))
  drawn, ok = np.zeros((b, num), np.int32), np.zeros((b, num), bool)
  for r in range(b):
    cand = np.flatnonzero(mask[r, 2:] > 0)  # anchor j: depth 1 imitates position j + 2
    pick = np.sort(rng.choice(cand, min(num, len(cand)), replace=False))
    drawn[r, :len(pick)], ok[r, :len(pick)] = pick, True
  deep = np.tile(drawn, depths - 1)  # [B, num * (K - 1)], depth-major
  anchor = np.concatenate([shallow, deep], 1).astype(np.int32)
  deep_depth = np.repeat(np.arange(1, depths, dtype=np.int32), num)  # [num * (K - 1)]
  depth = np.concatenate([np.zeros((b, t - 1), np.int32), np.tile(deep_depth, (b, 1))], 1)
  valid = np.concatenate([np.ones((b, t - 1), bool), np.tile(ok, depths - 1)], 1)
  return anchor, depth, valid


# ------------------------------------------------------------- the task in the one loop
# As EAGLE-3's (`training.eagle3`): the same pools, draft initialisation and online teacher;
# P-EAGLE adds mask_hidden and the mask token and scores every anchor at every depth (or
# sampled rollouts, `with_elements`).


def init_draft(config, target, counts=None) -> tuple:
  """(PEagleConfig, params) at initialisation from config.peagle: EAGLE-3's fields
  (`training.eagle3.init_draft`) plus n_depths (parallel drafts per pass, speculators'
  num_depths), mask_token_id (< 0 counts from the vocabulary's end) and mask_init_std
  (mask_hidden ~ N(0, std^2); speculators' torch.randn: 1)."""
  from specjax.training import eagle3 as eagle3_train
  p, tc = config.peagle, target.cfg
  mask, depths = int(p.get("mask_token_id", -1)), int(p.get("n_depths", 4))
  if not -tc.vocab_size <= mask < tc.vocab_size or depths < 1:
    raise ValueError(f"config.peagle: mask_token_id {mask} must lie in [-{tc.vocab_size}, "
                     f"{tc.vocab_size}) and n_depths {depths} be >= 1.")
  ev = config.get("eval")
  if ev is not None and ev.get("engine") and int(ev.k) > depths:
    raise ValueError(f"config.eval.k={ev.k} drafts more than config.peagle.n_depths={depths} "
                     "the draft is trained for; lower eval.k or raise n_depths.")
  e3, params = eagle3_train.init_draft(config, target, counts, block="peagle")
  cfg = peagle_lib.PEagleConfig(eagle3=e3, mask_token_id=mask % tc.vocab_size, n_depths=depths)
  if "embed" not in frozen_keys(config):  # its own copy: the step donates trained params
    params["embed"] = jnp.array(params["embed"], copy=True)
  key = jax.random.fold_in(jax.random.PRNGKey(config.seed), 4)
  params["mask_hidden"] = float(p.get("mask_init_std", 1.0)) * jax.random.normal(
      key, (len(e3.aux_layers) * e3.target_d_model,))  # [A*Dt]
  return cfg, params


def frozen_keys(config) -> tuple:
  """The draft vocabulary always; the embeddings unless config.peagle.train_embeddings
  (speculators trains P-EAGLE's, embed_requires_grad=True; the export then carries them)."""
  return ("draft_ids",) + (() if config.peagle.get("train_embeddings", False) else ("embed",))


def teacher(target_params: dict, target_cfg, cfg: peagle_lib.PEagleConfig, seqs: jax.Array):
  """seqs [B, T] -> (aux [B, T, A*Dt], logits [B, T, V]): the target's pass, online."""
  from specjax.models.transformer import forward_hidden, head
  h, _, aux = forward_hidden(target_params, target_cfg, seqs, collect=cfg.feature_layers)
  return aux, head(target_params, target_cfg, h)


def batch_loss(params, cfg, target_params, target_cfg, batch, depths: int) -> tuple:
  """`peagle_loss` of a pool batch {"tokens" [B, T], "mask" [B, T]}: over its sampled
  elements ("anchor", "depth", "element_valid" [B, M], `with_elements`) or else every one;
  with the pool's stored teacher ("features" [B, T, A*Dt] and the top-K "teacher_ids",
  "teacher_logp", renormalised on the draft vocabulary as DFlash's) or else the target's
  pass computed online."""
  from specjax.training.teacher import stored_teacher
  seqs = batch["tokens"]
  if "features" in batch:
    aux, logits = stored_teacher(batch, params.get("draft_ids"), target_cfg.vocab_size)
  else:
    aux, logits = teacher(target_params, target_cfg, cfg, seqs)
  chosen = ((batch["anchor"], batch["depth"], batch["element_valid"]) if "anchor" in batch
            else None)
  lengths = jnp.full(seqs.shape[:1], seqs.shape[1])  # the mask says which positions count
  return peagle_loss(params, cfg, aux, seqs, logits, lengths, depths, loss_mask=batch["mask"],
                     chosen=chosen, on_draft_vocab="features" in batch)


def with_elements(config, cfg, batch: dict, step: int) -> dict:
  """A training batch with config.peagle.max_anchors rollouts a row drawn for this step
  (`sample_elements`; a pure function of the seed and step, so a resumed run draws the
  same); 0: every anchor at every depth."""
  num = int(config.peagle.get("max_anchors", 0))
  if not num:
    return batch
  anchor, depth, valid = sample_elements(batch["mask"], cfg.n_depths, num,
                                         np.random.default_rng([config.seed, 92, step]))
  return dict(batch, anchor=anchor, depth=depth, element_valid=valid)


KIND = online.OnlineDraft(
    name="peagle", init_draft=init_draft, frozen=lambda config, params: frozen_keys(config),
    loss=lambda config, cfg, target_cfg: lambda p, tp, b: batch_loss(p, cfg, tp, target_cfg, b,
                                                                     cfg.n_depths),
    metrics=lambda cfg, agree: {f"agree_d{d}": a for d, a in enumerate(agree)},
    drafter=PEagleDrafter, stored_teacher=True, extend_batch=with_elements)


def make_train_step(cfg, target_cfg, tx, schedule):
  """Jitted (state, frozen, target_params, batch) -> (state, metrics); state donated."""
  return online.make_train_step(KIND.loss(None, cfg, target_cfg),
                                lambda aux: KIND.metrics(cfg, aux), tx, schedule)


def peagle_task(config, workdir: str, target, train_prompts, heldout_prompts, log=print):
  """A P-EAGLE draft as a `loop.Task` (`online.task`): target pools, `peagle_loss` over every
  anchor at every depth with the target as online teacher, held-out agreement per depth and
  the engine's greedy alpha (config.eval.k drafts, one draft pass a round)."""
  return online.task(KIND, config, workdir, target, train_prompts, heldout_prompts, log)


def train_peagle(config, workdir: str, target, train_prompts, heldout_prompts, log=print,
                 stop_at=None, max_seconds=None, progress: bool = False) -> dict:
  """Trains a P-EAGLE draft for `target` in `workdir` with the one loop (resuming from its
  newest checkpoint); stop_at / max_seconds as in `specjax.training.train.train`."""
  return online.train(KIND, config, workdir, target, train_prompts, heldout_prompts, log,
                      stop_at, max_seconds, progress)


def published(config, workdir: str, target, train_prompts, best: bool = True):
  """A workdir's best (or latest) P-EAGLE draft as a `PublishedDraft` for
  `draft_formats.save(draft, "speculators", out)` (speculators' peagle format)."""
  return online.published(KIND, config, workdir, target, train_prompts, best)
