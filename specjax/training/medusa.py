"""Medusa-1 training: the target stays frozen, only the heads learn.

Axes: B batch, L sequence length, K heads, N head support, D target width.

    summary = train_medusa(config, workdir, target, train_prompts, heldout_prompts)

Data: the target's own continuations of the training prompts (`data.temperatures`, 0 =
greedy), sampled once with `specjax.training.pools.sampled_pool` (the sampler every task
uses), and the target's hidden states over them (`teacher.add_features`), both cached in
workdir/data. A head reads one
position's hidden state and nothing else, so the pools are flattened into position
examples (`position_examples`: the feature at t and the tokens t + 2 .. t + 1 + K) and
batches are drawn from those. Loss (Medusa-1, Cai et al. 2024): head i's cross-entropy
against the target's token t + 2 + i wherever that token was sampled (and lies in the
head's support), weighted by decay**i and summed over heads. The heads are a task of the
shared loop (`specjax.training.loop`): its optimizer (AdamW, warm-up and cosine decay),
checkpoints (latest for resuming, best held-out engine alpha) and metrics files. The
batch at step s is a pure function of (seed, s) and the pools are cached, so a resumed
run equals an uninterrupted one.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from specjax.models import medusa as medusa_lib
from specjax.training import data as data_lib
from specjax.training import loop
from specjax.training.draft import frequent_vocab
from specjax.training.evaluate import engine_eval
from specjax.training.pools import pool_path, sampled_pool
from specjax.training.step import TrainState
from specjax.training.teacher import add_features

FROZEN_KEYS = ("head_vocab",)

def medusa_loss(params: dict, cfg: medusa_lib.MedusaConfig, target_params: dict, target_cfg,
                kernel: jax.Array, batch: dict, decay: float):
  """Medusa-1 loss on position examples {"features" [B, D], "labels" [B, K], "valid" [B, K]}.

  Returns (loss, {"ce_h{i}", "acc_h{i}", "n_h{i}"}): per-head cross-entropy, top-1
  accuracy and the number of labels counted.
  """
  logits = medusa_lib.support_logits(params, target_params, target_cfg,
                                     batch["features"].astype(jnp.float32), kernel)  # [B, K, N]
  if "head_vocab" in params:
    index = jnp.full((target_cfg.vocab_size,), -1, jnp.int32).at[params["head_vocab"]].set(
        jnp.arange(params["head_vocab"].shape[0], dtype=jnp.int32))
  else:
    index = jnp.arange(target_cfg.vocab_size, dtype=jnp.int32)
  logp = jax.nn.log_softmax(logits, -1)
  label = index[batch["labels"]]  # [B, K] support positions, -1 outside
  valid = batch["valid"] * (label >= 0)
  picked = jnp.take_along_axis(logp, jnp.maximum(label, 0)[..., None], -1)[..., 0]  # [B, K]
  hit = (jnp.argmax(logp, -1) == label) * valid
  total, parts = 0.0, {}
  for i in range(cfg.n_heads):
    n = jnp.maximum(valid[:, i].sum(), 1.0)
    ce = -(picked[:, i] * valid[:, i]).sum() / n
    total = total + decay ** i * ce
    parts.update({f"ce_h{i}": ce, f"acc_h{i}": hit[:, i].sum() / n, f"n_h{i}": valid[:, i].sum()})
  return total, parts


def position_examples(pool: dict, n_heads: int) -> dict:
  """A pool {"tokens", "mask", "features"} [N, L(, D)] -> position examples: at every
  position t whose first label (token t + 2) was sampled, "features" [P, D] (h_t),
  "labels" [P, K] (tokens t + 2 + i) and "valid" [P, K] (that token was sampled)."""
  tokens, mask = pool["tokens"], pool["mask"]
  n, length = tokens.shape
  labels = np.zeros((n, length, n_heads), np.int32)
  valid = np.zeros((n, length, n_heads), np.float32)
  for i in range(n_heads):
    span = length - 2 - i
    if span > 0:
      labels[:, :span, i] = tokens[:, 2 + i:]
      valid[:, :span, i] = mask[:, 1 + i:1 + i + span]
  keep = valid[:, :, 0] > 0
  return {"features": pool["features"][keep], "labels": labels[keep], "valid": valid[keep]}


_loss_jit = jax.jit(medusa_loss, static_argnums=(1, 3, 6))


def make_train_step(cfg, target_cfg, tx, schedule, decay: float):
  """Jitted (state, frozen, target_params, kernel, batch) -> (state, metrics); state donated."""
  def step(state: TrainState, frozen, target_params, kernel, batch):
    loss_fn = lambda p: medusa_loss({**frozen, **p}, cfg, target_params, target_cfg, kernel,
                                    batch, decay)
    (loss, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), "lr": schedule(state.step),
               **parts}
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics
  return jax.jit(step, donate_argnums=(0,))


# -------------------------------------------------------------------------- data


def target_pool(config, workdir, target, prompts, name: str, key, log=print,
                temperatures: Sequence[float] = ()) -> dict:
  """The target's continuations of `prompts` (one per temperature) with its hidden states,
  each part cached in workdir/data (medusa_pool_{name}_T{t}, medusa_features_...)."""
  parts = []
  for i, temp in enumerate(temperatures or config.data.temperatures):
    stem = f"medusa_pool_{name}_T{temp:g}"
    pool = sampled_pool(target, prompts, config.data, temperature=temp,
                        key=jax.random.fold_in(key, i), path=pool_path(workdir, stem),
                        log=log, what=repr(name))
    add_features(pool, target, pool_path(workdir, stem.replace("pool", "features")), log)
    parts.append(pool)
  return data_lib.concat_batches(parts)


def init_heads(config, target, pool: dict):
  """(MedusaConfig, params) at initialisation for this target."""
  m = config.medusa
  cfg = medusa_lib.MedusaConfig(n_heads=m.n_heads, d_model=target.cfg.d_model,
                                vocab_size=target.cfg.vocab_size, n_layers=m.n_layers)
  head_vocab = None
  if m.head_vocab_size:
    counts = data_lib.token_frequencies([pool], target.cfg.vocab_size)
    head_vocab = frequent_vocab(counts, m.head_vocab_size, target.eos_ids)
  params = medusa_lib.init_medusa(cfg, head_vocab, std=m.init_std,
                                  key=jax.random.fold_in(jax.random.PRNGKey(config.seed), 2))
  return cfg, params


def heldout_accuracy(params, cfg, target, kernel, examples: dict, batch_size: int = 512) -> list:
  """Top-1 accuracy of each head on held-out position examples (the target's greedy tokens)."""
  hits, total = np.zeros(cfg.n_heads), np.zeros(cfg.n_heads)
  for s in range(0, examples["labels"].shape[0], batch_size):
    batch = {k: v[s:s + batch_size] for k, v in examples.items()}
    pad = batch_size - batch["labels"].shape[0]
    batch = {k: np.pad(v, [(0, pad)] + [(0, 0)] * (v.ndim - 1)) for k, v in batch.items()}
    parts = jax.device_get(_loss_jit(params, cfg, target.params, target.cfg, kernel, batch, 1.0)[1])
    for i in range(cfg.n_heads):
      hits[i] += float(parts[f"acc_h{i}"]) * float(parts[f"n_h{i}"])
      total[i] += float(parts[f"n_h{i}"])
  return (hits / np.maximum(total, 1)).tolist()


# -------------------------------------------------------------------------- the task


def prepare(config, workdir, target, train_prompts, log=print):
  """Pools (cached) and initial heads -> (cfg, params, train pool)."""
  key = jax.random.PRNGKey(config.seed)
  pools = [target_pool(config, workdir, target, prompts, name, jax.random.fold_in(key, 10 + i), log)
           for i, (name, prompts) in enumerate(data_lib.prompt_sets(train_prompts).items())]
  pool = data_lib.concat_batches(pools)
  cfg, params = init_heads(config, target, pool)
  return cfg, params, pool


def trainable_keys(params: dict) -> tuple:
  return tuple(k for k in params if k not in FROZEN_KEYS)


def medusa_task(config, workdir: str, target, train_prompts, heldout_prompts: Sequence,
                log: Callable = print) -> loop.Task:
  """Medusa heads as a `loop.Task`: position examples of the cached pools, the Medusa-1
  loss, held-out per-head accuracy and the engine's alpha with the heads."""
  ev = config.eval
  cfg, params, pool = prepare(config, workdir, target, train_prompts, log)
  kernel = medusa_lib.support_kernel(params, target.params, target.cfg)
  examples = position_examples(pool, cfg.n_heads)
  held = position_examples(target_pool(
      config, workdir, target, data_lib.spread(heldout_prompts, ev.get("num_heldout_pool", 0)),
      "heldout", jax.random.PRNGKey(0), log, temperatures=(0.0,)), cfg.n_heads)
  log(f"{examples['labels'].shape[0]} training / {held['labels'].shape[0]} held-out positions.")
  eval_prompts = data_lib.spread(heldout_prompts, ev.num_prompts)
  n = examples["labels"].shape[0]

  def make_step(tx, schedule):
    fn = make_train_step(cfg, target.cfg, tx, schedule, config.medusa.decay)
    return lambda state, frozen, batch: fn(state, frozen, target.params, kernel, batch)

  def evaluate(p) -> dict:
    m = {f"heldout_acc_h{i}": a for i, a in
         enumerate(heldout_accuracy(p, cfg, target, kernel, held))}
    if ev.engine:
      r = engine_eval(target, cfg, p, eval_prompts, max_new_tokens=ev.max_new_tokens,
                      k=min(ev.k, cfg.n_heads), temperature=ev.get("temperature", 0.0),
                      seed=config.seed)
      m.update(alpha=r["alpha"], tokens_per_pass=r["tokens_per_pass"])
    return m

  def log_line(step: int, m: dict) -> str:
    return f"step {step}: loss={m['loss']:.4f} " + " ".join(
        f"acc_h{i}={m[f'acc_h{i}']:.3f}" for i in range(cfg.n_heads))

  return loop.Task(
      name="medusa", params=params, trainable_keys=trainable_keys(params), make_step=make_step,
      batch_at=lambda step, *_: data_lib.take(
          examples, data_lib.batch_indices(config.seed, step, n, config.batch_size)),
      evaluate=evaluate, select=lambda m: m.get("alpha", m["heldout_acc_h0"]),
      summary=lambda p: {"cfg": cfg, "params": p}, log_line=log_line)


def train_medusa(config, workdir: str, target, train_prompts, heldout_prompts: Sequence,
                 log: Callable = print, stop_at: Optional[int] = None,
                 max_seconds: Optional[float] = None, progress: bool = False) -> dict:
  """Trains Medusa heads for `target` in `workdir`, resuming from its newest checkpoint.

  Returns {"metrics", "latest_step", "best_step", "cfg", "params"}. stop_at / max_seconds:
  as in `specjax.training.train.train` (a resumable chunk; a wall-clock budget).
  """
  started = time.monotonic()
  os.makedirs(workdir, exist_ok=True)
  task = medusa_task(config, workdir, target, train_prompts, heldout_prompts, log)
  return loop.run(task, config, workdir, log=log, progress=progress, stop_at=stop_at,
                  max_seconds=max_seconds, started=started)


def restore_heads(config, workdir: str, target, train_prompts, best: bool = True):
  """The trained heads of a workdir: (cfg, params, step) of the best (or latest) checkpoint."""
  cfg, params, _ = prepare(config, workdir, target, train_prompts, log=lambda *_: None)
  params, step = loop.restore(params, trainable_keys(params), config, workdir, best=best)
  return cfg, params, step
