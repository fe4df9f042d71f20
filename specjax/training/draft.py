"""Draft models built from the target: shared frozen embeddings, a few initial layers,
an optional reduced output vocabulary (FR-Spec).

A draft is an ordinary decoder (`ModelConfig` + params in the usual layout), so the
speculative engine runs it with `specjax.models.forward` like any other model. Its
params split into a *trainable* part (the layers and final norm; optionally the
embeddings) and a *frozen* part (shared embeddings, `head_vocab` ids), which the
trainer keeps out of the optimizer and the checkpoints.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import ModelConfig, init_params

TRAINABLE_KEYS = ("layers", "final_norm")
FEATURE_TRAINABLE_KEYS = ("layers", "fc")  # a feature draft keeps the target's final norm


def is_feature(draft_config) -> bool:
  """Whether a `config.draft` describes a feature (EAGLE-style) draft (kind="feature")."""
  return draft_config.get("kind", "lm") == "feature"


def trainable_keys(draft_config) -> tuple:
  """The top-level param keys the trainer optimises for a `config.draft`."""
  keys = FEATURE_TRAINABLE_KEYS if is_feature(draft_config) else TRAINABLE_KEYS
  return keys + (("embed",) if draft_config.get("train_embeddings", False) else ())


def build_draft(target_cfg: ModelConfig, target_params: dict, *, n_layers: int,
                init: str = "target", key: Optional[jax.Array] = None,
                head_vocab: Optional[Sequence[int]] = None, init_std: float = 0.02,
                **cfg_overrides):
  """A draft that shares the target's embedding table (and width).

  init="target" copies the target's first n_layers blocks and its final norm;
  init="random" draws them fresh from N(0, init_std) (key required). head_vocab (ids) restricts the
  draft's output vocabulary; the embedding table stays the target's full one.
  Returns (cfg, params).
  """
  cfg = dataclasses.replace(target_cfg, n_layers=n_layers, **cfg_overrides)
  if init == "target":
    if n_layers > target_cfg.n_layers:
      raise ValueError(f"Draft has {n_layers} layers but the target only {target_cfg.n_layers}.")
    params = {"layers": [jax.tree.map(jnp.array, l) for l in target_params["layers"][:n_layers]],
              "final_norm": jax.tree.map(jnp.array, target_params["final_norm"])}
  elif init == "random":
    if key is None:
      raise ValueError("init='random' needs a PRNG key.")
    fresh = init_params(cfg, key, std=init_std)
    params = {"layers": fresh["layers"], "final_norm": fresh["final_norm"]}
  else:
    raise ValueError(f"Unknown draft init {init!r}; expected 'target' or 'random'.")
  params["embed"] = target_params["embed"]
  return cfg, _share_target(params, cfg, target_params, head_vocab)


def build_feature_draft(target_cfg: ModelConfig, target_params: dict, *, n_layers: int,
                        key: jax.Array, head_vocab: Optional[Sequence[int]] = None,
                        init_std: float = 0.02):
  """An EAGLE-style feature draft (`specjax.models.feature_draft`) for the target.

  Fresh N(0, init_std) blocks; "fc" starts as [N(0, init_std); identity] so the
  initial prediction of the next feature is the current one plus the blocks' output.
  Shares the target's embeddings, final norm and head. Returns (cfg, params).
  """
  cfg = dataclasses.replace(target_cfg, n_layers=n_layers)
  k_blocks, k_fc = jax.random.split(key)
  fresh = init_params(cfg, k_blocks, std=init_std)
  d = target_cfg.d_model
  dtype = target_params["embed"].dtype
  fc = jnp.concatenate([init_std * jax.random.normal(k_fc, (d, d)), jnp.eye(d)], 0).astype(dtype)
  params = {"layers": fresh["layers"], "fc": {"kernel": fc}, "embed": target_params["embed"],
            "final_norm": target_params["final_norm"]}
  return cfg, _share_target(params, cfg, target_params, head_vocab)


def _share_target(params: dict, cfg: ModelConfig, target_params: dict, head_vocab) -> dict:
  """Adds the target's position embeddings and untied head (shared, frozen) and the
  sorted reduced vocabulary, if any."""
  if "pos_embed" in target_params:
    params["pos_embed"] = target_params["pos_embed"]
  if not cfg.tie_embeddings:
    params["lm_head"] = target_params["lm_head"]
  if head_vocab is not None:
    params["head_vocab"] = jnp.asarray(np.sort(np.asarray(head_vocab)), jnp.int32)
  return params


def frequent_vocab(counts: np.ndarray, size: int, always: Sequence[int] = ()) -> np.ndarray:
  """The `size` most frequent ids (ties by id), always including `always` (e.g. EOS)."""
  size = min(size, counts.shape[0])
  always = [int(a) for a in always if 0 <= int(a) < counts.shape[0]]
  order = np.lexsort((np.arange(counts.shape[0]), -counts))  # by count desc, then id
  chosen = list(dict.fromkeys(always + [int(i) for i in order]))[:size]
  return np.sort(np.asarray(chosen, np.int32))


def split_params(params: dict, trainable_keys: Sequence[str] = TRAINABLE_KEYS):
  """params -> (trainable, frozen) by top-level key."""
  missing = [k for k in trainable_keys if k not in params]
  if missing:
    raise ValueError(f"Trainable keys {missing} are not in the draft params {sorted(params)}.")
  trainable = {k: v for k, v in params.items() if k in trainable_keys}
  frozen = {k: v for k, v in params.items() if k not in trainable_keys}
  return trainable, frozen


def merge_params(trainable: dict, frozen: dict) -> dict:
  return {**frozen, **trainable}
