"""The distillation loop: the stages of `specjax.training` called in order.

Axes: B global batch, L sequence length, N draft support, K sparse teacher entries.

    summary = train(config, workdir, target, train_prompts, heldout_prompts)

Data flows one way through the stages:
  pools (`pools`: target / generated / draft-sampled pools, the batch at each step)
  -> teacher targets (`teacher`: stored top-K, online target, or the target's features)
  -> the step (`step`: losses, AdamW, mixed precision, gradient accumulation)
  -> evaluation (`evaluate`: teacher-forced agreement, the real engine, metrics files)
  -> checkpoints (`checkpoints`: latest for resuming, best for selection).

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

import jax
import jax.numpy as jnp

from specjax.training import draft as draft_lib
from specjax.training import sharding as sharding_lib
from specjax.training.checkpoints import Checkpointer, require_checkpoint
from specjax.training.draft import init_draft  # noqa: F401 - re-exported for scripts
from specjax.training.evaluate import (MetricsWriter, engine_eval, evaluate,  # noqa: F401
                                       heldout_agreement, read_metrics)
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
  _check(config)
  d, ev = config.data, config.eval
  mesh = sharding_lib.make_mesh(config.get("mesh"))  # "" = data parallel; "2,4" = data x model
  sharding_lib.check_mesh(target.cfg, mesh, target.name)
  # Pools (and the draft's vocabulary from them), then the evaluation pool.
  draft_cfg, draft_params, pool = prepare_draft(config, workdir, target, train_prompts, log)
  trainable, frozen = draft_lib.split_params(draft_params, draft_lib.trainable_keys(config.draft))
  pools = Pools(config, workdir, target, train_prompts, pool, draft_cfg, log)
  ev_pool, ev_prompts = eval_pool(config, workdir, target, train_prompts, heldout_prompts, log)

  # The step and its state.
  tx, schedule = make_optimizer(config.optim, config.num_steps)
  trainable = sharding_lib.place(trainable, mesh)
  frozen = sharding_lib.place(frozen, mesh)
  online = d.teacher == "online" or d.get("features", "cached") == "online"
  target_params = sharding_lib.place(target.params, mesh) if online else None
  state = TrainState(step=jnp.zeros((), jnp.int32), params=trainable,
                     opt_state=tx.init(trainable), rng=jax.random.PRNGKey(config.seed))
  state = sharding_lib.place(state, mesh)  # opt state FSDP over "data"
  ckpt = Checkpointer(workdir, max_to_keep=config.keep_checkpoints)
  start = 0
  if ckpt.latest_step() is not None:
    try:
      state = ckpt.restore(state)
    except Exception:
      ckpt.close()  # a corrupt checkpoint: release orbax's managers before the error
      raise
    start = int(state.step)
    log(f"Resuming from step {start} ({os.path.join(workdir, 'checkpoints')}).")
  train_step = _step_fn(config, draft_cfg, target, tx, schedule)
  writer = MetricsWriter(workdir)
  full = lambda st: {**frozen, **st.params}
  run_eval = lambda: evaluate(target, draft_cfg, full(state), ev_pool, ev_prompts, ev, config.seed)

  last = {}
  if start == 0 and ev.every:
    last = run_eval()
    writer.write(0, last)
    log(f"step 0: " + ", ".join(f"{k}={v:.4f}" for k, v in last.items()))
  bar = None
  if progress and jax.process_index() == 0:
    from tqdm import tqdm
    bar = tqdm(total=config.num_steps, initial=start, desc="distill", dynamic_ncols=True)
  for step in range(start, config.num_steps):
    batch = sharding_lib.shard_batch(pools.batch_at(step, full(state), state.rng), mesh)
    state, metrics = train_step(state, frozen, target_params, batch)
    done = step + 1
    out_of_time = max_seconds is not None and time.monotonic() - started > max_seconds
    if done % config.log_every == 0 or done == config.num_steps or out_of_time:
      last = {k: float(v) for k, v in jax.device_get(metrics).items()}
      writer.write(done, last)
      if bar is not None:
        bar.set_postfix(loss=f"{last['loss']:.4f}")
    if ev.every and (done % ev.every == 0 or done == config.num_steps or out_of_time):
      m = run_eval()
      writer.write(done, m)
      last.update(m)
      log(f"step {done}: " + ", ".join(f"{k}={v:.4f}" for k, v in m.items()))
      ckpt.save_best(done, state, m.get("alpha", m["heldout_top1_agree"]))
    if done % config.ckpt_every == 0 or done == config.num_steps or out_of_time:
      ckpt.save(done, state)
    if bar is not None:
      bar.update(1)
    if out_of_time:
      log(f"Out of time ({max_seconds:.0f} s) after step {done}: saved; rerun to resume.")
      break
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
  require_checkpoint(workdir, best)
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
