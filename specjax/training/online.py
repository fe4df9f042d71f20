"""Drafts trained on the target's sampled pools with the target as online teacher (EAGLE-3,
P-EAGLE, DFlash): the task they share in the one loop (`training.loop`).

A kind says how its draft is built, which params stay frozen, its loss over a pool batch
and the metrics of that loss's second output (`OnlineDraft`); the pools (cached in the
workdir), the train step, the held-out metrics, the engine's alpha, the selection rule,
resumption and restoring a checkpoint for export are written here once.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Optional

import jax
import optax

from specjax.training import data as data_lib
from specjax.training import loop
from specjax.training.pools import pool_path, sampled_pool
from specjax.training.teacher import add_features, features_file


@dataclasses.dataclass(frozen=True)
class OnlineDraft:
  """What one kind of online-teacher draft brings.

  name: the task's name and the `PublishedDraft` kind ("eagle3", "peagle", "dflash").
  init_draft(config, target, counts) -> (cfg, params): counts, the pool's token frequencies.
  frozen(config, params) -> the keys of params that are never trained.
  loss(config, cfg, target_cfg) -> f(params, target_params, batch) -> (value, aux).
  metrics(cfg, aux) -> {name: value}; the first held-out one selects checkpoints when the
    engine is not evaluated.
  drafter: the drafter class, built as drafter(params=..., cfg=...).
  stored_teacher: whether its loss reads a pool's stored teacher (config.data.teacher =
    "topk": the target's top-K log-probabilities kept while sampling and its features at
    cfg.feature_layers, one target pass per sequence instead of one per step).
  extend_batch(config, cfg, batch, step) -> batch: host-side additions to a training batch
    (a pure function of the step, so resumption sees the same), or None.
  """
  name: str
  init_draft: Callable
  frozen: Callable
  loss: Callable
  metrics: Callable
  drafter: Any
  stored_teacher: bool = False
  extend_batch: Optional[Callable] = None


def pool_of(config, workdir, target, prompts: dict, key, log=print, top_k: int = 0) -> dict:
  """The target's continuations of each prompt set at each config.data temperature (cached
  in workdir/data as eagle3_pool_{set}_T{t}, _top{K} with a stored top-K teacher)."""
  parts = []
  for i, (name, rows) in enumerate(prompts.items()):
    for j, temp in enumerate(config.data.temperatures):
      stem = f"eagle3_pool_{name}_T{temp:g}" + (f"_top{top_k}" if top_k else "")
      parts.append(sampled_pool(target, rows, config.data, temperature=temp,
                                key=jax.random.fold_in(key, 10 * i + j),
                                path=pool_path(workdir, stem), log=log, what=repr(name),
                                top_k_teacher=top_k))
  return data_lib.concat_batches(parts)


def stored_top_k(kind: OnlineDraft, config) -> int:
  """K of the training pool's stored teacher (config.data.teacher "topk"), 0 for "online"."""
  teacher = config.data.get("teacher", "online")
  if teacher not in ("online", "topk") or (teacher == "topk" and not kind.stored_teacher):
    raise ValueError(f"config.data.teacher={teacher!r}: {kind.name} drafts train with "
                     f"'online'{' or topk' if kind.stored_teacher else ''}; set "
                     "--config.data.teacher to one of them.")
  return int(config.data.get("teacher_top_k", 32)) if teacher == "topk" else 0


def prepare(kind: OnlineDraft, config, workdir, target, train_prompts, log=print) -> tuple:
  """(cfg, params at initialisation, training pool)."""
  pool = pool_of(config, workdir, target, data_lib.prompt_sets(train_prompts),
                 jax.random.PRNGKey(config.seed), log, stored_top_k(kind, config))
  cfg, params = kind.init_draft(config, target,
                                data_lib.token_frequencies([pool], target.cfg.vocab_size))
  return cfg, params, pool


def add_stored_features(kind: OnlineDraft, config, workdir, target, cfg, pool: dict, log) -> None:
  """With a stored teacher, the target's features at cfg.feature_layers join the training
  pool (cached as {kind}_features_l{ids}); training reads them, restoring for export not."""
  if stored_top_k(kind, config):
    layers = tuple(cfg.feature_layers)
    add_features(pool, target, pool_path(workdir, features_file(f"{kind.name}_features", layers)),
                 log, layers)


def trainable_keys(kind: OnlineDraft, config, params: dict) -> tuple:
  frozen = kind.frozen(config, params)
  return tuple(k for k in params if k not in frozen)


def make_train_step(loss_fn: Callable, metrics: Callable, tx, schedule):
  """Jitted (state, frozen, target_params, batch) -> (state, metrics); state donated.
  loss_fn(params, target_params, batch) -> (value, aux); metrics(aux) -> {name: value}."""
  def step(state, frozen, target_params, batch):
    f = lambda p: loss_fn({**frozen, **p}, target_params, batch)
    (value, aux), grads = jax.value_and_grad(f, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    out = {"loss": value, "grad_norm": optax.tree.norm(grads), "lr": schedule(state.step),
           **metrics(aux)}
    return state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                         opt_state=opt_state), out
  return jax.jit(step, donate_argnums=(0,))


def task(kind: OnlineDraft, config, workdir: str, target, train_prompts, heldout_prompts,
         log=print) -> loop.Task:
  """The draft as a `loop.Task`: the target's pools, the kind's loss with the target as
  online teacher, its metrics on a held-out pool and the engine's greedy alpha
  (config.eval.k drafts)."""
  from specjax.decoding.generate import generate
  ev = config.eval
  cfg, params, pool = prepare(kind, config, workdir, target, train_prompts, log)
  add_stored_features(kind, config, workdir, target, cfg, pool, log)
  held = pool_of(config, workdir, target, {"heldout": data_lib.spread(
      heldout_prompts, ev.get("num_heldout_pool", 16))}, jax.random.PRNGKey(config.seed + 1), log)
  eval_prompts = data_lib.spread(heldout_prompts, ev.num_prompts)
  n = pool["tokens"].shape[0]
  extend = kind.extend_batch or (lambda config, cfg, batch, step: batch)
  loss_fn = kind.loss(config, cfg, target.cfg)
  metrics = lambda aux: kind.metrics(cfg, aux)
  held_aux = jax.jit(lambda p, tp, b: loss_fn(p, tp, b)[1])

  def evaluate(p) -> dict:
    m = {f"heldout_{k}": float(v) for k, v in metrics(held_aux(p, target.params, held)).items()}
    if ev.engine:
      res = generate(target, eval_prompts, ev.max_new_tokens, kind.drafter(params=p, cfg=cfg),
                     k=ev.k)
      m.update(alpha=res.stats.acceptance_rate, tokens_per_pass=res.stats.tokens_per_pass)
    return m

  def make_step(tx, schedule):
    fn = make_train_step(loss_fn, metrics, tx, schedule)
    return lambda state, frozen, batch: fn(state, frozen, target.params, batch)

  return loop.Task(
      name=kind.name, params=params, trainable_keys=trainable_keys(kind, config, params),
      make_step=make_step,
      batch_at=lambda step, *_: extend(config, cfg, data_lib.take(
          pool, data_lib.batch_indices(config.seed, step, n, config.batch_size)), step),
      # without the engine: the first held-out metric (`evaluate` writes them first)
      evaluate=evaluate, select=lambda m: m.get("alpha", next(iter(m.values()))),
      summary=lambda p: {"cfg": cfg, "params": p})


def train(kind: OnlineDraft, config, workdir: str, target, train_prompts, heldout_prompts,
          log=print, stop_at=None, max_seconds=None, progress: bool = False) -> dict:
  """Trains the draft for `target` in `workdir` with the one loop, resuming from its newest
  checkpoint; stop_at / max_seconds as in `specjax.training.train.train`."""
  started = time.monotonic()
  os.makedirs(workdir, exist_ok=True)
  t = task(kind, config, workdir, target, train_prompts, heldout_prompts, log)
  return loop.run(t, config, workdir, log=log, progress=progress, stop_at=stop_at,
                  max_seconds=max_seconds, started=started)


def restore(kind: OnlineDraft, config, workdir: str, target, train_prompts,
            best: bool = True) -> tuple:
  """(cfg, params, step) of a workdir's best (or latest) checkpoint."""
  cfg, params, _ = prepare(kind, config, workdir, target, train_prompts, log=lambda *_: None)
  params, step = loop.restore(params, trainable_keys(kind, config, params), config, workdir,
                              best=best)
  return cfg, params, step


def published(kind: OnlineDraft, config, workdir: str, target, train_prompts, best: bool = True):
  """A workdir's best (or latest) draft as a `PublishedDraft` for `draft_formats.save`."""
  from specjax.loading.draft_formats import PublishedDraft
  from specjax.training.checkpoints import require_checkpoint
  require_checkpoint(workdir, best)
  cfg, params, step = restore(kind, config, workdir, target, train_prompts, best)
  return PublishedDraft(name=f"{workdir}@{step}", kind=kind.name, fmt="specjax", cfg=cfg,
                        params=params)
