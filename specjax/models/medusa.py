"""Medusa heads: K small heads on the target's last hidden state (Cai et al. 2024).

Axes: B batch, T positions, K heads, L residual blocks per head, D target width,
V target vocabulary, N support (V, or V' ids of a reduced head).

Head i (0-based) reads the target's hidden state h_t at position t (the one whose own
head predicts token t + 1) and predicts token t + 2 + i:

    x = final_norm(h_t)                          # the target's own final norm
    y = x + SiLU(x W_i,l + b_i,l)   for l = 1..L  # residual blocks, zero-initialised
    logits_i = y @ E^T                           # the target's (frozen) output projection

The projection is the target's, shared and frozen, so a head is only L x (D x D + D)
weights; optionally it scores only a reduced vocabulary `head_vocab` (FR-Spec style:
the other ids get probability zero, so speculative verification stays exact). With
zero-initialised blocks every head starts as the target's own head. Heads published
with Medusa-1 (FasterDecoding/Medusa) own their projections instead: with "proj"
(head i's own [D, V] output layer) logits_i = y @ proj_i and the target's is not read.

params: {"w": [K, L, D, D], "b": [K, L, D], "head_vocab": [V'] int32 (optional),
         "proj": [K, D, V] (optional, not with head_vocab)}.
An asset on disk (`save_medusa` / `load_medusa`) is medusa.safetensors (float16 blocks,
int32 ids) plus specjax_medusa.json naming the target it was trained for.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.config import ModelConfig
from specjax.models.transformer import norm

META_FILE = "specjax_medusa.json"
TENSORS_FILE = "medusa.safetensors"


@dataclasses.dataclass(frozen=True)
class MedusaConfig:
  """Static shape of a set of Medusa heads (hashable: a jit static argument).

  n_heads: K (head i predicts token t + 2 + i). n_layers: residual blocks per head.
  d_model, vocab_size: the target's width and vocabulary the heads were built for.
  """
  n_heads: int
  d_model: int
  vocab_size: int
  n_layers: int = 1

  def __post_init__(self):
    if self.n_heads < 1 or self.n_layers < 1:
      raise ValueError(f"Medusa needs n_heads >= 1 and n_layers >= 1, got {self.n_heads}, "
                       f"{self.n_layers}.")


def init_medusa(cfg: MedusaConfig, head_vocab=None, std: float = 0.0, key=None,
                dtype=jnp.float32) -> dict:
  """Heads at initialisation: zero blocks (each head = the target's head) unless std > 0."""
  shape = (cfg.n_heads, cfg.n_layers, cfg.d_model, cfg.d_model)
  w = jnp.zeros(shape, dtype) if not std else (std * jax.random.normal(key, shape)).astype(dtype)
  params = {"w": w, "b": jnp.zeros((cfg.n_heads, cfg.n_layers, cfg.d_model), dtype)}
  if head_vocab is not None:
    params["head_vocab"] = jnp.asarray(np.sort(np.asarray(head_vocab)), jnp.int32)
  return params


def check_target(cfg: MedusaConfig, target_cfg: ModelConfig, name: str = "medusa") -> None:
  """A clear error when the heads were built for a target of another width or vocabulary."""
  if cfg.d_model != target_cfg.d_model or cfg.vocab_size != target_cfg.vocab_size:
    raise ValueError(
        f"Medusa heads {name!r} were built for a target with hidden size {cfg.d_model} and "
        f"{cfg.vocab_size} tokens, but this target has hidden size {target_cfg.d_model} and "
        f"{target_cfg.vocab_size} tokens; train heads for this target "
        "(scripts/distill_medusa.py).")


def target_kernel(target_params: dict, target_cfg: ModelConfig) -> jax.Array:
  """The target's output projection [D, V]."""
  if target_cfg.tie_embeddings:
    return target_params["embed"].T
  return target_params["lm_head"]["kernel"]


def support_kernel(params: dict, target_params: dict, target_cfg: ModelConfig) -> jax.Array:
  """[D, N]: the projection onto the heads' support (all ids, or head_vocab's columns)."""
  kernel = target_kernel(target_params, target_cfg)
  if "head_vocab" in params:
    return jnp.take(kernel, params["head_vocab"], axis=1)
  return kernel


def head_features(params: dict, target_params: dict, target_cfg: ModelConfig,
                  hidden: jax.Array) -> jax.Array:
  """hidden [..., D] (the target's, before its final norm) -> per-head y [..., K, D]."""
  x = norm(target_params["final_norm"], target_cfg, hidden).astype(jnp.float32)
  y = jnp.broadcast_to(x[..., None, :], x.shape[:-1] + (params["w"].shape[0], x.shape[-1]))
  for l in range(params["w"].shape[1]):
    w, b = params["w"][:, l].astype(jnp.float32), params["b"][:, l].astype(jnp.float32)
    y = y + jax.nn.silu(jnp.einsum("...kd,kde->...ke", y, w) + b)
  return y


def support_logits(params: dict, target_params: dict, target_cfg: ModelConfig,
                   hidden: jax.Array, kernel: Optional[jax.Array] = None) -> jax.Array:
  """hidden [..., D] -> float32 logits on the support [..., K, N] (training).

  kernel: the support projection [D, N] if already gathered (`support_kernel`); heads
  with their own projections ("proj", N = V) use those and ignore it."""
  if "proj" in params:
    y = head_features(params, target_params, target_cfg, hidden)
    return jnp.einsum("...kd,kdv->...kv", y, params["proj"].astype(jnp.float32))
  if kernel is None:
    kernel = support_kernel(params, target_params, target_cfg)
  y = head_features(params, target_params, target_cfg, hidden)
  return (y @ kernel.astype(jnp.float32)).astype(jnp.float32)


def medusa_logits(params: dict, target_params: dict, target_cfg: ModelConfig,
                  hidden: jax.Array, kernel: Optional[jax.Array] = None) -> jax.Array:
  """hidden [..., D] -> float32 logits on the full vocabulary [..., K, V]; ids outside a
  reduced head get the most negative float (probability exactly zero after warping)."""
  sub = support_logits(params, target_params, target_cfg, hidden, kernel)
  if "head_vocab" not in params:
    return sub
  full = jnp.full(sub.shape[:-1] + (target_cfg.vocab_size,), jnp.finfo(jnp.float32).min)
  return full.at[..., params["head_vocab"]].set(sub)


# -------------------------------------------------------------------------- assets


def save_medusa(cfg: MedusaConfig, params: dict, out_dir: str, target: str = "",
                extra: Optional[dict] = None) -> None:
  """Writes the heads (float16 blocks, int32 ids) and specjax_medusa.json to out_dir."""
  from safetensors.numpy import save_file
  os.makedirs(out_dir, exist_ok=True)
  tensors = {"w": np.asarray(params["w"], np.float16), "b": np.asarray(params["b"], np.float16)}
  if "head_vocab" in params:
    tensors["head_vocab"] = np.asarray(params["head_vocab"], np.int32)
  if "proj" in params:
    tensors["proj"] = np.asarray(params["proj"], np.float16)
  save_file(tensors, os.path.join(out_dir, TENSORS_FILE))
  meta = {"kind": "medusa", "target": target, **dataclasses.asdict(cfg), **(extra or {})}
  with open(os.path.join(out_dir, META_FILE), "w", encoding="utf-8") as f:
    json.dump(meta, f, indent=2, sort_keys=True)


def is_medusa_dir(path: str) -> bool:
  return os.path.isdir(path) and os.path.isfile(os.path.join(path, META_FILE))


def load_medusa(path: str) -> tuple:
  """An asset directory -> (MedusaConfig, params as float32 jax arrays, meta dict)."""
  from safetensors.numpy import load_file
  if not is_medusa_dir(path):
    raise ValueError(f"{path}: not a Medusa heads directory (no {META_FILE}); write one with "
                     "specjax.models.medusa.save_medusa or scripts/distill_medusa.py.")
  with open(os.path.join(path, META_FILE), encoding="utf-8") as f:
    meta = json.load(f)
  fields = {f.name for f in dataclasses.fields(MedusaConfig)}
  cfg = MedusaConfig(**{k: int(v) for k, v in meta.items() if k in fields})
  tensors = load_file(os.path.join(path, TENSORS_FILE))
  params = {"w": jnp.asarray(tensors["w"], jnp.float32), "b": jnp.asarray(tensors["b"], jnp.float32)}
  if "head_vocab" in tensors:
    params["head_vocab"] = jnp.asarray(tensors["head_vocab"], jnp.int32)
  if "proj" in tensors:
    params["proj"] = jnp.asarray(tensors["proj"], jnp.float32)
  if params["w"].shape != (cfg.n_heads, cfg.n_layers, cfg.d_model, cfg.d_model):
    raise ValueError(f"{path}: the heads' weights {params['w'].shape} do not match its "
                     f"{META_FILE} ({cfg}).")
  return cfg, params, meta
