"""The distillation loop: on-policy pools, a jitted data-parallel train step, periodic
evaluation with the real speculative engine, metrics and orbax checkpoints.

Axes: B global batch, L sequence length, N draft support, K sparse teacher entries.

    summary = train(config, workdir, target, train_prompts, heldout_prompts)

Only the draft's trainable params (its layers and final norm, see
`specjax.training.draft`) are optimised; the shared embeddings, `head_vocab` and the
target stay frozen and out of the optimizer and the checkpoints. Rerunning the same
call on the same workdir resumes from the newest checkpoint; with the same seed the
resumed run's losses equal an uninterrupted run's, because the batch at step s is a
pure function of (seed, s) and the pools are saved in the workdir.
"""
from __future__ import annotations

import functools
import json
import os
import time
from types import SimpleNamespace
from typing import Any, Callable, Optional, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from specjax.models import ModelConfig, feature_forward, is_feature_draft
from specjax.models.feature_draft import feature_forward_unrolled, unit_rms
from specjax.training import data as data_lib
from specjax.training import draft as draft_lib
from specjax.training import sharding as sharding_lib
from specjax.training.checkpoints import Checkpointer
from specjax.training.losses import LOSSES, distill_loss
from specjax.training.teacher import (student_logits, support_ids, support_logits,
                                     teacher_logp_on_support)


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
  """AdamW with linear warm-up and cosine decay, after global-norm clipping."""
  schedule = optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=optim.lr, warmup_steps=min(optim.warmup_steps, total_steps),
      decay_steps=max(total_steps, optim.warmup_steps + 1), end_value=optim.lr * optim.end_lr_fraction)
  tx = optax.chain(optax.clip_by_global_norm(optim.clip_norm),
                   optax.adamw(schedule, b1=optim.b1, b2=optim.b2,
                               weight_decay=optim.weight_decay))
  return tx, schedule


def make_train_step(draft_cfg: ModelConfig, target_cfg: ModelConfig, tx, schedule,
                    loss_name: str, beta: float, feature: bool = False,
                    feature_weight: float = 1.0, feature_noise: float = 0.0,
                    unroll_steps: int = 1):
  """Jitted (state, frozen, target_params, batch) -> (state, metrics); state donated.

  feature: the draft is a feature draft (EAGLE); the batch then carries the target's
  features and the teacher is the target's head on them (see `feature_losses`).
  """
  if loss_name not in LOSSES:
    raise ValueError(f"Unknown loss {loss_name!r}; expected one of {LOSSES}.")

  def train_step(state: TrainState, frozen, target_params, batch):
    if feature:
      loss_fn = lambda trainable: feature_losses(
          {**frozen, **trainable}, draft_cfg, batch, loss_name, beta, feature_weight,
          feature_noise, jax.random.fold_in(state.rng, state.step), unroll_steps)
      mask = batch["mask"][:, 1:]
    else:
      support = support_ids(frozen, draft_cfg)  # [N]
      teacher = teacher_logp_on_support(batch, support, draft_cfg.vocab_size,
                                        (target_params, target_cfg))  # [B, L, N]

      def loss_fn(trainable):
        logits = student_logits({**frozen, **trainable}, draft_cfg, batch["tokens"])  # [B, L, N]
        student = jax.nn.log_softmax(logits, axis=-1)
        return distill_loss(loss_name, teacher, student, batch["mask"], beta), (student, teacher, {})
      mask = batch["mask"]

    (loss, (student, teacher, parts)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    agree = (jnp.argmax(student, -1) == jnp.argmax(teacher, -1)).astype(jnp.float32)
    metrics = {"loss": loss, "grad_norm": optax.global_norm(grads), "lr": schedule(state.step),
               "train_top1_agree": (agree * mask).sum() / jnp.maximum(mask.sum(), 1.0),
               "tokens": mask.sum(), **parts}
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return jax.jit(train_step, donate_argnums=(0,))


def feature_losses(params: dict, cfg: ModelConfig, batch: dict, loss_name: str, beta: float,
                   feature_weight: float, noise: float, key: jax.Array, unroll_steps: int = 1):
  """The feature draft's loss on a batch with the target's features [B, L, D].

  Position j reads (f_j, token j+1) and predicts f_{j+1}: loss = distillation loss between
  the head on the prediction and the head on the target's f_{j+1} (the target's own
  distribution for token j+2, on the draft's support) + feature_weight x smooth-L1 between
  the (unit-RMS) features. noise: std of Gaussian noise added to the unit-RMS input features
  (as EAGLE does). unroll_steps > 1 also trains the draft on its own predicted features,
  as it drafts tokens 2..k (`feature_forward_unrolled`); the streams' losses are averaged.
  Returns (loss, (stream-1 student log-probs, teacher log-probs) at positions 0..L-2,
  {"distill_loss", "feature_loss"} of stream 1, and "distill_loss_s{s}" of later streams).
  """
  feats = batch["features"].astype(jnp.float32)  # [B, L, D]
  inp = feats[:, :-1]
  if noise:
    inp = unit_rms(inp) + noise * jax.random.normal(key, inp.shape)  # noise relative to RMS
  preds = feature_forward_unrolled(params, cfg, inp, batch["tokens"][:, 1:], unroll_steps)
  target_feats = feats[:, 1:]
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


@functools.partial(jax.jit, static_argnames=("cfg",))
def _draft_argmax(params, tokens, features, *, cfg: ModelConfig):
  """[B, L] support positions of the draft's argmax for the token after each position."""
  if features is None:
    return jnp.argmax(student_logits(params, cfg, tokens), -1)
  # A feature draft at j predicts token j + 2; shift so that row j predicts token j + 1.
  pred, _ = feature_forward(params, cfg, features[:, :-1].astype(jnp.float32), tokens[:, 1:])
  out = jnp.argmax(support_logits(params, cfg, pred), -1)
  return jnp.concatenate([jnp.full_like(out[:, :1], -1), out], 1)


def heldout_agreement(params, cfg: ModelConfig, pool: dict, batch_size: int = 8) -> float:
  """Teacher-forced top-1 agreement on held-out target-greedy continuations: the fraction of
  positions where the draft's argmax is the target's greedy token (a cheap greedy-alpha proxy).
  A feature draft reads the target's features (pool["features"]); its first position has none."""
  fn = lambda p, t, f: _draft_argmax(p, t, f, cfg=cfg)
  support = np.asarray(support_ids(params, cfg))
  feature = is_feature_draft(params)
  hits = total = 0.0
  for s in range(0, pool["tokens"].shape[0], batch_size):
    toks, mask = pool["tokens"][s:s + batch_size], pool["mask"][s:s + batch_size]
    pad = ((0, batch_size - toks.shape[0]), (0, 0))
    feats = jnp.asarray(np.pad(pool["features"][s:s + batch_size], pad + ((0, 0),))) if feature else None
    pred = np.asarray(fn(params, jnp.asarray(np.pad(toks, pad)), feats))[:toks.shape[0]]
    nxt = toks[:, 1:]
    valid = mask[:, :-1] * (pred[:, :-1] >= 0)
    hits += float(((support[np.maximum(pred[:, :-1], 0)] == nxt) * valid).sum())
    total += float(valid.sum())
  return hits / max(total, 1.0)


def engine_eval(target, draft_cfg: ModelConfig, draft_params, prompts: Sequence, *,
                max_new_tokens: int, k: int, temperature: float, seed: int = 0,
                with_baseline: bool = False) -> dict:
  """alpha and tokens per target pass of the real speculative engine with this draft."""
  from specjax.decoding import generate  # the engine; imported late to keep training light
  draft = SimpleNamespace(name="draft", cfg=draft_cfg, params=draft_params)
  res = generate(target, list(prompts), max_new_tokens, draft=draft, k=k,
                 temperature=temperature, seed=seed)
  out = {"alpha": res.stats.acceptance_rate, "tokens_per_pass": res.stats.tokens_per_pass,
         "spec_wall_s": res.stats.wall_time_s}
  if with_baseline:
    base = generate(target, list(prompts), max_new_tokens, temperature=temperature, seed=seed)
    out["target_wall_s"] = base.stats.wall_time_s
    out["speedup"] = base.stats.wall_time_s / max(res.stats.wall_time_s, 1e-9)
  return out


class MetricsWriter:
  """Metrics as JSON lines (workdir/metrics.jsonl) and TensorBoard events (workdir/tb)."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled and jax.process_index() == 0
    self.path = os.path.join(workdir, "metrics.jsonl")
    self.tb = None
    if self.enabled:
      from tensorboardX import SummaryWriter
      self.tb = SummaryWriter(os.path.join(workdir, "tb"))

  def write(self, step: int, metrics: dict) -> None:
    if not self.enabled:
      return
    clean = {k: float(v) for k, v in metrics.items()}
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(json.dumps({"step": int(step), "time": time.time(), **clean}) + "\n")
    for k, v in clean.items():
      self.tb.add_scalar(k, v, int(step))
    self.tb.flush()

  def close(self) -> None:
    if self.tb is not None:
      self.tb.close()


def read_metrics(workdir: str) -> list:
  """The metrics.jsonl rows of a workdir; a resumed run's replayed steps keep the last row."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  rows = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      if line.strip():
        r = json.loads(line)
        rows[(r["step"], tuple(sorted(r)))] = r
  return sorted(rows.values(), key=lambda r: r["step"])


def _pool_path(workdir: str, name: str) -> str:
  return os.path.join(workdir, "data", f"{name}.npz")


def prepare_draft(config, workdir: Optional[str], target, train_prompts, log=print):
  """Target pools (cached) -> draft vocabulary -> (draft_cfg, draft_params, target_pool).

  train_prompts: a list of prompts, or a dict of named prompt sets (`data_lib.prompt_sets`);
  each set gets its own cached pools (the set "train" keeps the plain file names), and the
  target pool is their concatenation in order.
  """
  d = config.data
  key = jax.random.PRNGKey(config.seed)
  need_target_pool = d.source in ("target", "mix") or config.draft.head_vocab_size > 0
  feature = draft_lib.is_feature(config.draft)
  if feature and d.source != "target":
    raise ValueError("A feature draft trains on target continuations (data.source='target'): "
                     "it cannot sample on its own without the target's features.")
  target_pool = None
  if need_target_pool:
    pools = [_set_pool(config, workdir, target, name, prompts, i, key, log)
             for i, (name, prompts) in enumerate(data_lib.prompt_sets(train_prompts).items())]
    target_pool = data_lib.concat_batches(pools)
  head_vocab = None
  if config.draft.head_vocab_size > 0:
    counts = data_lib.token_frequencies([target_pool], target.cfg.vocab_size)
    head_vocab = draft_lib.frequent_vocab(counts, config.draft.head_vocab_size,
                                          always=target.eos_ids)
  draft_cfg, draft_params = init_draft(config, target, head_vocab)
  return draft_cfg, draft_params, target_pool


def _set_pool(config, workdir, target, name: str, prompts, index: int, key, log) -> dict:
  """One prompt set's target pool: a temperature-`data.temperature` continuation per prompt
  (samples_per_prompt of them), plus a greedy one if `data.greedy_pool`, plus the target's
  features for a feature draft; each part cached in workdir/data (suffix _{name} except
  for the set "train")."""
  d = config.data
  prompts = list(prompts) * d.get("samples_per_prompt", 1)
  suffix = "" if name == "train" else f"_{name}"
  path = lambda stem: workdir and _pool_path(workdir, stem + suffix)

  def sampler(temperature: float, stream: int):
    def make():
      log(f"Sampling target continuations (T = {temperature:g}) for {len(prompts)} "
          f"prompts of set {name!r} ...")
      return data_lib.sample_pool(
          target.params, target.cfg, prompts, max_new=d.max_new_tokens, seq_len=d.seq_len,
          key=jax.random.fold_in(key, stream + 10 * index), eos_ids=target.eos_ids,
          temperature=temperature, batch_size=d.sample_batch_size,
          top_k_teacher=d.teacher_top_k if d.teacher == "topk" else 0,
          progress=lambda i, n: log(f"  sampled {i}/{n} ({time.strftime('%H:%M:%S')})"))
    return make
  pool = data_lib.cached_pool(path("target_pool"), sampler(d.temperature, 1))
  if d.get("greedy_pool", False):  # plus one greedy continuation per prompt
    greedy = data_lib.cached_pool(path("target_pool_greedy"), sampler(0.0, 3))
    pool = data_lib.concat_batches([pool, greedy])
  if draft_lib.is_feature(config.draft):
    _add_features(pool, target, path("target_features"), log)
  return pool


def _add_features(pool: dict, target, path: Optional[str], log) -> None:
  """pool["features"]: the target's features of the pool's sequences, cached at `path`."""
  def make():
    log(f"Target features of {pool['tokens'].shape[0]} sequences ...")
    return {"features": data_lib.target_features(pool, target.params, target.cfg)}
  pool["features"] = data_lib.cached_pool(path, make)["features"]


def init_draft(config, target, head_vocab=None):
  """The configured draft at initialisation (before any training) -> (cfg, params)."""
  if draft_lib.is_feature(config.draft):
    return draft_lib.build_feature_draft(
        target.cfg, target.params, n_layers=config.draft.n_layers,
        key=jax.random.fold_in(jax.random.PRNGKey(config.seed), 2), head_vocab=head_vocab,
        init_std=config.draft.get("init_std", 0.02))
  return draft_lib.build_draft(
      target.cfg, target.params, n_layers=config.draft.n_layers, init=config.draft.init,
      key=jax.random.fold_in(jax.random.PRNGKey(config.seed), 2), head_vocab=head_vocab,
      init_std=config.draft.get("init_std", 0.02))


def train(config, workdir: str, target, train_prompts, heldout_prompts: Sequence,
          log: Callable = print, progress: bool = True, stop_at: Optional[int] = None) -> dict:
  """Distils `target` into the configured draft in `workdir` (resuming if it holds a
  checkpoint). Returns a summary dict (last metrics, best step, draft cfg and params).

  stop_at: end this call right after that step without a final save, as if the process
  were killed there (tests of resumption).
  """
  os.makedirs(workdir, exist_ok=True)
  d, ev = config.data, config.eval
  if d.source not in ("target", "draft", "mix"):
    raise ValueError(f"data.source must be 'target', 'draft' or 'mix', got {d.source!r}.")
  if d.teacher not in ("online", "topk"):
    raise ValueError(f"data.teacher must be 'online' or 'topk', got {d.teacher!r}.")
  mesh = sharding_lib.make_mesh(config.get("mesh"))  # "" = data parallel; "2,4" = data x model
  sharding_lib.check_mesh(target.cfg, mesh, target.name)
  draft_cfg, draft_params, target_pool = prepare_draft(config, workdir, target, train_prompts, log)
  trainable, frozen = draft_lib.split_params(draft_params, draft_lib.trainable_keys(config.draft))
  feature = draft_lib.is_feature(config.draft)
  eval_prompts = data_lib.spread(heldout_prompts, ev.num_prompts)
  heldout_pool = data_lib.cached_pool(_pool_path(workdir, "heldout_pool"), lambda: data_lib.sample_pool(
      target.params, target.cfg, heldout_prompts, max_new=d.max_new_tokens, seq_len=d.seq_len,
      key=jax.random.PRNGKey(0), eos_ids=target.eos_ids, temperature=0.0,
      batch_size=d.sample_batch_size))
  if feature:
    _add_features(heldout_pool, target, _pool_path(workdir, "heldout_features"), log)

  tx, schedule = make_optimizer(config.optim, config.num_steps)
  trainable = sharding_lib.place(trainable, mesh)
  frozen = sharding_lib.place(frozen, mesh)
  target_params = sharding_lib.place(target.params, mesh) if d.teacher == "online" else None
  state = TrainState(step=jnp.zeros((), jnp.int32), params=trainable,
                     opt_state=tx.init(trainable), rng=jax.random.PRNGKey(config.seed))
  state = sharding_lib.place(state, mesh)  # opt state FSDP over "data"
  ckpt = Checkpointer(workdir, max_to_keep=config.keep_checkpoints)
  start = 0
  if ckpt.latest_step() is not None:
    state = ckpt.restore(state)
    start = int(state.step)
    log(f"Resuming from step {start} ({os.path.join(workdir, 'checkpoints')}).")
  train_step = make_train_step(draft_cfg, target.cfg, tx, schedule, config.loss.name,
                               config.loss.beta, feature=feature,
                               feature_weight=config.draft.get("feature_weight", 1.0),
                               feature_noise=config.draft.get("feature_noise", 0.0),
                               unroll_steps=config.draft.get("unroll_steps", 1))
  writer = MetricsWriter(workdir)
  full = lambda st: {**frozen, **st.params}

  n_draft = {"target": 0, "draft": config.batch_size,
             "mix": int(round(d.draft_fraction * config.batch_size))}[d.source]
  draft_pool, draft_pool_step = None, None

  def draft_pool_at(step: int):
    """The draft-sampled pool in force at `step` (regenerated every refresh_every steps)."""
    nonlocal draft_pool, draft_pool_step
    at = (step // d.refresh_every) * d.refresh_every if d.refresh_every else 0
    if draft_pool_step != at:
      def make():
        log(f"Sampling draft continuations (step {at}) ...")
        prompts = [p for ps in data_lib.prompt_sets(train_prompts).values() for p in ps]
        prompts = prompts * d.get("samples_per_prompt", 1)
        pool = data_lib.sample_pool(
            full(state), draft_cfg, prompts, max_new=d.max_new_tokens, seq_len=d.seq_len,
            key=jax.random.fold_in(state.rng, at), eos_ids=target.eos_ids,
            temperature=d.temperature, batch_size=d.sample_batch_size)
        if d.teacher == "topk":
          pool = data_lib.add_teacher_topk(pool, target.params, target.cfg, d.teacher_top_k)
        return pool
      draft_pool = data_lib.cached_pool(_pool_path(workdir, f"draft_pool_{at:07d}"), make)
      draft_pool_step = at
    return draft_pool

  def batch_at(step: int) -> dict:
    parts = []
    if n_draft:
      pool = draft_pool_at(step)
      parts.append(data_lib.take(pool, data_lib.batch_indices(
          config.seed, step, pool["tokens"].shape[0], n_draft, stream=1)))
    if config.batch_size - n_draft:
      parts.append(data_lib.take(target_pool, data_lib.batch_indices(
          config.seed, step, target_pool["tokens"].shape[0], config.batch_size - n_draft, stream=0)))
    batch = data_lib.trim(data_lib.concat_batches(parts), d.get("trim_multiple", 64))
    return sharding_lib.shard_batch(batch, mesh)

  def evaluate(step: int) -> dict:
    params = full(state)
    m = {"heldout_top1_agree": heldout_agreement(params, draft_cfg, heldout_pool)}
    if ev.engine:
      r = engine_eval(target, draft_cfg, params, eval_prompts,
                      max_new_tokens=ev.max_new_tokens, k=ev.k, temperature=ev.temperature,
                      seed=config.seed)
      m.update(alpha=r["alpha"], tokens_per_pass=r["tokens_per_pass"])
    return m

  last = {}
  if start == 0 and ev.every:
    last = evaluate(0)
    writer.write(0, last)
    log(f"step 0: " + ", ".join(f"{k}={v:.4f}" for k, v in last.items()))
  bar = None
  if progress and jax.process_index() == 0:
    from tqdm import tqdm
    bar = tqdm(total=config.num_steps, initial=start, desc="distill", dynamic_ncols=True)
  for step in range(start, config.num_steps):
    state, metrics = train_step(state, frozen, target_params, batch_at(step))
    done = step + 1
    if done % config.log_every == 0 or done == config.num_steps:
      last = {k: float(v) for k, v in jax.device_get(metrics).items()}
      writer.write(done, last)
      if bar is not None:
        bar.set_postfix(loss=f"{last['loss']:.4f}")
    if ev.every and (done % ev.every == 0 or done == config.num_steps):
      m = evaluate(done)
      writer.write(done, m)
      last.update(m)
      log(f"step {done}: " + ", ".join(f"{k}={v:.4f}" for k, v in m.items()))
      ckpt.save_best(done, state, m.get("alpha", m["heldout_top1_agree"]))
    if done % config.ckpt_every == 0 or done == config.num_steps:
      ckpt.save(done, state)
    if bar is not None:
      bar.update(1)
    if stop_at is not None and done >= stop_at:
      break
  if bar is not None:
    bar.close()
  writer.close()
  summary = {"metrics": last, "latest_step": ckpt.latest_step(), "best_step": ckpt.best_step(),
             "draft_cfg": draft_cfg, "draft_params": jax.device_get(full(state))}
  ckpt.close()
  return summary


def restore_draft(config, workdir: str, target, train_prompts, best: bool = True,
                  with_step: bool = False):
  """The trained draft (cfg, full params) of a workdir: best-alpha (or latest) checkpoint."""
  draft_cfg, draft_params, _ = prepare_draft(config, workdir, target, train_prompts,
                                             log=lambda *_: None)
  trainable, frozen = draft_lib.split_params(draft_params, draft_lib.trainable_keys(config.draft))
  tx, _ = make_optimizer(config.optim, config.num_steps)
  like = TrainState(step=jnp.zeros((), jnp.int32), params=trainable, opt_state=tx.init(trainable),
                    rng=jax.random.PRNGKey(config.seed))
  ckpt = Checkpointer(workdir)
  try:
    state = ckpt.restore(like, best=best)
  finally:
    ckpt.close()
  if with_step:
    return draft_cfg, {**frozen, **state.params}, int(state.step)
  return draft_cfg, {**frozen, **state.params}
