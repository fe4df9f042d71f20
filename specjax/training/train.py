"""The draft task (an LM or EAGLE-style feature draft) for the shared loop (`loop.run`).

Axes: B global batch, L sequence length, N draft support, K sparse teacher entries.

    summary = train(config, workdir, target, train_prompts, heldout_prompts)

Data flows one way through the stages:
  pools (`pools`: target / generated / draft-sampled pools, the batch at each step)
  -> teacher targets (`teacher`: stored top-K, online target, or the target's features)
  -> the step (`step`: losses, AdamW, mixed precision, gradient accumulation)
  -> evaluation (`evaluate`: teacher-forced agreement, the real engine, metrics files)
  -> the loop (`loop`: optimizer, checkpoints, metrics; the same for Medusa heads).

Only the draft's trainable params (its layers and final norm, see
`specjax.training.draft`) are optimised; the shared embeddings, `head_vocab` and the
target stay frozen and out of the optimizer and the checkpoints. Rerunning the same
call on the same workdir resumes from the newest checkpoint; with the same seed the
resumed run's losses equal an uninterrupted run's, because the batch at step s is a
pure function of (seed, s) and the pools are saved in the workdir.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Optional, Sequence

from specjax.training import draft as draft_lib
from specjax.training import loop
from specjax import parallel
from specjax.models.params import PARAM_AXES
from specjax.training.checkpoints import require_checkpoint
from specjax.training.draft import init_draft  # noqa: F401 - re-exported for scripts
from specjax.training.evaluate import (engine_eval, evaluate, heldout_agreement,  # noqa: F401
                                       read_metrics)
from specjax.training.pools import Pools, eval_pool, prepare_draft
from specjax.training.step import (TrainState, feature_losses, make_optimizer,  # noqa: F401
                                   make_train_step)


def _check(config) -> None:
  d = config.data
  if d.source not in ("target", "draft", "mix"):
    raise ValueError(f"data.source must be 'target', 'draft' or 'mix', got {d.source!r}.")
  if d.teacher not in ("online", "topk"):
    raise ValueError(f"data.teacher must be 'online' or 'topk', got {d.teacher!r}.")
  if d.get("features", "cached") not in ("cached", "online"):
    raise ValueError(f"data.features must be 'cached' or 'online', got {d.features!r}.")
  accum = config.get("grad_accum", 1)
  if config.batch_size % accum:
    raise ValueError(f"batch_size={config.batch_size} is not divisible by grad_accum={accum}.")


def _step_fn(config, draft_cfg, target, tx, schedule):
  dr = config.draft
  return make_train_step(draft_cfg, target.cfg, tx, schedule, config.loss.name, config.loss.beta,
                         feature=draft_lib.is_feature(dr),
                         feature_weight=dr.get("feature_weight", 1.0),
                         feature_noise=dr.get("feature_noise", 0.0),
                         unroll_steps=dr.get("unroll_steps", 1),
                         precision=config.get("precision", "float32"),
                         accum=config.get("grad_accum", 1),
                         feature_layers=draft_lib.feature_layers(dr, target.cfg.n_layers))


def draft_task(config, workdir: str, target, train_prompts, heldout_prompts: Sequence,
               log: Callable = print) -> loop.Task:
  """The configured draft as a `loop.Task`: pools (cached in workdir/data), the draft at
  initialisation, the mesh it trains on, its step, batches and evaluation."""
  _check(config)
  d, ev = config.data, config.eval
  mesh = parallel.make_mesh(config.get("mesh"))  # "" = data parallel; "2,4" = data x model
  parallel.check_mesh(target.cfg, mesh, target.name)
  # Pools (and the draft's vocabulary from them), then the evaluation pool.
  draft_cfg, draft_params, pool = prepare_draft(config, workdir, target, train_prompts, log)
  pools = Pools(config, workdir, target, train_prompts, pool, draft_cfg, log)
  ev_pool, ev_prompts = eval_pool(config, workdir, target, train_prompts, heldout_prompts, log)
  online = d.teacher == "online" or d.get("features", "cached") == "online"
  target_params = parallel.place_state(target.params, mesh, PARAM_AXES) if online else None

  def make_step(tx, schedule):
    fn = _step_fn(config, draft_cfg, target, tx, schedule)
    return lambda state, frozen, batch: fn(state, frozen, target_params, batch)

  return loop.Task(
      name="distill", params=draft_params, trainable_keys=draft_lib.trainable_keys(config.draft),
      make_step=make_step,
      batch_at=pools.batch_at,
      evaluate=lambda p: evaluate(target, draft_cfg, p, ev_pool, ev_prompts, ev, config.seed),
      select=lambda m: m.get("alpha", m["heldout_top1_agree"]),
      summary=lambda p: {"draft_cfg": draft_cfg, "draft_params": p},
      place=lambda tree: parallel.place_state(tree, mesh, PARAM_AXES),  # opt state FSDP over "data"
      shard_batch=lambda batch: parallel.shard_batch(batch, mesh))


def train(config, workdir: str, target, train_prompts, heldout_prompts: Sequence,
          log: Callable = print, progress: bool = True, stop_at: Optional[int] = None,
          max_seconds: Optional[float] = None) -> dict:
  """Distils `target` into the configured draft in `workdir` (resuming if it holds a
  checkpoint). Returns a summary dict (last metrics, best step, draft cfg and params).

  stop_at: end this call right after that step without a final save, as if the process
  were killed there (tests of resumption; chunked runs with ckpt_every dividing it).
  max_seconds: a wall-clock budget for this call (set-up included) for a lease of fixed
  length: the first step that ends past it is evaluated and saved (latest and, by its
  alpha, best) and the call returns; rerunning resumes from there. The schedule still
  spans config.num_steps, so size num_steps to the time at hand.
  """
  started = time.monotonic()
  os.makedirs(workdir, exist_ok=True)
  task = draft_task(config, workdir, target, train_prompts, heldout_prompts, log)
  return loop.run(task, config, workdir, log=log, progress=progress, stop_at=stop_at,
                  max_seconds=max_seconds, started=started)


def restore_draft(config, workdir: str, target, train_prompts, best: bool = True,
                  with_step: bool = False):
  """The trained draft (cfg, full params) of a workdir: best-alpha (or latest) checkpoint."""
  require_checkpoint(workdir, best)
  draft_cfg, draft_params, _ = prepare_draft(config, workdir, target, train_prompts,
                                             log=lambda *_: None)
  params, step = loop.restore(draft_params, draft_lib.trainable_keys(config.draft), config,
                              workdir, best=best)
  return (draft_cfg, params, step) if with_step else (draft_cfg, params)
