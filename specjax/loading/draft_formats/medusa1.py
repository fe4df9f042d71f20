"""Medusa-1 heads as FasterDecoding/Medusa publishes them -> specjax's Medusa heads.

A published directory holds config.json (`medusa_num_heads`, `medusa_num_layers`,
`base_model_name_or_path`) and `medusa_lm_head.safetensors` or `medusa_lm_head.pt`, the
state dict of `medusa_head` (an nn.ModuleList of K nn.Sequential):

    {i}.{l}.linear.weight [D, D], {i}.{l}.linear.bias [D]   l < L: ResBlock, y = y + SiLU(W y + b)
    {i}.{L}.weight [V, D]                                    head i's own lm_head (no bias)

Head i reads the base model's output hidden state (`base_model.model(...)[0]`, i.e. after
its final norm) and predicts the token i + 2 positions on, exactly as
`specjax.models.medusa`; the only difference is that each published head owns its
projection, which lands in the optional "proj" [K, D, V] param. (Medusa's code builds the
L blocks of a head as one repeated ResBlock, so a file with L > 1 may hold L copies of
one block; they are read as written.) A config that declares fewer heads than the file
holds is followed, as Medusa's legacy loader does (`load_state_dict(strict=False)`).

    detect(path) -> bool
    load(path, target, name, fmt) -> PublishedDraft(kind="medusa1", cfg=MedusaConfig, params)
"""
from __future__ import annotations

import os
import re
from typing import Optional

import jax.numpy as jnp
import numpy as np

from specjax.errors import LoadError
from specjax.loading.draft_formats.torch_file import file_shapes, read_weights
from specjax.models.medusa import MedusaConfig

WEIGHT_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")
_PREFIX = "medusa_head."  # a state dict taken from the whole MedusaModel
_KEY = re.compile(r"^(\d+)\.(\d+)\.")


def weights_file(path: str) -> Optional[str]:
  """The heads' weights file of a directory (safetensors preferred), or None."""
  for f in WEIGHT_FILES:
    if os.path.isfile(os.path.join(path, f)):
      return os.path.join(path, f)
  return None


def detect(path: str) -> bool:
  """A directory holding Medusa-1 heads (medusa_lm_head.safetensors / .pt)."""
  return os.path.isdir(path) and weights_file(path) is not None


def _read_config(path: str, name: str) -> dict:
  from specjax.loading.hf import read_json
  cfg_path = os.path.join(path, "config.json")
  return read_json(cfg_path, name) if os.path.isfile(cfg_path) else {}


def _declared(hf: dict, key: str, name: str) -> Optional[int]:
  v = hf.get(key)
  if v is None:
    return None
  if not isinstance(v, int) or isinstance(v, bool) or v < 1:
    raise LoadError(f"{name}: config.json {key}={v!r} is not a positive integer; fix the "
                    "config of these Medusa heads.")
  return v


def check_layout(shapes: dict, n_heads: int, n_layers: int, target_cfg, name: str) -> tuple:
  """(D, V) of the heads, after checking every tensor they need is there with the shape
  the target requires (hidden size D = the target's width, V = its vocabulary)."""
  d, v = target_cfg.d_model, target_cfg.vocab_size
  want = {}
  for i in range(n_heads):
    for l in range(n_layers):
      want[f"{i}.{l}.linear.weight"] = (d, d)
      want[f"{i}.{l}.linear.bias"] = (d,)
    want[f"{i}.{n_layers}.weight"] = (v, d)
  missing = [k for k in want if k not in shapes]
  if missing:
    raise LoadError(f"{name}: the Medusa heads lack {len(missing)} tensors the config's "
                    f"{n_heads} heads x {n_layers} layers need (e.g. {missing[0]!r}); the file "
                    "is truncated or the config does not match it.")
  proj = shapes["0.%d.weight" % n_layers]
  block = shapes["0.0.linear.weight"]
  if block != (d, d) or proj[1:] != (d,):
    raise LoadError(f"{name}: these Medusa heads are for a target with hidden size "
                    f"{block[-1]}, but this target's is {d}; use heads trained for this target.")
  if proj[0] != v:
    raise LoadError(f"{name}: these Medusa heads predict {proj[0]} tokens, but this target has "
                    f"a vocabulary of {v}; use heads trained for this target's tokenizer.")
  bad = {k: (tuple(shapes[k]), s) for k, s in want.items() if tuple(shapes[k]) != s}
  if bad:
    k = next(iter(bad))
    raise LoadError(f"{name}: Medusa tensor {k!r} has shape {bad[k][0]}, expected {bad[k][1]}; "
                    "the checkpoint is inconsistent.")
  return d, v


def load(path: str, target, name: Optional[str] = None, fmt: str = "medusa1",
         dtype=jnp.float32):
  """Reads published Medusa-1 heads for `target` (a loaded Model) -> PublishedDraft.

  Every check (declared counts, tensor names and shapes against the target) runs on the
  config and the file's index before any weight is read."""
  from specjax.loading.draft_formats import PublishedDraft
  name = name or path
  wfile = weights_file(path)
  if wfile is None:
    raise LoadError(f"{name}: no {' or '.join(WEIGHT_FILES)} in {path}; not Medusa-1 heads.")
  hf = _read_config(path, name)
  shapes = {k[len(_PREFIX):] if k.startswith(_PREFIX) else k: tuple(s)
            for k, s in file_shapes(wfile, name).items()}
  found = [m for m in map(_KEY.match, shapes) if m]
  if not found:
    raise LoadError(f"{name}: {os.path.basename(wfile)} holds no '{{head}}.{{layer}}.*' tensors; "
                    "not Medusa-1 heads.")
  n_heads = _declared(hf, "medusa_num_heads", name) or 1 + max(int(m[1]) for m in found)
  n_layers = _declared(hf, "medusa_num_layers", name)
  if n_layers is None:  # the blocks are ".linear."; the last index is the projection
    n_layers = 1 + max([int(m[2]) for m in found if ".linear." in m.string] + [-1])
  check_layout(shapes, n_heads, n_layers, target.cfg, name)
  t = {k[len(_PREFIX):] if k.startswith(_PREFIX) else k: x
       for k, x in read_weights(wfile, name).items()}
  f32 = lambda k: np.asarray(t[k], np.float32)
  # torch Linear weights are [out, in]; specjax's blocks are [in, out] kernels.
  w = np.stack([np.stack([f32(f"{i}.{l}.linear.weight").T for l in range(n_layers)])
                for i in range(n_heads)])  # [K, L, D, D]
  b = np.stack([np.stack([f32(f"{i}.{l}.linear.bias") for l in range(n_layers)])
                for i in range(n_heads)])  # [K, L, D]
  proj = np.stack([f32(f"{i}.{n_layers}.weight").T for i in range(n_heads)])  # [K, D, V]
  cfg = MedusaConfig(n_heads=n_heads, d_model=target.cfg.d_model,
                     vocab_size=target.cfg.vocab_size, n_layers=n_layers)
  params = {"w": jnp.asarray(w, dtype), "b": jnp.asarray(b, dtype),
            "proj": jnp.asarray(proj, dtype)}
  return PublishedDraft(name=name, kind="medusa1", fmt=fmt, cfg=cfg, params=params,
                        verifier=hf.get("base_model_name_or_path"))
