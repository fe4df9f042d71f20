"""Data- and tensor-parallel placement on one ("data", "model") device mesh.

Axes of the mesh: "data" splits the batch (the prompt rows, the KV caches' rows, a training
batch, and with FSDP the optimizer moments), "model" splits each weight along one logical
axis (tensor parallel), as jax-ml/jax-llm-examples `llama3_jax/model.py` does.

The parameters' logical axes are declared where their tree is built (`ParamAxes`,
`specjax.models.params.PARAM_AXES`); `RULES` here maps them to mesh axes:

    batch -> "data";   heads, kv_heads, mlp, vocab(_subset) -> "model";   else replicated.

Everything else is computed by XLA's SPMD partitioner from these placements (jit with
sharded inputs), so the forward pass, the decoding loop and the trainer run unchanged on
one device or many (KV caches: rows over "data", kv heads over "model", `cache_spec`).

A "model" axis must divide the query heads and the MLP width and be a divisor or a multiple
of the kv heads (`check_mesh`, before any weight is read). Wider than the kv heads, each is
repeated to one a device (as vLLM, maxtext; `mesh_config`); a vocabulary it does not divide
is zero-padded (`widen_params`), the model's head slicing the logits back to the vocabulary.

Layering: `specjax.models` imports this module (the cache pins its buffers with
`constrain_cache`), so it imports nothing from specjax. A model config is read by duck
type (`Dims`), and parameter axes arrive as a `ParamAxes` argument. Sections: meshes, rules,
placement (a model's weights, FSDP state, a drafter, batches, generate's inputs), on a mesh.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Mapping, Optional, Protocol, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA_AXIS, MODEL_AXIS = "data", "model"
MESH_AXES = (DATA_AXIS, MODEL_AXIS)
__all__ = ["DATA_AXIS", "MODEL_AXIS", "MESH_AXES", "RULES", "Dims", "ParamAxes", "parse_mesh",
           "make_mesh", "model_size", "check_mesh", "mesh_config", "mesh_context", "spec_for",
           "param_specs", "param_shardings", "state_specs", "cache_spec", "batch_sharding",
           "replicated", "widen_params", "place_params", "place_state", "onto_mesh", "put_batch",
           "shard_batch", "pad_rows", "on_mesh", "constrain_cache", "to_host"]
RULES = {"batch": DATA_AXIS, "heads": MODEL_AXIS, "kv_heads": MODEL_AXIS, "mlp": MODEL_AXIS,
         "vocab": MODEL_AXIS, "vocab_subset": MODEL_AXIS}  # vocab_subset: never padded


class Dims(Protocol):
  """What `check_mesh` reads of a model config (`specjax.models.ModelConfig` has it)."""
  n_heads: int
  n_kv_heads: int
  head_dim: int
  d_ff: int


# ------------------------------------------------------------------------------ meshes

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
      shape = {DATA_AXIS: data, MODEL_AXIS: model}
  except ValueError:
    raise ValueError(f"Bad mesh {spec!r}: write 'DATA,MODEL' (e.g. '1,8') or "
                     "'data=2,model=4' (a missing axis is 1).") from None
  data, model = shape.get(DATA_AXIS, 1), shape.get(MODEL_AXIS, 1)
  if data < 1 or model < 1:
    raise ValueError(f"Bad mesh {spec!r}: axis sizes must be >= 1.")
  return data, model


def make_mesh(shape=None, devices: Optional[Sequence] = None) -> Mesh:
  """A ("data", "model") mesh over all devices (of all processes) or the given ones.

  shape: None or "" puts every device on "data" (pure data parallel: weights replicated,
  which every model allows; what `--config.mesh=` left empty means); a (data, model)
  pair, -1 in one slot taking what the other leaves; or a string for `parse_mesh`.
  """
  devices = list(jax.devices() if devices is None else devices)
  n = len(devices)
  if shape is None or (isinstance(shape, str) and not shape.strip()):
    data, model = n, 1
  elif isinstance(shape, str):
    data, model = parse_mesh(shape)
  else:
    data, model = (int(x) for x in shape)
    if model == -1 and data > 0:
      model = n // data
    elif data == -1 and model > 0:
      data = n // model
  if data * model != n or data < 1:
    raise ValueError(f"Mesh {data}x{model} needs {data * model} devices but {n} "
                     f"are available; pick data x model = {n}.")
  return Mesh(np.asarray(devices).reshape(data, model), MESH_AXES)


def model_size(mesh) -> int:
  """The "model" size of a Mesh (an int passes through; None: one device)."""
  return 1 if mesh is None else mesh if isinstance(mesh, int) else mesh.shape[MODEL_AXIS]


def _fits(cfg: Dims, m: int) -> bool:
  return not (cfg.n_heads % m or cfg.d_ff % m or (cfg.n_kv_heads % m and m % cfg.n_kv_heads))


def check_mesh(cfg: Dims, mesh: Mesh, name: str = "model") -> None:
  """One ValueError line where the "model" axis cannot hold the model (and the sizes that can)."""
  m = model_size(mesh)
  if not _fits(cfg, m):
    dims = {"attention heads": cfg.n_heads, "kv heads": cfg.n_kv_heads, "MLP width": cfg.d_ff}
    what = ", ".join(f"{k} ({v})" for k, v in dims.items() if v % m)
    sizes = [s for s in range(1, cfg.n_heads + 1) if _fits(cfg, s)]
    raise ValueError(f"{name}: the mesh's 'model' axis ({m}) does not divide the {what}; it "
                     "must divide the attention heads and MLP width and be a divisor or a multiple"
                     f" of the kv heads (replicated then): use a model-axis size in {sizes}.")


def mesh_config(cfg, mesh):
  """cfg as placed on `mesh` (or a model size m): n_kv_heads raised to m where m is a wider
  multiple of it (one replicated kv head a device); vocab_size stays (padding is sliced off)."""
  m, kv = model_size(mesh), cfg.n_kv_heads
  wide = m > kv and m % kv == 0 and cfg.n_heads % m == 0
  return dataclasses.replace(cfg, n_kv_heads=m) if wide else cfg


def mesh_context(mesh: Optional[Mesh]):
  """`jax.set_mesh(mesh)`, or nothing on one device."""
  return contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)


# ------------------------------------------------------------------------------- rules

@dataclasses.dataclass(frozen=True)
class ParamAxes:
  """The logical axes of a parameter layout, declared where the layout is built.

  tree: nested dicts of the layout's keys with, at a leaf, a tuple of logical axis names
  (None: that dimension is not split), e.g. {"attn": {"q": {"kernel": (None, "heads")}}}.
  A leaf whose key path ENDS with a declared path gets those axes (when the rank agrees),
  so one declaration serves every layer, a draft's params and optimizer moments that
  mirror the params (".../mu/layers/3/attn/q/kernel"); any other leaf is replicated.
  derived: top-level keys of layouts derived for one device (dropped before placement).
  """
  tree: Mapping
  derived: tuple[str, ...] = ()

  def of(self, keys: Sequence[str], ndim: int) -> tuple:
    """Logical axes of the leaf at `keys` (the longest declared path ending there)."""
    for start in range(len(keys)):
      node = self.tree
      for key in keys[start:]:
        node = node.get(key) if isinstance(node, Mapping) else None
      if isinstance(node, tuple) and len(node) == ndim:
        return node
    return (None,) * ndim

  def strip(self, params: dict) -> dict:
    """params without the derived entries."""
    return {k: v for k, v in params.items() if k not in self.derived}


def _keys(path) -> tuple[str, ...]:
  return tuple(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path)


def spec_for(axes: tuple) -> P:
  """Logical axes -> PartitionSpec by `RULES`."""
  return P(*(RULES.get(a) if a else None for a in axes))


def _fit(spec: Sequence, shape: Sequence[int], mesh: Mesh) -> list:
  """Replicates a dimension its mesh axis does not divide (a reduced draft head, say)."""
  return [a if a is None or shape[i] % mesh.shape[a] == 0 else None for i, a in enumerate(spec)]


def param_specs(params, axes: ParamAxes):
  """The PartitionSpec of every leaf, by its declared logical axes."""
  return jax.tree_util.tree_map_with_path(
      lambda path, x: spec_for(axes.of(_keys(path), np.ndim(x))), params)


def param_shardings(params, mesh: Mesh, axes: ParamAxes):
  """NamedShardings of every leaf (`param_specs`, fitted to the leaf's shape)."""
  return jax.tree.map(lambda x, spec: NamedSharding(mesh, P(*_fit(spec, np.shape(x), mesh))),
                      params, param_specs(params, axes))


def state_specs(tree, mesh: Mesh, axes: ParamAxes):
  """PartitionSpecs of params or a whole training state: each leaf by its logical axes;
  a leaf under "opt_state" (Adam's moments) is also split over "data" along its first
  other dimension "data" divides (ZeRO-1 / FSDP: each replica keeps 1/data of them)."""
  data = mesh.shape[DATA_AXIS]

  def leaf(path, x):
    keys, shape = _keys(path), tuple(np.shape(x))
    spec = _fit(spec_for(axes.of(keys, len(shape))), shape, mesh)
    if "opt_state" in keys and data > 1:
      free = [i for i, a in enumerate(spec) if a is None and shape[i] % data == 0]
      if free:
        spec[free[0]] = DATA_AXIS
    return P(*spec)
  return jax.tree_util.tree_map_with_path(leaf, tree)


def cache_spec() -> P:
  """KV cache buffers (keys [B, K, E, S], values [B, K, S, E]): rows over "data", kv
  heads over "model"."""
  return P(RULES["batch"], RULES["kv_heads"], None, None)


def batch_sharding(mesh: Mesh, ndim: int = 1) -> NamedSharding:
  """Arrays with a leading batch axis: split over "data", the rest replicated."""
  return NamedSharding(mesh, P(RULES["batch"], *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


# ------------------------------------------------------------------- wide model axes

def _maps(axes: tuple, shape, m: int, head_dim: int, kv_heads: int) -> dict:
  """{dim: source index of each new index, -1: zero pad}: "kv_heads" [K*E] to kv_heads heads
  (query head h reads kv head h // G: [a, a, b, b], not a tile), "vocab" to a multiple of m."""
  maps = {}
  for d, (axis, n) in enumerate(zip(axes, shape)):
    if axis == "kv_heads" and n < kv_heads * head_dim:
      new = np.arange(kv_heads * head_dim)  # new kv head j <- old head j // r
      maps[d] = new // head_dim // (kv_heads * head_dim // n) * head_dim + new % head_dim
    elif axis == "vocab" and n % m:
      new = np.arange(-(-n // m) * m)
      maps[d] = np.where(new < n, new, -1)
  return maps


def _take(x, maps: dict, xp):
  """x gathered along each mapped dimension (numpy or jax.numpy as xp), pads zeroed."""
  for d, idx in maps.items():
    keep = (idx >= 0).reshape([-1 if i == d else 1 for i in range(x.ndim)])
    x = xp.where(keep, xp.take(x, np.maximum(idx, 0), axis=d), xp.zeros((), x.dtype))
  return x


class _Widened:
  """A host or lazy leaf through `_maps`; a slice reads only the source rows/columns it needs."""
  def __init__(self, x, maps: dict):
    self.x, self.maps, self.dtype, self.ndim = x, maps, x.dtype, len(x.shape)
    self.shape = tuple(len(maps[d]) if d in maps else n for d, n in enumerate(x.shape))

  def __getitem__(self, index):
    hull, local = list(index), {}  # index: one slice a dimension (make_array_from_callback)
    for d, idx in self.maps.items():
      sub = idx[index[d]]
      valid = sub[sub >= 0]
      lo, hi = (int(valid.min()), int(valid.max()) + 1) if valid.size else (0, 1)
      hull[d], local[d] = slice(lo, hi), np.where(sub >= 0, sub - lo, -1)
    return _take(np.asarray(self.x[tuple(hull)]), local, np)


def widen_params(params, cfg: Dims, mesh, axes: ParamAxes):
  """params for `mesh_config(cfg, mesh)` (`_maps`; mesh or a model size). Shape-driven, so
  widening placed params again (load on a mesh, then generate) is a no-op."""
  m, kv = model_size(mesh), mesh_config(cfg, mesh).n_kv_heads
  def leaf(path, x):
    maps = _maps(axes.of(_keys(path), np.ndim(x)), np.shape(x), m, cfg.head_dim, kv)
    return x if not maps else _take(x, maps, jnp) if isinstance(x, jax.Array) else _Widened(x, maps)
  return jax.tree_util.tree_map_with_path(leaf, params)


# --------------------------------------------------------------------------- placement

def _put(x, sharding: NamedSharding) -> jax.Array:
  if isinstance(x, jax.Array):
    return x if x.sharding == sharding else jax.device_put(x, sharding)
  x = np.asarray(x)
  return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def place_params(params, cfg: Dims, mesh: Mesh, axes: ParamAxes, dtype=None,
                 name: str = "model"):
  """A model's weights on the mesh (derived one-device layouts dropped), each device
  reading only its own slice, widened for the mesh (`widen_params`, `mesh_config`).

  Leaves may be numpy arrays, jax arrays or lazy views with numpy-style slicing (the
  safetensors views of `specjax.loading.hf`): `make_array_from_callback` asks each leaf
  for one device's index, so no process ever holds a full host copy of a sharded weight.
  dtype: float leaves are cast to it (per slice); integer leaves keep theirs.
  """
  check_mesh(cfg, mesh, name)
  params = widen_params(axes.strip(params), cfg, mesh, axes)
  shardings = param_shardings(params, mesh, axes)
  np_dtype = None if dtype is None else np.dtype(dtype)

  def put(x, sharding):
    if isinstance(x, jax.Array):
      x = x if np_dtype is None or not np.issubdtype(x.dtype, np.floating) else x.astype(np_dtype)
      return jax.device_put(x, sharding)
    floating = np.issubdtype(np.dtype(x.dtype), np.floating)
    out_dtype = np_dtype if (np_dtype is not None and floating) else np.dtype(x.dtype)
    read = lambda index: np.ascontiguousarray(np.asarray(x[index]), dtype=out_dtype)
    return jax.make_array_from_callback(tuple(x.shape), sharding, read)

  return jax.tree.map(put, params, shardings)


def place_state(tree, mesh: Mesh, axes: ParamAxes):
  """Params or a whole training state on the mesh by `state_specs`. Orbax saves such
  arrays shard by shard and restores them into whatever shardings a `like` state
  carries, so a checkpoint written on one mesh shape restores onto another."""
  return jax.tree.map(lambda x, s: _put(x, NamedSharding(mesh, s)), tree,
                      state_specs(tree, mesh, axes))


def onto_mesh(tree, mesh: Mesh):
  """The arrays of a pytree (a drafter) on `mesh`: those already placed on it (the target's
  shared embeddings) stay as they are, the others are replicated; other leaves pass."""
  def put(x):
    placed = isinstance(x, jax.Array) and getattr(x.sharding, "mesh", None) == mesh
    return x if placed or not isinstance(x, (jax.Array, np.ndarray)) else _put(x, replicated(mesh))
  return jax.tree.map(put, tree)


def put_batch(x: np.ndarray, mesh: Mesh) -> jax.Array:
  """A host array [B, ...] split along B over "data" (each device gets its rows)."""
  return jax.make_array_from_callback(x.shape, batch_sharding(mesh, x.ndim), lambda idx: x[idx])


def shard_batch(batch: dict, mesh: Mesh) -> dict:
  """Splits each global batch array [B, ...] along B over "data". Every process builds the
  same global batch (a pure function of seed and step) and each device takes its slice."""
  n = mesh.shape[DATA_AXIS]
  sharding = batch_sharding(mesh)
  out = {}
  for name, x in batch.items():
    if x.shape[0] % n:
      raise ValueError(f"Global batch size {x.shape[0]} of {name!r} is not divisible by the "
                       f"mesh's data axis ({n}); choose a batch size that is a multiple of {n}.")
    out[name] = _put(x, sharding)
  return out


def pad_rows(x: np.ndarray, multiple: int) -> np.ndarray:
  """Appends copies of the last row until the batch is a multiple of `multiple`. A copy
  of a real row finishes when that row does, so padding adds no rounds."""
  extra = -len(x) % multiple
  return x if not extra else np.concatenate([x, np.repeat(x[-1:], extra, 0)], 0)


def on_mesh(mesh: Mesh, target, target_params, drafter: Any, prompt: np.ndarray,
            lens: np.ndarray, axes: ParamAxes):
  """-> (target params, drafter, prompt [B', P], lens [B']) placed on `mesh`, B' the
  batch padded to a multiple of the "data" size (`pad_rows`).

  target: has `cfg` (and a `name`); a drafter whose caps say `mesh_split` (a draft model)
  gets its params placed and widened as the target's (`mesh_config`); any other drafter's
  arrays are replicated (`onto_mesh`). axes: the params' logical axes (`PARAM_AXES`).
  `check_mesh`s both models first, before any work.
  """
  name = getattr(target, "name", "target")
  check_mesh(target.cfg, mesh, name)
  split = drafter is not None and drafter.caps.mesh_split
  if split:
    check_mesh(drafter.cfg, mesh, drafter.name)
  target_params = place_params(target_params, target.cfg, mesh, axes, name=name)
  if split:
    drafter = drafter.replace(params=place_params(drafter.params, drafter.cfg, mesh, axes),
                              cfg=mesh_config(drafter.cfg, mesh))
  elif drafter is not None:
    drafter = onto_mesh(drafter, mesh)
  data = mesh.shape[DATA_AXIS]
  prompt, lens = pad_rows(np.asarray(prompt), data), pad_rows(np.asarray(lens), data)
  return target_params, drafter, put_batch(prompt, mesh), put_batch(lens, mesh)


# ---------------------------------------------------------------------------- on a mesh

def constrain_cache(x: jax.Array) -> jax.Array:
  """Pins a cache buffer (keys [B, K, E, S] or values [B, K, S, E]) to `cache_spec` when a
  mesh is set (jax.set_mesh); a no-op on one device without a mesh."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or tuple(mesh.axis_names) != MESH_AXES:
    return x
  return jax.lax.with_sharding_constraint(x, cache_spec())


def to_host(x) -> np.ndarray:
  """A (possibly multi-host) array as one numpy array on every process."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    from jax.experimental import multihost_utils  # multi-host runs only
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return np.asarray(x)
