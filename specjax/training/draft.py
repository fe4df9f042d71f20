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
import os
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


def feature_layers(draft_config, n_target_layers: int) -> Optional[tuple]:
  """`config.draft.feature_layers` as a tuple of target layer indices, or None for the
  last layer only ("last", None, (-1,) or just the last layer's index). Several layers
  (EAGLE-3: early, middle, late; negative indices count from the end, so (2, 15, -1))
  must be increasing and end with the target's last layer, whose next feature the draft
  predicts."""
  spec = draft_config.get("feature_layers", "last")
  if spec is None or spec == "last":
    return None
  if isinstance(spec, str):
    raise ValueError(f"draft.feature_layers must be 'last' or a tuple of target layer indices "
                     f"such as (2, 15, 29), got {spec!r}.")
  n = n_target_layers
  layers = tuple(int(i) + n if int(i) < 0 else int(i) for i in spec)
  if not layers or list(layers) != sorted(set(layers)) or layers[0] < 0 or layers[-1] != n - 1:
    raise ValueError(f"draft.feature_layers={tuple(spec)!r}: give increasing target layer indices "
                     f"that end with the last layer ({n - 1} or -1), e.g. (2, {n // 2}, {n - 1}); "
                     "(-1,) or 'last' reads the last layer only.")
  return None if len(layers) == 1 else layers


def multi_layer(draft_config) -> bool:
  """Whether a `config.draft` reads several target layers (EAGLE-3 style feature_layers)."""
  spec = draft_config.get("feature_layers", "last")
  return not (spec is None or isinstance(spec, str)) and len(tuple(spec)) > 1


def trainable_keys(draft_config) -> tuple:
  """The top-level param keys the trainer optimises for a `config.draft`."""
  keys = FEATURE_TRAINABLE_KEYS if is_feature(draft_config) else TRAINABLE_KEYS
  if is_feature(draft_config) and multi_layer(draft_config):
    keys = keys + ("fc_layers",)
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
                        init_std: float = 0.02, feature_layers: Optional[Sequence[int]] = None):
  """An EAGLE-style feature draft (`specjax.models.feature_draft`) for the target.

  Fresh N(0, init_std) blocks; "fc" starts as [N(0, init_std); identity] so the
  initial prediction of the next feature is the current one plus the blocks' output.
  feature_layers (several target layers, the last one last): also "fc_layers" [L*D, D],
  starting as [N(0, init_std) for the earlier layers; identity for the last], so at
  initialisation the draft reads (nearly) the last layer, like a one-layer draft.
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
  if feature_layers is not None and len(feature_layers) > 1:
    n = len(feature_layers)
    early = init_std * jax.random.normal(jax.random.fold_in(key, 3), ((n - 1) * d, d))
    params["fc_layers"] = {"kernel": jnp.concatenate([early, jnp.eye(d)], 0).astype(dtype)}
    params["feature_layers"] = jnp.asarray(feature_layers, jnp.int32)
  return cfg, _share_target(params, cfg, target_params, head_vocab)


def init_draft(config, target, head_vocab=None):
  """The configured draft at initialisation (before any training) -> (cfg, params)."""
  key = jax.random.fold_in(jax.random.PRNGKey(config.seed), 2)
  if is_feature(config.draft):
    return build_feature_draft(
        target.cfg, target.params, n_layers=config.draft.n_layers, key=key, head_vocab=head_vocab,
        init_std=config.draft.get("init_std", 0.02),
        feature_layers=feature_layers(config.draft, target.cfg.n_layers))
  return build_draft(target.cfg, target.params, n_layers=config.draft.n_layers,
                     init=config.draft.init, key=key, head_vocab=head_vocab,
                     init_std=config.draft.get("init_std", 0.02))


def init_asset(config) -> str:
  """The directory of `config.draft.init_from`: an asset directory, or the name of a
  draft shipped in specjax/assets (e.g. "smollm2-135m-draft-templated"); "" for none."""
  spec = config.draft.get("init_from", "")
  if not spec or os.path.isdir(spec):
    return spec
  from specjax.loading.registry import asset_path
  if os.path.isdir(asset_path(spec)):
    return asset_path(spec)
  raise ValueError(f"config.draft.init_from={spec!r} is neither a draft asset directory nor a "
                   "draft shipped in specjax/assets; give one of those or unset it.")


def warm_start(config, target, params: dict) -> dict:
  """params with their trainable part replaced by the asset of `config.draft.init_from`
  (a draft shipped by `specjax.loading.asset.save_asset`), so a run continues from a
  trained draft instead of a fresh block. The asset must be the configured draft: same
  kind, feature layers and head vocabulary (`head_vocab_for` reads the latter), and at most
  as many layers. A deeper config grows the draft: the asset's blocks come first, and each
  extra block starts as the identity (its attention and MLP output kernels zero, so the
  residual stream passes through), so training starts from the asset's own predictions.
  Likewise a last-layer asset grows to several feature layers (EAGLE-3): its fc_layers
  start as zeros for the earlier layers and the identity for the last."""
  from specjax.loading.asset import load_asset
  from specjax.loading.hf import read_draft_meta
  path = init_asset(config)
  shipped = load_asset(path, target)  # the one read of the asset's tensors
  meta, cfg = read_draft_meta(path), shipped.cfg
  kind = "feature" if is_feature(config.draft) else "lm"
  if meta.get("kind", "lm") != kind or cfg.n_layers > config.draft.n_layers:
    raise ValueError(f"config.draft.init_from={path!r} is a {meta.get('kind', 'lm')} draft of "
                     f"{cfg.n_layers} layer(s), but the config trains a {kind} draft of "
                     f"{config.draft.n_layers}; point it at a {kind} asset of at most that many "
                     "layers or unset it.")
  want = feature_layers(config.draft, target.cfg.n_layers)
  have = tuple(meta["feature_layers"]) if "feature_layers" in meta else None
  widen = have is None and want is not None  # a last-layer draft grown to EAGLE-3 features
  if want != have and not widen:
    raise ValueError(f"config.draft.init_from={path!r} reads target layers {have or 'last'}, the "
                     f"config {want or 'last'}; set draft.feature_layers to match or unset init_from.")
  out = dict(params)
  if widen:  # fc_layers [L*D, D] = [0; ...; 0; I]: it reads the last layer alone, as the asset
    kernel = params["fc_layers"]["kernel"]
    d = kernel.shape[1]
    out["fc_layers"] = {"kernel": jnp.zeros_like(kernel).at[-d:].set(jnp.eye(d, dtype=kernel.dtype))}
  for k in trainable_keys(config.draft):
    if k == "layers":
      n = cfg.n_layers
      grown = [identity_block(layer) for layer in params["layers"][n:]]
      out[k] = jax.tree.map(lambda a, b: jnp.asarray(b, a.dtype), params[k][:n],
                            shipped.params[k]) + grown
    elif k in shipped.params:
      out[k] = jax.tree.map(lambda a, b: jnp.asarray(b, a.dtype), params[k], shipped.params[k])
  return out


def identity_block(layer: dict) -> dict:
  """A pre-norm residual block with its output kernels (attention `o`, MLP `down`) zeroed:
  it adds nothing to the residual stream until training moves them."""
  out = "proj" if "proj" in layer["mlp"] else "down"  # GPT-2 | Llama (specjax/models/params.py)
  zero = lambda p: jax.tree.map(jnp.zeros_like, p)  # kernel and bias, where there is one
  return {**layer, "attn": {**layer["attn"], "o": zero(layer["attn"]["o"])},
          "mlp": {**layer["mlp"], out: zero(layer["mlp"][out])}}


def head_vocab_for(config, counts: np.ndarray, always: Sequence[int]) -> Optional[np.ndarray]:
  """The draft's reduced head ids: those of the `draft.init_from` asset when warm-starting
  (its head was trained on them), else the `head_vocab_size` most frequent; None for a
  full head."""
  size = config.draft.head_vocab_size
  path = init_asset(config)
  if path:
    from specjax.loading.hf import read_draft_meta
    meta = read_draft_meta(path)  # the json alone; warm_start reads the tensors
    if meta is None:
      raise ValueError(f"config.draft.init_from={path!r} holds no specjax_draft.json: not a "
                       "specjax draft asset; export one with scripts/export_hf.py --asset.")
    ids = meta.get("head_vocab")
    if (ids is None) != (size <= 0) or (ids is not None and len(ids) != size):
      raise ValueError(f"config.draft.init_from={path!r} has a head of "
                       f"{len(ids) if ids is not None else 'the full'} ids, the config "
                       f"draft.head_vocab_size={size}; make them agree.")
    return None if ids is None else np.asarray(ids, np.int32)
  if size <= 0:
    return None
  return frequent_vocab(counts, size, always=always)


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
