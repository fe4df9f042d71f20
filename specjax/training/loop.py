"""The one training loop, shared by every kind of draft (a *task*).

    task = Task(...)                      # `train.draft_task` or `medusa.medusa_task`
    summary = run(task, config, workdir)  # train, evaluate, checkpoint; resumes from workdir
    params, step = restore(task.params, task.trainable_keys, config, workdir)

A task brings what differs between drafts: its params at initialisation, which of them
the optimizer updates, the jitted step, the batch at each step, the periodic evaluation,
the number checkpoint selection maximises and its entries of the summary. The loop owns
the rest, once: the optimizer (`step.make_optimizer`), the state (`step.TrainState`),
orbax checkpoints (latest for resuming, best for selection), metrics files, the progress
bar and the time budget.

Resumption: the batch at step s is a pure function of (seed, s) and the pools are cached
in the workdir, so a run killed after any checkpoint and rerun on the same workdir ends
with the params and losses of an uninterrupted run.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from specjax.training.checkpoints import Checkpointer
from specjax.training.draft import split_params
from specjax.training.evaluate import MetricsWriter
from specjax.training.step import TrainState, make_optimizer


def _same(tree):
  return tree


@dataclasses.dataclass
class Task:
  """What one kind of draft brings to `run`.

  name: the progress bar's label. params: full params at initialisation (trainable and
  frozen). trainable_keys: the top-level keys the optimizer updates (the rest stay frozen
  and out of the checkpoints). make_step: (tx, schedule) -> jitted
  step(state, frozen, batch) -> (state, metrics), state donated. batch_at: (step, full
  params, base key) -> the step's global batch as host arrays. evaluate: full params ->
  metrics (held-out and engine). select: evaluation metrics -> the number best/ keeps
  the highest of. summary: full host params -> the task's entries of the summary.
  place / shard_batch: put a params or state tree / a batch on the mesh (identity when
  the task runs on one device). log_line: training metrics -> a line logged every
  log_every steps (None: the progress bar shows the loss).
  """
  name: str
  params: dict
  trainable_keys: tuple
  make_step: Callable
  batch_at: Callable
  evaluate: Callable
  select: Callable
  summary: Callable
  place: Callable = _same
  shard_batch: Callable = _same
  log_line: Optional[Callable] = None


def init_state(params: dict, trainable_keys, config, place: Callable = _same):
  """(TrainState at step 0, frozen params, tx, schedule) of these params, placed by `place`."""
  tx, schedule = make_optimizer(config.optim, config.num_steps)
  trainable, frozen = split_params(params, trainable_keys)
  trainable, frozen = place(trainable), place(frozen)
  state = TrainState(step=jnp.zeros((), jnp.int32), params=trainable,
                     opt_state=tx.init(trainable), rng=jax.random.PRNGKey(config.seed))
  return place(state), frozen, tx, schedule


def _line(step: int, metrics: dict) -> str:
  return f"step {step}: " + ", ".join(f"{k}={v:.4f}" for k, v in metrics.items())


def run(task: Task, config, workdir: str, log: Callable = print, progress: bool = True,
        stop_at: Optional[int] = None, max_seconds: Optional[float] = None,
        started: Optional[float] = None) -> dict:
  """Trains `task` in `workdir` (resuming from its newest checkpoint). Returns
  {"metrics", "latest_step", "best_step", **task.summary(params)}.

  stop_at: end right after that step without a final save, as if the process were killed
  there (tests of resumption; chunked runs). max_seconds: a wall-clock budget counted from
  `started` (default: now): the first step that ends past it is evaluated and saved, and
  the call returns; rerunning resumes from there.
  """
  started = time.monotonic() if started is None else started
  state, frozen, tx, schedule = init_state(task.params, task.trainable_keys, config, task.place)
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
  train_step = task.make_step(tx, schedule)
  writer = MetricsWriter(workdir)
  full = lambda st: {**frozen, **st.params}
  ev_every = config.eval.every

  last = {}
  if start == 0 and ev_every:
    last = task.evaluate(full(state))
    writer.write(0, last)
    log(_line(0, last))
  bar = None
  if progress and jax.process_index() == 0:
    from tqdm import tqdm
    bar = tqdm(total=config.num_steps, initial=start, desc=task.name, dynamic_ncols=True)
  for step in range(start, config.num_steps):
    batch = task.shard_batch(task.batch_at(step, full(state), state.rng))
    state, metrics = train_step(state, frozen, batch)
    done = step + 1
    out_of_time = max_seconds is not None and time.monotonic() - started > max_seconds
    if done % config.log_every == 0 or done == config.num_steps or out_of_time:
      last = {k: float(v) for k, v in jax.device_get(metrics).items()}
      writer.write(done, last)
      if task.log_line is not None:
        log(task.log_line(done, last))
      if bar is not None:
        bar.set_postfix(loss=f"{last['loss']:.4f}")
    if ev_every and (done % ev_every == 0 or done == config.num_steps or out_of_time):
      m = task.evaluate(full(state))
      writer.write(done, m)
      last.update(m)
      log(_line(done, m))
      ckpt.save_best(done, state, task.select(m))
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
             **task.summary(jax.device_get(full(state)))}
  ckpt.close()
  return summary


def restore(params: dict, trainable_keys, config, workdir: str, best: bool = True):
  """(full params, step) of a workdir's best (or latest) checkpoint; `params` are the task's
  params at initialisation (the frozen part and the shapes to restore into)."""
  like, frozen, _, _ = init_state(params, trainable_keys, config)
  ckpt = Checkpointer(workdir)
  try:
    state = ckpt.restore(like, best=best)
  finally:
    ckpt.close()
  return {**frozen, **state.params}, int(state.step)
