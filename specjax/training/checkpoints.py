"""Orbax checkpoints of the draft's training state: latest (resume) and best alpha.

    workdir/checkpoints/<step>/   the last `max_to_keep` saves; a rerun resumes from the newest
    workdir/best/<step>/          the save with the highest held-out alpha (metrics kept by orbax)

Only the *trainable* draft state is saved (step, trainable params, optimizer state,
PRNG key); the shared frozen embeddings come from the target again on restore. Saves
are atomic (orbax writes to a temporary directory and renames it), so a run killed
mid-save leaves the previous checkpoints intact; nothing saved is ever deleted except
by the `max_to_keep` rotation.

Sharded state (`specjax.parallel.place_state`) is saved shard by shard; `restore`
reads it back into the shardings of the `like` state it is given, so a run checkpointed
on one mesh shape (say 2 x 4) resumes on another (8 x 1) or on one device.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
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


class _DrainingLoop(asyncio.SelectorEventLoop):
  """An event loop whose close() first lets the tasks still on it finish, as asyncio.run
  does, then shuts down its async generators and default executor.

  orbax (0.12.8) runs each restore phase with `run_until_complete` + `close` on a fresh
  loop (`_run_sync_via_new_loop` in orbax/checkpoint/_src/asyncio_utils.py), without
  asyncio.run's teardown, and gathers its reads without return_exceptions: at the first
  failed read the loop is closed while the other reads are still in flight on
  tensorstore's native thread pool (made by the first save or restore of the process,
  invisible to `threading.enumerate`) and in `asyncio.to_thread` workers. Each, when
  done, calls `call_soon_threadsafe` on the closed loop: "RuntimeError: Event loop is
  closed", reported as unraisable from a tensorstore thread (pytest: a
  PytestUnraisableExceptionWarning in whatever test runs then), and the tasks waiting
  for it stay pending until a later collection. Whether a read is still in flight at
  the first error is a race, hence the order dependence. Draining before closing lets
  every read the restore started deliver its result to a live loop.
  (Not covered: a restore called inside a running event loop, e.g. a notebook, where
  orbax runs on a uvloop it creates itself.)
  """
  drain_timeout_s = 60.0

  def close(self) -> None:
    if not self.is_running() and not self.is_closed():
      try:
        self._drain()
      finally:
        super().close()
    else:
      super().close()

  def _drain(self) -> None:
    deadline = time.monotonic() + self.drain_timeout_s
    while pending := asyncio.all_tasks(self):
      left = deadline - time.monotonic()
      everything = asyncio.gather(*pending, return_exceptions=True)  # retrieves their errors
      try:
        self.run_until_complete(asyncio.wait_for(everything, max(left, 0.0)))
      except asyncio.TimeoutError:  # wait_for cancelled them; a stuck read is not waited for
        break
    self.run_until_complete(self.shutdown_asyncgens())
    self.run_until_complete(self.shutdown_default_executor())


class _DrainingPolicy(asyncio.AbstractEventLoopPolicy):
  """The policy in force, except that a loop created in `thread_id` is a _DrainingLoop.

  asyncio's event loop policy is the one public hook into the loops orbax creates (orbax
  has no option for it; the policy API is deprecated from Python 3.14 and goes in 3.16).
  Every other thread, and every get/set_event_loop, goes to the policy in force unchanged.
  """

  def __init__(self, base: asyncio.AbstractEventLoopPolicy, thread_id: int):
    self._base, self._thread_id = base, thread_id

  def new_event_loop(self):
    if threading.get_ident() == self._thread_id:
      return _DrainingLoop()
    return self._base.new_event_loop()

  def get_event_loop(self):
    return self._base.get_event_loop()

  def set_event_loop(self, loop) -> None:
    self._base.set_event_loop(loop)

  def get_child_watcher(self):
    return self._base.get_child_watcher()

  def set_child_watcher(self, watcher) -> None:
    self._base.set_child_watcher(watcher)


_POLICY_LOCK = threading.Lock()


@contextlib.contextmanager
def _loops_drain_on_close():
  """Within the block, event loops this thread creates wait for their tasks on close."""
  with _POLICY_LOCK:
    base = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(_DrainingPolicy(base, threading.get_ident()))
    try:
      yield
    finally:
      asyncio.set_event_loop_policy(base)


LATEST_DIR, BEST_DIR = "checkpoints", "best"  # under the workdir, one <step>/ each save


def require_checkpoint(workdir: str, best: bool = True) -> None:
  """Raises CheckpointError (one line saying what to do) unless `workdir` holds a best (or
  latest) checkpoint. Reads the directory only (opening a Checkpointer would create it), so
  callers check before they load a target or sample pools into a directory that is no run."""
  path = os.path.join(workdir, BEST_DIR if best else LATEST_DIR)
  if not (os.path.isdir(path) and any(d.isdigit() for d in os.listdir(path))):
    raise CheckpointError(f"--workdir={workdir} holds no {'best' if best else 'latest'} checkpoint "
                          f"({path}/ has none): train there first (scripts/distill.py "
                          f"--workdir={workdir}) or point --workdir at a distillation run.")


class Checkpointer:
  """Latest-state and best-alpha CheckpointManagers under one workdir."""

  def __init__(self, workdir: str, max_to_keep: int = 2):
    self.workdir = os.path.abspath(workdir)
    sync = dict(enable_async_checkpointing=False)
    self.latest = ocp.CheckpointManager(
        os.path.join(self.workdir, LATEST_DIR),
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, **sync))
    self.best = ocp.CheckpointManager(
        os.path.join(self.workdir, BEST_DIR),
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
    try:
      with _loops_drain_on_close():
        return manager.restore(step, args=ocp.args.StandardRestore(_abstract(like)))
    except Exception as e:  # noqa: BLE001 - orbax raises many kinds; summarised below
      reason = f"{type(e).__name__}: {e}"
    gc.collect()  # the failed reads' finished futures sit in traceback cycles; free them here
    raise CheckpointError(
        f"The {kind} checkpoint at {where} (step {step}) is corrupt or does not match this "
        f"config's draft ({reason}). It was left untouched: move it away to resume from an "
        "earlier step, or use a fresh --workdir.")

  def close(self) -> None:
    self.latest.close()
    self.best.close()
