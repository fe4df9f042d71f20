"""Tensor- and data-parallel placement of decoders on one ("data", "model") device mesh.

Axes of the mesh: "data" splits the batch (and with it the KV caches' rows), "model"
splits each weight along one logical axis (tensor parallel), as jax-ml/jax-llm-examples
`llama3_jax/model.py` does. Logical axes of the parameter leaves:

    embed [V, D]            ("vocab", None)       lm_head / head_kernel [D, V]  (None, "vocab")
    q kernel [D, H*E]       (None, "heads")       k, v kernel [D, K*E]          (None, "kv_heads")
    o kernel [H*E, D]       ("heads", None)       biases follow their kernel's output axis
    gate/up/fc [D, F]       (None, "mlp")         down/proj [F, D]              ("mlp", None)
    norms, pos_embed, q/k norms, a feature draft's fc, head_vocab: replicated

`RULES` maps logical axes to mesh axes; everything else is computed by XLA's SPMD
partitioner from these placements (jit with sharded inputs), so the forward pass, the
decoding loop and the trainer run unchanged on one device or many. KV caches
(keys [B, K, E, S], values [B, K, S, E]) are split as ("data", "model", None, None): rows
over data, kv heads over model.

A "model" axis must divide the query heads, the kv heads, the MLP width and the
vocabulary: `check_mesh` says which one does not, before any weight is read (specjax
does not pad vocabularies; pick a model-axis size that divides them, e.g. 1, 2, 4, 8).
"""
from __future__ import annotations

import re
from typing import Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from specjax.models.config import ModelConfig

MESH_AXES = ("data", "model")
RULES = {"batch": "data", "heads": "model", "kv_heads": "model", "mlp": "model",
         "vocab": "model"}

# Leaf path (joined with "/") -> logical axes; first match wins, unmatched = replicated.
_LEAF_AXES = (
    (r"(^|/)embed$", ("vocab", None)),
    (r"(^|/)(lm_head/kernel|head_kernel)$", (None, "vocab")),
    (r"attn/q/kernel$", (None, "heads")), (r"attn/q/bias$", ("heads",)),
    (r"attn/[kv]/kernel$", (None, "kv_heads")), (r"attn/[kv]/bias$", ("kv_heads",)),
    (r"attn/o/kernel$", ("heads", None)),
    (r"mlp/(gate|up|fc)/kernel$", (None, "mlp")), (r"mlp/(gate|up|fc)/bias$", ("mlp",)),
    (r"mlp/(down|proj)/kernel$", ("mlp", None)),
)


def parse_mesh(spec: str) -> tuple[int, int]:
  """ "1,8" | "data=2,model=4" | "model=8" -> (data, model); ValueError on anything else."""
  text = str(spec).replace(" ", "")
  shape = {}
  try:
    if "=" in text:
      for part in text.split(","):
        name, size = part.split("=")
        if name not in MESH_AXES or name in shape:
          raise ValueError
        shape[name] = int(size)
    else:
      data, model = (int(x) for x in text.split(","))
      shape = {"data": data, "model": model}
  except ValueError:
    raise ValueError(f"Bad mesh {spec!r}: write 'DATA,MODEL' (e.g. '1,8') or "
                     "'data=2,model=4' (a missing axis is 1).") from None
  data, model = shape.get("data", 1), shape.get("model", 1)
  if data < 1 or model < 1:
    raise ValueError(f"Bad mesh {spec!r}: axis sizes must be >= 1.")
  return data, model


def make_mesh(shape="1,-1", devices: Optional[Sequence] = None) -> Mesh:
  """A ("data", "model") mesh over all devices (of all processes) or the given ones.

  shape: (data, model), or a string for `parse_mesh`; -1 in the model slot takes what the
  data axis leaves ("1,-1" = all devices on "model").
  """
  devices = list(jax.devices() if devices is None else devices)
  if isinstance(shape, str):
    if shape.replace(" ", "") == "1,-1":
      shape = (1, len(devices))
    else:
      shape = parse_mesh(shape)
  data, model = shape
  if model == -1:
    model = len(devices) // data
  if data * model != len(devices):
    raise ValueError(f"Mesh {data}x{model} needs {data * model} devices but {len(devices)} "
                     f"are available; pick data x model = {len(devices)}.")
  return Mesh(np.asarray(devices).reshape(data, model), MESH_AXES)


def model_size(mesh: Mesh) -> int:
  return mesh.shape["model"]


def check_mesh(cfg: ModelConfig, mesh: Mesh, name: str = "model") -> None:
  """Raises ValueError naming the dimension the "model" axis does not divide."""
  m = model_size(mesh)
  dims = {"attention heads": cfg.n_heads, "kv heads": cfg.n_kv_heads, "MLP width": cfg.d_ff,
          "vocabulary": cfg.vocab_size}
  bad = {k: v for k, v in dims.items() if v % m}
  if bad:
    what = ", ".join(f"{k} ({v})" for k, v in bad.items())
    raise ValueError(f"{name}: the mesh's 'model' axis ({m}) does not divide the {what}; "
                     f"use a model-axis size that divides them (e.g. --config.mesh=data=N,model=1).")


def logical_axes(path: str, ndim: int) -> tuple:
  for pattern, axes in _LEAF_AXES:
    if re.search(pattern, path) and len(axes) == ndim:
      return axes
  return (None,) * ndim


def _path_str(path) -> str:
  return "/".join(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path)


def spec_for(axes: tuple) -> P:
  return P(*(RULES.get(a) if a else None for a in axes))


def param_specs(params) -> dict:
  """The PartitionSpec of every leaf (by its path; see the module docstring)."""
  return jax.tree_util.tree_map_with_path(
      lambda path, x: spec_for(logical_axes(_path_str(path), np.ndim(x))), params)


def param_shardings(params, mesh: Mesh) -> dict:
  """NamedShardings of every leaf; a leaf whose dimension the mesh axis does not divide
  (a reduced draft head, say) is replicated along it."""
  def sharding(x, spec):
    spec = P(*(a if a is None or x.shape[i] % mesh.shape[a] == 0 else None
               for i, a in enumerate(spec)))
    return NamedSharding(mesh, spec)
  return jax.tree.map(sharding, params, param_specs(params))


def place(params, cfg: ModelConfig, mesh: Mesh, dtype=None, name: str = "model"):
  """Puts every leaf on the mesh, each device reading only its own slice.

  Leaves may be numpy arrays, jax arrays or lazy views with numpy-style slicing (the
  safetensors views of `specjax.loading.hf`): `make_array_from_callback` asks each leaf
  for one device's index, so no process ever holds a full host copy of a sharded weight.
  dtype: float leaves are cast to it (per slice); integer leaves keep theirs.
  """
  check_mesh(cfg, mesh, name)
  shardings = param_shardings(params, mesh)
  np_dtype = None if dtype is None else np.dtype(dtype)

  def put(x, sharding):
    if isinstance(x, jax.Array):
      x = x if np_dtype is None or not np.issubdtype(x.dtype, np.floating) else x.astype(np_dtype)
      return jax.device_put(x, sharding)
    floating = np.issubdtype(np.dtype(x.dtype), np.floating)
    out_dtype = np_dtype if (np_dtype is not None and floating) else np.dtype(x.dtype)

    def read(index):
      return np.ascontiguousarray(np.asarray(x[index]), dtype=out_dtype)
    return jax.make_array_from_callback(tuple(x.shape), sharding, read)

  return jax.tree.map(put, params, shardings)


def cache_spec() -> P:
  """KV cache buffers (keys [B, K, E, S], values [B, K, S, E]): rows over "data", kv
  heads over "model"."""
  return P(RULES["batch"], RULES["kv_heads"], None, None)


def batch_sharding(mesh: Mesh, ndim: int = 1) -> NamedSharding:
  """Arrays with a leading batch axis: split over "data", the rest replicated."""
  return NamedSharding(mesh, P(RULES["batch"], *([None] * (ndim - 1))))


def constrain_cache(x: jax.Array) -> jax.Array:
  """Pins a cache buffer (keys [B, K, E, S] or values [B, K, S, E]) to `cache_spec` when a
  mesh is set (jax.set_mesh); a no-op on one device without a mesh."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or tuple(mesh.axis_names) != MESH_AXES:
    return x
  return jax.lax.with_sharding_constraint(x, cache_spec())
