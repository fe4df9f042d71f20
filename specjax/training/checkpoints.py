"""Orbax checkpoints of the draft's training state: latest (resume) and best alpha.

    workdir/checkpoints/<step>/   the last `max_to_keep` saves; a rerun resumes from the newest
    workdir/best/<step>/          the save with the highest held-out alpha (metrics kept by orbax)

Only the *trainable* draft state is saved (step, trainable params, optimizer state,
PRNG key); the shared frozen embeddings come from the target again on restore. Saves
are atomic (orbax writes to a temporary directory and renames it), so a run killed
mid-save leaves the previous checkpoints intact; nothing saved is ever deleted except
by the `max_to_keep` rotation.

Sharded state (`specjax.training.sharding.place`) is saved shard by shard; `restore`
reads it back into the shardings of the `like` state it is given, so a run checkpointed
on one mesh shape (say 2 x 4) resumes on another (8 x 1) or on one device.
"""
from __future__ import annotations

import gc
import logging
import os
import threading
import time
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
  """A checkpoint that should exist is missing, or is unreadable."""


def _abstract(tree):
  def leaf(x):
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))
  return jax.tree.map(leaf, tree)


def _settle_failed_restore(before: set, timeout_s: float = 10.0) -> None:
  """Lets the reads of a failed orbax restore finish inside the failure path.

  orbax runs a restore in an event loop of its own and closes it at the first error,
  while reads it started in worker threads (`asyncio.to_thread`) are still running.
  Each one, when done, hands its result to the closed loop ("RuntimeError: Event loop
  is closed"), and the pending futures they feed are finalized at some later garbage
  collection, inside whatever code runs then. Waiting for the threads this restore
  started and collecting their futures here keeps that out of the caller; their
  callback errors are orphans of the failure being reported, so they are not logged.
  """
  deadline = time.monotonic() + timeout_s
  quiet = logging.getLogger("concurrent.futures")
  level = quiet.level
  quiet.setLevel(logging.CRITICAL + 1)
  try:
    for thread in set(threading.enumerate()) - before:
      thread.join(max(0.0, deadline - time.monotonic()))
    gc.collect()
  finally:
    quiet.setLevel(level)


class Checkpointer:
  """Latest-state and best-alpha CheckpointManagers under one workdir."""

  def __init__(self, workdir: str, max_to_keep: int = 2):
    self.workdir = os.path.abspath(workdir)
    sync = dict(enable_async_checkpointing=False)
    self.latest = ocp.CheckpointManager(
        os.path.join(self.workdir, "checkpoints"),
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, **sync))
    self.best = ocp.CheckpointManager(
        os.path.join(self.workdir, "best"),
        options=ocp.CheckpointManagerOptions(
            max_to_keep=1, best_fn=lambda m: m["alpha"], best_mode="max",
            keep_checkpoints_without_metrics=False, **sync))

  def latest_step(self) -> Optional[int]:
    return self.latest.latest_step()

  def best_step(self) -> Optional[int]:
    return self.best.best_step()

  def save(self, step: int, state: Any) -> None:
    self.latest.save(step, args=ocp.args.StandardSave(state), force=True)
    self.latest.wait_until_finished()

  def save_best(self, step: int, state: Any, alpha: float) -> None:
    """Offers a state with its held-out alpha; orbax keeps the best one. A step offered
    before (a resumed run replaying steps after its last checkpoint) is kept as it was."""
    if step in self.best.all_steps():
      return
    self.best.save(step, args=ocp.args.StandardSave(state), metrics={"alpha": float(alpha)},
                   force=True)
    self.best.wait_until_finished()

  def restore(self, like: Any, step: Optional[int] = None, best: bool = False) -> Any:
    """Restores into the structure, dtypes and shardings of `like` (a state).

    step=None: the newest (or best) step. Raises CheckpointError with the path when
    there is no such checkpoint or it cannot be read.
    """
    manager = self.best if best else self.latest
    kind = "best" if best else "latest"
    if step is None:
      step = manager.best_step() if best else manager.latest_step()
    where = os.path.join(str(manager.directory), "" if step is None else str(step))
    if step is None or step not in manager.all_steps():
      raise CheckpointError(
          f"No {kind} checkpoint{'' if step is None else f' for step {step}'} under {where}; "
          f"available steps: {sorted(manager.all_steps())}.")
    before = set(threading.enumerate())
    try:
      return manager.restore(step, args=ocp.args.StandardRestore(_abstract(like)))
    except Exception as e:  # noqa: BLE001 - orbax raises many kinds; summarised below
      reason = f"{type(e).__name__}: {e}"
    _settle_failed_restore(before)
    raise CheckpointError(
        f"The {kind} checkpoint at {where} (step {step}) is corrupt or does not match this "
        f"config's draft ({reason}). It was left untouched: move it away to resume from an "
        "earlier step, or use a fresh --workdir.")

  def close(self) -> None:
    self.latest.close()
    self.best.close()
