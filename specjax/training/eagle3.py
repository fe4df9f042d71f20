"""Training an EAGLE-3 draft (`specjax.models.eagle3`) with the training-time test.

Axes: B batch, T positions, A*Dt aux width, Vd draft vocabulary, V target vocabulary.

A sequence x_0..x_T gives the draft the target's aux states at positions 0..T-1 and the
tokens x_1..x_T (speculators' `shift_batch`); step s of `eagle3.unrolled` at position i
predicts x_{i+2+s}, so it is taught the target's distribution at position i + 1 + s
restricted to the draft vocabulary (speculators' targets: the verifier head over the
draft ids), by forward KL; step s is weighted decay**s.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from specjax.decoding.drafters import Eagle3Drafter
from specjax.models import draft_vocab, eagle3
from specjax.models.config import ModelConfig
from specjax.models.transformer import forward_hidden, head
from specjax.training import loop, online
from specjax.training.losses import forward_kl, masked_mean

FROZEN_KEYS = ("embed", "draft_ids")  # the target's embeddings and the draft vocabulary


def teacher(target_params: dict, target_cfg, cfg: eagle3.Eagle3Config, seqs: jax.Array):
  """seqs [B, T+1] -> (aux [B, T, A*Dt] at positions 0..T-1, logits [B, T+1, V])."""
  h, _, aux = forward_hidden(target_params, target_cfg, seqs, collect=cfg.feature_layers)
  return aux[:, :-1], head(target_params, target_cfg, h)


def loss(params: dict, cfg: eagle3.Eagle3Config, aux: jax.Array, seqs: jax.Array,
         teacher_logits: jax.Array, mask: jax.Array, steps: int, decay: float = 1.0,
         on_draft_vocab: bool = False):
  """The training-time-test loss and per-step agreement (draft argmax == target's, over
  the draft vocabulary). mask [B, T+1]: positions whose prediction counts; teacher_logits
  [B, T+1, V], or [B, T+1, Vd] already on the draft vocabulary with on_draft_vocab (a
  stored teacher's log-probabilities)."""
  t = aux.shape[1]
  hs = eagle3.unrolled(params, cfg, aux, seqs[:, 1:], steps)
  ids = params.get("draft_ids")
  total, agree = 0.0, []
  for s, h in enumerate(hs):
    student = jax.nn.log_softmax(eagle3.draft_logits(params, cfg, h), -1)  # [B, T, Vd]
    tl = jnp.pad(teacher_logits[:, 1 + s:], ((0, 0), (0, s), (0, 0)))[:, :t]  # [B, T, V]
    tl = tl if ids is None or on_draft_vocab else tl[..., ids]
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
  frozen = {k: params[k] for k in FROZEN_KEYS if k in params}
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


# ------------------------------------------------------------- the task in the one loop


def init_draft(config, target, counts: Optional[np.ndarray] = None,
               block: str = "eagle3") -> tuple:
  """(Eagle3Config, params) at initialisation from config.eagle3 (or the config block named
  `block`, e.g. P-EAGLE's): n_layers, aux_layers (() : EAGLE-3's (2, L/2, L-3)),
  draft_vocab_size (0: the target's; else the most frequent ids of `counts`), norm flags,
  init_std. The layers take the target's widths and heads."""
  e, tc = config[block], target.cfg
  aux = tuple(e.get("aux_layers") or (2, tc.n_layers // 2, tc.n_layers - 3))
  vd = int(e.get("draft_vocab_size", 0)) or tc.vocab_size
  layer = ModelConfig("llama", tc.vocab_size, tc.d_model, int(e.get("n_layers", 1)),
                      tc.n_heads, tc.n_kv_heads, tc.head_dim, int(e.get("d_ff", 0)) or tc.d_ff,
                      max_positions=tc.max_positions, norm_eps=tc.norm_eps,
                      rope_theta=tc.rope_theta, tie_embeddings=False)
  cfg = eagle3.Eagle3Config(layer=layer, aux_layers=aux, target_d_model=tc.d_model,
                            draft_vocab_size=vd,
                            **{k: bool(e.get(k, False)) for k in (
                                "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")})
  if max(aux) > tc.n_layers or min(aux) < 0 or len(set(aux)) != len(aux):
    raise ValueError(f"config.{block}.aux_layers {aux} must be distinct ids in [0, {tc.n_layers}] "
                     f"for a target of {tc.n_layers} layers.")
  ids = None
  if vd < tc.vocab_size:
    d2t, t2d = draft_vocab.vocab_from_frequencies(counts, vd, tc.vocab_size)
    ids = draft_vocab.check_vocab(d2t, t2d, tc.vocab_size, vd)
  params = eagle3.init_params(cfg, jax.random.fold_in(jax.random.PRNGKey(config.seed), 3),
                              jnp.asarray(target.params["embed"])[:tc.vocab_size],
                              std=float(e.get("init_std", 0.02)), draft_ids=ids)
  return cfg, params


def pool_loss(config, cfg: eagle3.Eagle3Config, target_cfg) -> Callable:
  """(params, target_params, batch) -> the training-time-test `loss` of a pool batch
  {"tokens" [B, T+1], "mask" [B, T+1]}, with the pool's stored teacher ("features"
  [B, T+1, A*Dt] and the top-K "teacher_ids", "teacher_logp", renormalised on the draft
  vocabulary as DFlash's) or else the target's pass computed online."""
  from specjax.training.teacher import stored_teacher
  e = config.eagle3
  steps, decay = int(e.get("ttt_steps", 3)), float(e.get("decay", 1.0))

  def f(params, target_params, batch):
    seqs = batch["tokens"]
    if "features" in batch:
      feats, logits = stored_teacher(batch, params.get("draft_ids"), target_cfg.vocab_size)
      aux = feats[:, :-1]
    else:
      aux, logits = teacher(target_params, target_cfg, cfg, seqs)
    return loss(params, cfg, aux, seqs, logits, batch["mask"], steps, decay,
                on_draft_vocab="features" in batch)
  return f


KIND = online.OnlineDraft(
    name="eagle3", init_draft=init_draft, frozen=lambda config, params: FROZEN_KEYS,
    loss=pool_loss, metrics=lambda cfg, agree: {f"agree_s{s}": a for s, a in enumerate(agree)},
    drafter=Eagle3Drafter, stored_teacher=True)


def eagle3_task(config, workdir: str, target, train_prompts, heldout_prompts: Sequence,
                log: Callable = print) -> loop.Task:
  """An EAGLE-3 draft as a `loop.Task` (`online.task`): target pools, the training-time-test
  loss with the target as online teacher, held-out agreement per step and the engine's alpha."""
  return online.task(KIND, config, workdir, target, train_prompts, heldout_prompts, log)


def train_eagle3(config, workdir: str, target, train_prompts, heldout_prompts: Sequence,
                 log: Callable = print, stop_at: Optional[int] = None,
                 max_seconds: Optional[float] = None, progress: bool = False) -> dict:
  """Trains an EAGLE-3 draft for `target` in `workdir`, resuming from its newest checkpoint;
  stop_at / max_seconds as in `specjax.training.train.train`."""
  return online.train(KIND, config, workdir, target, train_prompts, heldout_prompts, log,
                      stop_at, max_seconds, progress)


def published(config, workdir: str, target, train_prompts, best: bool = True):
  """A workdir's best (or latest) EAGLE-3 draft as a `PublishedDraft`, for
  `draft_formats.save` (speculators' format or the legacy layout)."""
  return online.published(KIND, config, workdir, target, train_prompts, best)
