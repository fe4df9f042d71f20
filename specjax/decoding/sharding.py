"""`generate` on a ("data", "model") mesh: placing the target, the drafter and the batch.

Axes: B batch (padded to a multiple of the mesh's "data" size), P prompt bucket.

The loop itself is unchanged: it is jitted with its inputs already placed (params split
over "model" by `specjax.models.sharding`, prompt rows over "data") and compiled under
`jax.set_mesh`, where `KVCache.init` pins the caches to ("data", "model", None, None).
"""
from __future__ import annotations

import contextlib
from typing import Any, Optional

import jax
import numpy as np
from jax.sharding import Mesh

from specjax.models import sharding as model_sharding
from specjax.models.params import canonical


def pad_rows(x: np.ndarray, multiple: int) -> np.ndarray:
  """Appends copies of the last row until the batch is a multiple of `multiple`. A copy
  of a real row finishes when that row does, so padding adds no rounds."""
  extra = -len(x) % multiple
  return x if not extra else np.concatenate([x, np.repeat(x[-1:], extra, 0)], 0)


def _put_batch(x: np.ndarray, mesh: Mesh) -> jax.Array:
  sharding = model_sharding.batch_sharding(mesh, x.ndim)
  return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def on_mesh(mesh: Mesh, target, target_params, drafter: Any, prompt: np.ndarray,
            lens: np.ndarray):
  """-> (target params, drafter, prompt [B', P], lens [B']) placed on `mesh`.

  Checks first (before any work) that the mesh's "model" axis divides the target's and
  a draft model's heads, kv heads, MLP width and vocabulary."""
  name = getattr(target, "name", "target")
  model_sharding.check_mesh(target.cfg, mesh, name)
  draft_cfg = getattr(drafter, "cfg", None)
  if draft_cfg is not None and hasattr(drafter, "params"):
    model_sharding.check_mesh(draft_cfg, mesh, getattr(drafter, "name", "draft"))
  # The one-device inference layout (`params.inference_layout`) is not sharded: drop it.
  target_params = model_sharding.place(canonical(target_params), target.cfg, mesh, name=name)
  if draft_cfg is not None and hasattr(drafter, "params"):
    drafter = drafter.replace(params=model_sharding.place(canonical(drafter.params), draft_cfg,
                                                          mesh))
  data = mesh.shape["data"]
  prompt, lens = pad_rows(np.asarray(prompt), data), pad_rows(np.asarray(lens), data)
  return target_params, drafter, _put_batch(prompt, mesh), _put_batch(lens, mesh)


def mesh_context(mesh: Optional[Mesh]):
  """`jax.set_mesh(mesh)`, or nothing on one device."""
  return contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)


def to_host(x) -> np.ndarray:
  """A (possibly multi-host) array as one numpy array on every process."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return np.asarray(x)
