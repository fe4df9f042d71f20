"""Training on a ("data", "model") mesh: tensor parallel + data parallel, FSDP-style
optimizer state, with `jax.sharding`.

The mesh spans every device of every process (`jax.devices()`), so the same code runs
on one CPU, on a TPU/GPU host and on many hosts after `jax.distributed.initialize()`.
`config.mesh` picks its shape ("" = every device on "data", i.e. pure data parallel as
before; "1,8" or "data=2,model=4" otherwise; see `specjax.models.sharding.parse_mesh`).

* The frozen target, the draft's trainable and frozen params are placed by the logical-axis
  rules of `specjax.models.sharding` (heads, kv heads, MLP width, vocabulary over "model";
  everything else replicated), the draft exactly like its target.
* The optimizer state (Adam's moments) follows its parameter's "model" split and is also
  split over "data" along its first other dimension that "data" divides (ZeRO-1 / FSDP of
  the optimizer state): each data-parallel replica keeps 1/data of the moments; XLA inserts
  the gathers. Scalars (step, counts) and the PRNG key are replicated.
* Batches are split along their leading axis over "data". Every process builds the same
  global batch (a pure function of seed and step), and `make_array_from_callback` hands
  each device its slice, so no process needs another's data.

Orbax saves these arrays shard by shard and restores them into whatever shardings the
`like` state carries, so a checkpoint written on one mesh shape restores onto another.
"""
from __future__ import annotations

from typing import Optional

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from specjax.models import sharding as model_sharding

DATA_AXIS = "data"
MODEL_AXIS = "model"


def make_mesh(shape: Optional[str] = None, devices=None) -> Mesh:
  """A ("data", "model") mesh over all devices (or the given ones). shape: None or "" puts
  every device on "data"; else a string for `specjax.models.sharding.parse_mesh`."""
  devices = list(jax.devices() if devices is None else devices)
  if not shape:
    return model_sharding.make_mesh((len(devices), 1), devices)
  return model_sharding.make_mesh(shape, devices)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(DATA_AXIS))


def _put(x, sharding: NamedSharding) -> jax.Array:
  if isinstance(x, jax.Array):
    return x if x.sharding == sharding else jax.device_put(x, sharding)
  x = np.asarray(x)
  return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def replicate(tree, mesh: Mesh):
  """Places every leaf of a pytree on all devices."""
  sharding = replicated(mesh)
  return jax.tree.map(lambda x: _put(x, sharding), tree)


def _spec(path: str, shape: tuple, mesh: Mesh, fsdp: bool) -> P:
  axes = list(model_sharding.spec_for(model_sharding.logical_axes(path, len(shape))))
  axes = [a if a is None or shape[i] % mesh.shape[a] == 0 else None for i, a in enumerate(axes)]
  data = mesh.shape[DATA_AXIS]
  if fsdp and data > 1:
    for i, a in enumerate(axes):
      if a is None and shape[i] % data == 0:
        axes[i] = DATA_AXIS
        break
  return P(*axes)


def specs(tree, mesh: Mesh):
  """PartitionSpecs of a params / TrainState tree (leaves under `opt_state` get FSDP)."""
  def leaf(path, x):
    name = model_sharding._path_str(path)
    return _spec(name, tuple(np.shape(x)), mesh, fsdp="opt_state" in name)
  return jax.tree_util.tree_map_with_path(leaf, tree)


def place(tree, mesh: Mesh):
  """Places params or a whole TrainState on the mesh by `specs` (see module docstring)."""
  return jax.tree.map(lambda x, s: _put(x, NamedSharding(mesh, s)), tree, specs(tree, mesh))


def check_mesh(cfg, mesh: Mesh, name: str) -> None:
  """The target's heads, kv heads, MLP width and vocabulary must split over "model"."""
  model_sharding.check_mesh(cfg, mesh, name)


def shard_batch(batch: dict, mesh: Mesh) -> dict:
  """Splits each global batch array [B, ...] along B over the mesh's data axis."""
  n = mesh.shape[DATA_AXIS]
  sharding = batch_sharding(mesh)
  out = {}
  for name, x in batch.items():
    if x.shape[0] % n:
      raise ValueError(f"Global batch size {x.shape[0]} of {name!r} is not divisible by the "
                       f"mesh's data axis ({n}); choose a batch size that is a multiple of {n}.")
    out[name] = _put(x, sharding)
  return out
