"""Medusa-1 training: the target stays frozen, only the heads learn.

Axes: B batch, L sequence length, K heads, N head support, D target width.

    summary = train_medusa(config, workdir, target, train_prompts, heldout_prompts)

Data: the target's own continuations of the training prompts (`data.temperatures`, 0 =
greedy), sampled once with `specjax.training.data.sample_pool`, and the target's hidden
states over them (`data.target_features`), both cached in workdir/data. A head reads one
position's hidden state and nothing else, so the pools are flattened into position
examples (`position_examples`: the feature at t and the tokens t + 2 .. t + 1 + K) and
batches are drawn from those. Loss (Medusa-1, Cai et al. 2024): head i's cross-entropy
against the target's token t + 2 + i wherever that token was sampled (and lies in the
head's support), weighted by decay**i and summed over heads. Optimiser: AdamW (optax) with warm-up and cosine decay.
Checkpoints: orbax (`specjax.training.checkpoints.Checkpointer`), the latest for resuming
and the best held-out engine alpha. The batch at step s is a pure function of (seed, s)
and the pools are cached, so a resumed run equals an uninterrupted one.
"""
from __future__ import annotations

import functools
import json
import os
import time
from typing import Callable, Optional, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from specjax.models import medusa as medusa_lib
from specjax.training import data as data_lib, teacher as teacher_lib
from specjax.training.checkpoints import Checkpointer

FROZEN_KEYS = ("head_vocab",)


@flax.struct.dataclass
class MedusaTrainState:
  """step: [] updates so far; params: the heads' trainable weights {"w", "b"};
  opt_state: optax state of params; rng: [2] base key (unused by the loss, kept for
  variants that add noise)."""
  step: jax.Array
  params: dict
  opt_state: object
  rng: jax.Array


def make_optimizer(optim, total_steps: int):
  """AdamW after global-norm clipping, linear warm-up then cosine decay."""
  schedule = optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=optim.lr, warmup_steps=min(optim.warmup_steps, total_steps),
      decay_steps=max(total_steps, optim.warmup_steps + 1),
      end_value=optim.lr * optim.end_lr_fraction)
  tx = optax.chain(optax.clip_by_global_norm(optim.clip_norm),
                   optax.adamw(schedule, b1=optim.b1, b2=optim.b2, weight_decay=optim.weight_decay))
  return tx, schedule


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
  def step(state: MedusaTrainState, frozen, target_params, kernel, batch):
    loss_fn = lambda p: medusa_loss({**frozen, **p}, cfg, target_params, target_cfg, kernel,
                                    batch, decay)
    (loss, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {"loss": loss, "grad_norm": optax.global_norm(grads), "lr": schedule(state.step),
               **parts}
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics
  return jax.jit(step, donate_argnums=(0,))


# -------------------------------------------------------------------------- data


def _pool_path(workdir: Optional[str], stem: str) -> Optional[str]:
  return workdir and os.path.join(workdir, "data", f"{stem}.npz")


def target_pool(config, workdir, target, prompts, name: str, key, log=print,
                temperatures: Sequence[float] = ()) -> dict:
  """The target's continuations of `prompts` (one per temperature) with its hidden states,
  each part cached in workdir/data (medusa_pool_{name}_T{t}, medusa_features_...)."""
  d = config.data
  parts = []
  for i, temp in enumerate(temperatures or d.temperatures):
    stem = f"medusa_pool_{name}_T{temp:g}"

    def make(temp=temp, i=i):
      log(f"Sampling target continuations (T = {temp:g}) for {len(prompts)} prompts of "
          f"{name!r} ...")
      return data_lib.sample_pool(
          target.params, target.cfg, prompts, max_new=d.max_new_tokens, seq_len=d.seq_len,
          key=jax.random.fold_in(key, i), eos_ids=target.eos_ids, temperature=temp,
          batch_size=d.sample_batch_size,
          progress=lambda a, b: log(f"  sampled {a}/{b} ({time.strftime('%H:%M:%S')})"))
    pool = data_lib.cached_pool(_pool_path(workdir, stem), make)

    def feats(pool=pool):
      log(f"Target features of {pool['tokens'].shape[0]} sequences ({stem}) ...")
      return {"features": teacher_lib.target_features(pool, target.params, target.cfg)}
    pool = dict(pool, features=data_lib.cached_pool(
        _pool_path(workdir, stem.replace("pool", "features")), feats)["features"])
    parts.append(pool)
  return data_lib.concat_batches(parts)


def frequent_ids(pool: dict, vocab_size: int, size: int, always=()) -> np.ndarray:
  """The `size` most frequent continuation ids of the pool (ties by id), `always` included."""
  counts = data_lib.token_frequencies([pool], vocab_size)
  order = np.lexsort((np.arange(vocab_size), -counts))
  chosen = list(dict.fromkeys([int(a) for a in always] + [int(i) for i in order]))[:size]
  return np.sort(np.asarray(chosen, np.int32))


def init_heads(config, target, pool: dict):
  """(MedusaConfig, params) at initialisation for this target."""
  m = config.medusa
  cfg = medusa_lib.MedusaConfig(n_heads=m.n_heads, d_model=target.cfg.d_model,
                                vocab_size=target.cfg.vocab_size, n_layers=m.n_layers)
  head_vocab = None
  if m.head_vocab_size:
    head_vocab = frequent_ids(pool, target.cfg.vocab_size, m.head_vocab_size, target.eos_ids)
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


def engine_eval(target, cfg, params, prompts, *, max_new_tokens: int, k: int, tree=None,
                temperature: float = 0.0, seed: int = 0) -> dict:
  """alpha and tokens per target pass of the speculative engine with these heads."""
  from specjax.decoding import generate
  from specjax.decoding.medusa import MedusaDrafter
  drafter = MedusaDrafter.for_target(cfg, params, target)
  res = generate(target, list(prompts), max_new_tokens, draft=drafter, k=k, tree=tree,
                 temperature=temperature, seed=seed)
  return {"alpha": res.stats.acceptance_rate, "tokens_per_pass": res.stats.tokens_per_pass}


# -------------------------------------------------------------------------- loop


def _write(path: str, step: int, metrics: dict) -> None:
  with open(path, "a", encoding="utf-8") as f:
    f.write(json.dumps({"step": int(step), "time": time.time(),
                        **{k: float(v) for k, v in metrics.items()}}) + "\n")


def prepare(config, workdir, target, train_prompts, log=print):
  """Pools (cached) and initial heads -> (cfg, params, train pool)."""
  key = jax.random.PRNGKey(config.seed)
  pools = [target_pool(config, workdir, target, prompts, name, jax.random.fold_in(key, 10 + i), log)
           for i, (name, prompts) in enumerate(data_lib.prompt_sets(train_prompts).items())]
  pool = data_lib.concat_batches(pools)
  cfg, params = init_heads(config, target, pool)
  return cfg, params, pool


def _split(params: dict):
  return ({k: v for k, v in params.items() if k not in FROZEN_KEYS},
          {k: v for k, v in params.items() if k in FROZEN_KEYS})


def _like_state(config, params):
  tx, _ = make_optimizer(config.optim, config.num_steps)
  trainable, _ = _split(params)
  return MedusaTrainState(step=jnp.zeros((), jnp.int32), params=trainable,
                          opt_state=tx.init(trainable), rng=jax.random.PRNGKey(config.seed))


def train_medusa(config, workdir: str, target, train_prompts, heldout_prompts: Sequence,
                 log: Callable = print, stop_at: Optional[int] = None) -> dict:
  """Trains Medusa heads for `target` in `workdir`, resuming from its newest checkpoint.

  Returns {"metrics", "latest_step", "best_step", "cfg", "params"}. stop_at: end right
  after that step without a final save, as if killed there (tests of resumption).
  """
  os.makedirs(workdir, exist_ok=True)
  ev = config.eval
  cfg, params, pool = prepare(config, workdir, target, train_prompts, log)
  trainable, frozen = _split(params)
  kernel = medusa_lib.support_kernel(params, target.params, target.cfg)
  examples = position_examples(pool, cfg.n_heads)
  held = position_examples(target_pool(
      config, workdir, target, data_lib.spread(heldout_prompts, ev.get("num_heldout_pool", 0)),
      "heldout", jax.random.PRNGKey(0), log, temperatures=(0.0,)), cfg.n_heads)
  log(f"{examples['labels'].shape[0]} training / {held['labels'].shape[0]} held-out positions.")
  eval_prompts = data_lib.spread(heldout_prompts, ev.num_prompts)

  tx, schedule = make_optimizer(config.optim, config.num_steps)
  state = _like_state(config, params)
  ckpt = Checkpointer(workdir, max_to_keep=config.keep_checkpoints)
  start = 0
  if ckpt.latest_step() is not None:
    state = ckpt.restore(state)
    start = int(state.step)
    log(f"Resuming from step {start} ({os.path.join(workdir, 'checkpoints')}).")
  train_step = make_train_step(cfg, target.cfg, tx, schedule, config.medusa.decay)
  metrics_path = os.path.join(workdir, "metrics.jsonl")
  full = lambda st: {**frozen, **st.params}

  def evaluate(step: int) -> dict:
    p = full(state)
    m = {f"heldout_acc_h{i}": a for i, a in
         enumerate(heldout_accuracy(p, cfg, target, kernel, held))}
    if ev.engine:
      r = engine_eval(target, cfg, p, eval_prompts, max_new_tokens=ev.max_new_tokens,
                      k=min(ev.k, cfg.n_heads), seed=config.seed)
      m.update(alpha=r["alpha"], tokens_per_pass=r["tokens_per_pass"])
    return m

  last = {}
  if start == 0 and ev.every:
    last = evaluate(0)
    _write(metrics_path, 0, last)
    log("step 0: " + ", ".join(f"{k}={v:.4f}" for k, v in last.items()))
  n = examples["labels"].shape[0]
  for step in range(start, config.num_steps):
    batch = data_lib.take(examples, data_lib.batch_indices(config.seed, step, n, config.batch_size))
    state, metrics = train_step(state, frozen, target.params, kernel, batch)
    done = step + 1
    if done % config.log_every == 0 or done == config.num_steps:
      last = {k: float(v) for k, v in jax.device_get(metrics).items()}
      _write(metrics_path, done, last)
      log(f"step {done}: loss={last['loss']:.4f} " + " ".join(
          f"acc_h{i}={last[f'acc_h{i}']:.3f}" for i in range(cfg.n_heads)))
    if ev.every and (done % ev.every == 0 or done == config.num_steps):
      m = evaluate(done)
      _write(metrics_path, done, m)
      last.update(m)
      log(f"step {done}: " + ", ".join(f"{k}={v:.4f}" for k, v in m.items()))
      ckpt.save_best(done, state, m.get("alpha", m["heldout_acc_h0"]))
    if done % config.ckpt_every == 0 or done == config.num_steps:
      ckpt.save(done, state)
    if stop_at is not None and done >= stop_at:
      break
  summary = {"metrics": last, "latest_step": ckpt.latest_step(), "best_step": ckpt.best_step(),
             "cfg": cfg, "params": jax.device_get(full(state))}
  ckpt.close()
  return summary


def restore_heads(config, workdir: str, target, train_prompts, best: bool = True):
  """The trained heads of a workdir: (cfg, params, step) of the best (or latest) checkpoint."""
  cfg, params, _ = prepare(config, workdir, target, train_prompts, log=lambda *_: None)
  _, frozen = _split(params)
  ckpt = Checkpointer(workdir)
  try:
    state = ckpt.restore(_like_state(config, params), best=best)
  finally:
    ckpt.close()
  return cfg, {**frozen, **state.params}, int(state.step)
