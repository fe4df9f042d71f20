"""vllm-project/speculators' format for a DFlash draft (`speculators_model_type` "dflash").

config.json (speculators' `DFlashSpeculatorConfig`):
    transformer_layer_config (a qwen3/llama config dict: the draft layers; vocab_size is
    the target's), draft_vocab_size, block_size, aux_hidden_state_layer_ids,
    mask_token_id, sample_from_anchor, sliding_window_non_causal, target_hidden_size,
    speculators_config {..., verifier {name_or_path}}
model.safetensors:
    fc.weight [D, L*D]  hidden_norm.weight  norm.weight  lm_head.weight [Vd, D] (only with
    a draft vocabulary: a full-vocabulary draft uses the target's head)  d2t [Vd]  t2d [V]
    layers.{i}.self_attn.{q,k,v,o}_proj.weight, {q,k}_norm.weight,
    layers.{i}.{input,post_attention}_layernorm.weight, layers.{i}.mlp.{gate,up,down}_proj.weight
The embeddings are the target's (speculators leaves them out of the checkpoint).
Everything that names the target (width, vocabulary, aux layer ids, mask token, block)
is checked before any weight is read.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import jax.numpy as jnp
import numpy as np

from specjax.errors import LoadError
from specjax.loading import hf
from specjax.loading.draft_formats import PublishedDraft, read_config
from specjax.loading.draft_formats import eagle3_tensors as et
from specjax.models import dflash as dflash_lib

SPECULATORS_VERSION = "0.9.0"


def _int(hf_cfg: dict, key: str, name: str, default=None) -> int:
  v = hf_cfg.get(key, default)
  if not isinstance(v, int) or isinstance(v, bool):
    raise LoadError(f"{name}: config field {key!r} must be an integer, got {v!r}.")
  return v


def config_of(hf_cfg: dict, target, name: str) -> tuple:
  """(DFlashConfig, verifier name or None) of a speculators dflash config.json, checked
  against the target (one LoadError line) before any weights are read."""
  layer_hf = hf_cfg.get("transformer_layer_config")
  if not isinstance(layer_hf, dict):
    raise LoadError(f"{name}: config.json has no transformer_layer_config (a speculators "
                    "dflash draft names its layers' config there).")
  layer_hf = {"model_type": "qwen3", **layer_hf}  # speculators' default layer class
  layers = et.layer_config(layer_hf, name)
  n = layers.n_layers
  layer_types = layer_hf.get("layer_types") or ["full_attention"] * n
  window = layer_hf.get("sliding_window") or 0
  if len(layer_types) != n:
    raise LoadError(f"{name}: layer_types names {len(layer_types)} layers but the draft has {n}.")
  windows = tuple(int(window) if t == "sliding_attention" else 0 for t in layer_types)
  if any(t == "sliding_attention" for t in layer_types) and not window:
    raise LoadError(f"{name}: sliding_attention layers without a sliding_window size.")
  ids = hf_cfg.get("aux_hidden_state_layer_ids")
  if not isinstance(ids, list) or not ids or not all(
      isinstance(i, int) and not isinstance(i, bool) for i in ids):
    raise LoadError(f"{name}: aux_hidden_state_layer_ids must be a non-empty list of target "
                    f"layer ids, got {ids!r}.")
  mask = hf_cfg.get("mask_token_id")
  if mask is None:
    raise LoadError(f"{name}: config.json has no mask_token_id; a DFlash draft fills its block "
                    "with the mask token it was trained with.")
  vd = _int(hf_cfg, "draft_vocab_size", name, 32000)
  cfg = dflash_lib.DFlashConfig(
      layers=layers, block_size=_int(hf_cfg, "block_size", name, 8), aux_layer_ids=tuple(ids),
      mask_token_id=_int(hf_cfg, "mask_token_id", name),
      sample_from_anchor=et.read_bool(hf_cfg, "sample_from_anchor", name),
      windows=windows if any(windows) else (),
      window_non_causal=et.read_bool(hf_cfg, "sliding_window_non_causal", name),
      draft_vocab_size=vd)
  target_width = hf_cfg.get("target_hidden_size")
  if target_width and target_width != layers.d_model:
    raise LoadError(f"{name}: target_hidden_size {target_width} differs from the draft's width "
                    f"{layers.d_model}; speculators' DFlash reads aux states of its own width.")
  try:
    dflash_lib.check_target(cfg, target.cfg, name)
  except ValueError as e:
    raise LoadError(str(e)) from None
  if not 0 < vd <= target.cfg.vocab_size:
    raise LoadError(f"{name}: draft_vocab_size {vd} is not in [1, {target.cfg.vocab_size}] (the "
                    "target's vocabulary).")
  verifier = ((hf_cfg.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
  return cfg, verifier


def params_from_tensors(tensors: dict, cfg: dflash_lib.DFlashConfig, target, name: str,
                        dtype=jnp.float32) -> dict:
  """The draft's params (`specjax.models.dflash`) from its tensors and the target's
  embeddings (and head, for a full-vocabulary draft)."""
  take = hf._Take(tensors, name)  # pylint: disable=protected-access
  lc, d = cfg.layers, cfg.layers.d_model
  f = lambda x: jnp.asarray(np.asarray(x, np.float32), dtype)

  def dense(key):
    p = {"kernel": f(np.asarray(take(key + ".weight")).T)}
    bias = take(key + ".bias", optional=True)
    return p if bias is None else dict(p, bias=f(bias))

  a = len(cfg.aux_layer_ids)
  params = {"embed": f(target.params["embed"][:lc.vocab_size]), "fc": dense("fc"),
            "hidden_norm": {"scale": f(take("hidden_norm.weight"))}}
  if tuple(params["fc"]["kernel"].shape) != (a * d, d):
    raise LoadError(f"{name}: fc.weight is {tuple(params['fc']['kernel'].shape[::-1])}, but {a} "
                    f"aux layers of width {d} need ({d}, {a * d}).")
  layers = []
  for i in range(lc.n_layers):
    pre = f"layers.{i}."
    attn = {k: dense(f"{pre}self_attn.{k}_proj") for k in "qkvo"}
    if lc.qk_norm:
      attn.update({f"{k}_norm": {"scale": f(take(f"{pre}self_attn.{k}_norm.weight"))} for k in "qk"})
    if tuple(attn["q"]["kernel"].shape) != (d, lc.n_heads * lc.head_dim):
      raise LoadError(f"{name}: {pre}self_attn.q_proj.weight is "
                      f"{tuple(attn['q']['kernel'].shape[::-1])}, expected "
                      f"({lc.n_heads * lc.head_dim}, {d}).")
    layers.append({"attn_norm": {"scale": f(take(pre + "input_layernorm.weight"))}, "attn": attn,
                   "mlp_norm": {"scale": f(take(pre + "post_attention_layernorm.weight"))},
                   "mlp": {k: dense(f"{pre}mlp.{k}_proj") for k in ("gate", "up", "down")}})
  params["layers"] = layers
  params["final_norm"] = {"scale": f(take("norm.weight"))}
  vd = cfg.draft_vocab_size
  if take("lm_head.weight", optional=True) is not None:
    params["lm_head"] = dense("lm_head")
  elif vd == lc.vocab_size:  # speculators drops the full-vocabulary head: the target's
    tp, tc = target.params, target.cfg
    kernel = tp["embed"].T if tc.tie_embeddings else tp["lm_head"]["kernel"]
    params["lm_head"] = {"kernel": f(np.asarray(kernel)[:, :lc.vocab_size])}
  else:
    raise LoadError(f"{name}: a draft vocabulary of {vd} ids without its lm_head.weight.")
  if params["lm_head"]["kernel"].shape != (d, vd):
    raise LoadError(f"{name}: lm_head.weight is {tuple(params['lm_head']['kernel'].shape[::-1])}, "
                    f"expected ({vd}, {d}) (draft_vocab_size {vd}).")
  d2t, t2d = take("d2t", optional=True), take("t2d", optional=True)
  if vd != lc.vocab_size:
    ids = et.checked_draft_ids(d2t, t2d, vd, lc.vocab_size, target, name)
    params["draft_ids"] = jnp.asarray(ids, jnp.int32)
  return params


def load(path: str, target, name: str, fmt: str = "speculators:dflash",
         dtype=jnp.float32) -> PublishedDraft:
  """A speculators dflash directory -> PublishedDraft(kind="dflash") for target."""
  cfg, verifier = config_of(read_config(path) or {}, target, name)
  params = params_from_tensors(et.read_tensors(path, name), cfg, target, name, dtype)
  return PublishedDraft(name=name, kind="dflash", fmt=fmt, cfg=cfg, params=params,
                        verifier=verifier)


def save(draft: PublishedDraft, out_dir: str, verifier: Optional[str] = None,
         verifier_archs=("LlamaForCausalLM",)) -> str:
  """Writes a DFlash draft in speculators' format (config.json + model.safetensors)."""
  from safetensors.numpy import save_file  # local: keeps `import specjax` light
  cfg, params = draft.cfg, draft.params
  lc = cfg.layers
  layer = et.model_hf_config(lc)
  layer["model_type"] = "qwen3" if lc.qk_norm else "llama"
  if cfg.windows:
    layer["layer_types"] = ["sliding_attention" if w else "full_attention" for w in cfg.windows]
    layer["sliding_window"] = max(cfg.windows)
  hf_cfg = {
      "architectures": ["DFlashSpeculator"], "speculators_model_type": "dflash",
      "speculators_version": SPECULATORS_VERSION, "transformer_layer_config": layer,
      "draft_vocab_size": cfg.draft_vocab_size or lc.vocab_size, "block_size": cfg.block_size,
      "aux_hidden_state_layer_ids": list(cfg.aux_layer_ids), "mask_token_id": cfg.mask_token_id,
      "sample_from_anchor": cfg.sample_from_anchor,
      "sliding_window_non_causal": cfg.window_non_causal, "target_hidden_size": None,
      "speculators_config": et.speculators_block("dflash", verifier or draft.verifier,
                                                  verifier_archs, cfg.n_drafts)}
  a = et.torch_array
  out = {"fc.weight": a(np.asarray(params["fc"]["kernel"]).T),
         "hidden_norm.weight": a(params["hidden_norm"]["scale"]),
         "norm.weight": a(params["final_norm"]["scale"])}
  for i, l in enumerate(params["layers"]):
    out.update(et.layer_tensors(l, f"layers.{i}."))
  if "draft_ids" in params:  # a full-vocabulary head is the target's: speculators omits it
    out["lm_head.weight"] = a(np.asarray(params["lm_head"]["kernel"]).T)
    ids = np.asarray(params["draft_ids"], np.int64)
    out["d2t"] = ids - np.arange(ids.shape[0], dtype=np.int64)
    t2d = np.zeros((lc.vocab_size,), bool)
    t2d[ids] = True
    out["t2d"] = t2d
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as fh:
    json.dump(hf_cfg, fh, indent=2)
  save_file(out, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
  return out_dir
