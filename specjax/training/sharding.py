"""Data parallelism over every device with `jax.sharding`.

One mesh axis, "data", spans all devices of all processes (`jax.devices()`), so the
same code runs on one CPU, on a TPU/GPU host and on many hosts after
`jax.distributed.initialize()`. Batches are split along their leading axis; the
draft's params, the optimizer state and the frozen target are replicated. Every
process builds the same global batch (the batch order is a pure function of seed and
step), and `make_array_from_callback` hands each device its slice, so no process
needs another's data.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA_AXIS = "data"


def make_mesh(devices=None) -> Mesh:
  """A 1-D mesh over all devices (or the given ones), axis name "data"."""
  devices = jax.devices() if devices is None else devices
  return Mesh(np.asarray(devices), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(DATA_AXIS))


def _put(x, sharding: NamedSharding) -> jax.Array:
  if isinstance(x, jax.Array) and x.sharding == sharding:
    return x
  x = np.asarray(x)
  return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def replicate(tree, mesh: Mesh):
  """Places every leaf of a host pytree on all devices."""
  sharding = replicated(mesh)
  return jax.tree.map(lambda x: _put(x, sharding), tree)


def shard_batch(batch: dict, mesh: Mesh) -> dict:
  """Splits each global batch array [B, ...] along B over the mesh's data axis."""
  n = mesh.devices.size
  sharding = batch_sharding(mesh)
  out = {}
  for name, x in batch.items():
    if x.shape[0] % n:
      raise ValueError(f"Global batch size {x.shape[0]} of {name!r} is not divisible by the "
                       f"{n} devices of the mesh; choose a batch size that is a multiple of {n}.")
    out[name] = _put(x, sharding)
  return out
