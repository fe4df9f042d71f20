"""The shipped draft format: what lives in specjax/assets/ and how it becomes a Model.

An asset directory holds only the draft's own tensors (layers, final norm, a feature
draft's `fc`) in float16, its config.json, and specjax_draft.json naming the target
whose frozen embeddings it shares (plus `head_vocab`, the ids of a reduced output head).

  save_asset(cfg, params, dir, target=...)   the writer (the trainer's export calls it)
  read_asset(dir) -> (meta, cfg, tensors)    the reader
  is_draft_asset(dir), target_of(dir)        what `load_model` asks before loading one
  load_asset(dir, target) -> Model           the full draft, embeddings from `target`
  materialize_hf(dir, target) -> directory   a full Hugging Face directory (full head),
                                             built once under `specjax.paths.cache_root()`
  built_hf(dir) -> directory or None         that directory, if already built

The target is always passed in (`load_model` loads it by name when asked to), so this
module never calls back into the loader.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.errors import LoadError
from specjax.loading import hf
from specjax.loading.hf import DRAFT_META_FILE as META_FILE, read_draft_meta
from specjax.loading.hf_export import NATIVE, draft_meta, export_hf, hf_config, hf_tensors
from specjax.loading.model import Model
from specjax.models import ModelConfig
from specjax.paths import CACHE_ENV, cache_root  # noqa: F401  (CACHE_ENV: tests set it)

FC_TENSOR = "fc.weight"  # a feature draft's input projection (as EAGLE names it)
FC_LAYERS_TENSOR = "fc_layers.weight"  # multi-layer features [L*D] -> D (EAGLE-3's fc)


def save_asset(cfg: ModelConfig, params: dict, out_dir: str, *, target: str, **meta) -> str:
  """The shipped form: the draft's own tensors in float16, embeddings shared with `target`."""
  from safetensors.numpy import save_file
  os.makedirs(out_dir, exist_ok=True)
  tensors = {k: v.astype(np.float16) for k, v in hf_tensors(cfg, params, False).items()}
  if "fc" in params:  # a feature (EAGLE-style) draft: its input projection, [out, in]
    tensors[FC_TENSOR] = np.ascontiguousarray(np.asarray(params["fc"]["kernel"], np.float32).T
                                              ).astype(np.float16)
    meta = dict(meta, kind="feature")
  if "fc_layers" in params:  # EAGLE-3 style: the target layers it reads, and their projection
    tensors[FC_LAYERS_TENSOR] = np.ascontiguousarray(
        np.asarray(params["fc_layers"]["kernel"], np.float32).T).astype(np.float16)
    meta = dict(meta, feature_layers=[int(i) for i in np.asarray(params["feature_layers"])])
  save_file(tensors, os.path.join(out_dir, NATIVE), metadata={"format": "pt"})
  os.chmod(os.path.join(out_dir, NATIVE), 0o644)
  with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
    json.dump(hf_config(cfg), f, indent=2)
  with open(os.path.join(out_dir, META_FILE), "w", encoding="utf-8") as f:
    json.dump(draft_meta(params, shares_embeddings_with=target, **meta), f, indent=1)
  return out_dir


def read_asset(asset_dir: str) -> tuple[dict, ModelConfig, dict]:
  """(specjax_draft.json, ModelConfig, {tensor name: numpy array}) of an asset directory."""
  meta = read_draft_meta(asset_dir)
  if meta is None:
    raise LoadError(f"{asset_dir}: no {META_FILE}; not a specjax draft asset.")
  hf_cfg = hf.read_json(os.path.join(asset_dir, "config.json"), asset_dir)
  cfg = hf.config_from_hf(hf_cfg, asset_dir)
  tensors = hf.read_safetensors([os.path.join(asset_dir, NATIVE)], asset_dir)
  return meta, cfg, tensors


def is_draft_asset(path: str) -> bool:
  """A draft asset directory: its specjax_draft.json names the target whose embeddings it
  shares. (A full Hugging Face export has that file too, without the name, and loads as a
  plain directory.) Unreadable metadata counts, so that reading it raises the clear error."""
  if not os.path.isdir(path):
    return False
  try:
    meta = read_draft_meta(path)
  except LoadError:
    return True
  return meta is not None and "shares_embeddings_with" in meta


def target_of(asset_dir: str) -> str:
  """The source name of the target whose embeddings the asset shares."""
  meta = read_draft_meta(asset_dir)
  if meta is None or "shares_embeddings_with" not in meta:
    raise LoadError(f"{asset_dir}: no {META_FILE} naming the target it shares embeddings "
                    "with; not a specjax draft asset.")
  return meta["shares_embeddings_with"]


def with_head_kernel(cfg: ModelConfig, params: dict) -> dict:
  """Adds "head_kernel" [D, V'], the output-head columns of `head_vocab` gathered once,
  so a reduced-head draft does not gather them at every decode step (inference only:
  training keeps the shared embeddings as the single source)."""
  kernel = params["embed"].T if cfg.tie_embeddings else params["lm_head"]["kernel"]
  return dict(params, head_kernel=kernel[:, params["head_vocab"]])


def load_asset(asset_dir: str, target: Model, name: Optional[str] = None) -> Model:
  """The shipped draft as a `specjax.loading.Model` (reduced head included), its frozen
  embeddings taken from `target` (the Model named by `target_of(asset_dir)`)."""
  meta, cfg, tensors = read_asset(asset_dir)
  embed = np.asarray(target.params["embed"], np.float32)
  if embed.shape != (cfg.vocab_size, cfg.d_model):
    raise LoadError(f"{asset_dir}: this draft shares the embeddings of "
                    f"{meta['shares_embeddings_with']!r} ({cfg.vocab_size} x {cfg.d_model}), but the "
                    f"given target's are {embed.shape[0]} x {embed.shape[1]}; use it with that target.")
  key = "transformer.wte.weight" if cfg.is_gpt2 else "model.embed_tokens.weight"
  tensors = {k: v.astype(np.float32) for k, v in tensors.items()}
  fc = tensors.pop(FC_TENSOR, None)
  fc_layers = tensors.pop(FC_LAYERS_TENSOR, None)
  tensors[key] = embed
  if cfg.is_gpt2:
    tensors["transformer.wpe.weight"] = np.asarray(target.params["pos_embed"], np.float32)
  params = jax.tree.map(jnp.asarray, hf.params_from_hf(tensors, cfg, asset_dir))
  if meta.get("kind") == "feature":
    if fc is None:
      raise LoadError(f"{asset_dir}: a feature draft asset without its {FC_TENSOR} tensor; "
                      "re-export it with scripts/export_hf.py.")
    params["fc"] = {"kernel": jnp.asarray(fc.T)}
    if "feature_layers" in meta:
      if fc_layers is None:
        raise LoadError(f"{asset_dir}: a multi-layer feature draft asset without its "
                        f"{FC_LAYERS_TENSOR} tensor; re-export it with scripts/export_hf.py.")
      params["fc_layers"] = {"kernel": jnp.asarray(fc_layers.T)}
      params["feature_layers"] = jnp.asarray(meta["feature_layers"], jnp.int32)
  if "head_vocab" in meta:
    params = with_head_kernel(cfg, dict(params, head_vocab=jnp.asarray(meta["head_vocab"],
                                                                      jnp.int32)))
  return Model(name=name or os.path.basename(os.path.normpath(asset_dir)), cfg=cfg,
               params=params, tokenizer=target.tokenizer, eos_ids=target.eos_ids,
               bos_id=target.bos_id)


def _digest(asset_dir: str) -> str:
  h = hashlib.sha256()
  for fname in sorted(os.listdir(asset_dir)):
    with open(os.path.join(asset_dir, fname), "rb") as f:
      h.update(fname.encode() + f.read())
  return h.hexdigest()[:16]


def _hf_dir(asset_dir: str, cache_dir: Optional[str]) -> str:
  name = os.path.basename(os.path.normpath(asset_dir)) + "-" + _digest(asset_dir)
  return os.path.join(cache_dir or cache_root(), "drafts", name)


def built_hf(asset_dir: str, cache_dir: Optional[str] = None) -> Optional[str]:
  """The Hugging Face directory `materialize_hf` built for this asset, None if not yet."""
  out = _hf_dir(asset_dir, cache_dir)
  return out if os.path.isfile(os.path.join(out, "DONE")) else None


def materialize_hf(asset_dir: str, target: Model, cache_dir: Optional[str] = None) -> str:
  """A full Hugging Face directory for the shipped draft (embeddings from `target`),
  built once into `cache_dir` (default `cache_root()`) and reused while the asset is
  unchanged. `load_model` of it gives the draft with the full output head."""
  out = built_hf(asset_dir, cache_dir)
  if out is not None:
    return out
  out = _hf_dir(asset_dir, cache_dir)
  if (read_draft_meta(asset_dir) or {}).get("kind") == "feature":
    raise LoadError(f"{asset_dir} is a feature (EAGLE-style) draft: it reads the target's hidden "
                    "states, so it has no transformers form to use as assistant_model.")
  draft = load_asset(asset_dir, target)
  meta = draft_meta(draft.params)
  tmp = out + f".tmp{os.getpid()}"
  export_hf(draft.cfg, draft.params, tmp, tokenizer=draft.tokenizer, eos_ids=draft.eos_ids,
            bos_id=draft.bos_id, **{k: v for k, v in meta.items() if k != "head_vocab"})
  open(os.path.join(tmp, "DONE"), "w").close()
  try:
    os.replace(tmp, out)
  except OSError:  # another process finished first
    pass
  return out
