"""Drafts to disk: Hugging Face format (config.json + safetensors) and the shipped asset.

Two layouts:

* `export_hf(cfg, params, out_dir)`: a complete LlamaForCausalLM (or GPT2LMHeadModel)
  directory that transformers loads with `from_pretrained` (e.g. as `assistant_model`)
  and `specjax.load_model` loads too. The embedding table is written in full. A reduced
  `head_vocab` cannot be expressed in a transformers config: it is stored as
  `specjax_draft.json` next to the weights and the exported head is the full one
  (exact either way: speculative verification accepts any draft distribution).

* `save_asset(cfg, params, out_dir, target=...)`: what ships inside the package. Only
  the draft's own tensors (layers, final norm, head_vocab) in float16, plus config.json
  and specjax_draft.json naming the target whose frozen embeddings it shares.
  `load_asset(dir)` rebuilds the full draft from the asset and that target, and
  `materialize_hf(dir)` turns it into an `export_hf` directory in a cache (what the
  registry resolver hands to `load_model`).
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Optional

import numpy as np

from specjax.models import ModelConfig

from specjax.loading.hf import DRAFT_META_FILE as META_FILE, read_draft_meta
FC_TENSOR = "fc.weight"  # a feature draft's input projection (as EAGLE names it)
FC_LAYERS_TENSOR = "fc_layers.weight"  # multi-layer features [L*D] -> D (EAGLE-3's fc)
_NATIVE = "model.safetensors"


def hf_config(cfg: ModelConfig, eos_ids=(), bos_id: Optional[int] = None) -> dict:
  """The transformers config.json dict of a specjax ModelConfig (llama or gpt2 family)."""
  common = {"vocab_size": cfg.vocab_size, "tie_word_embeddings": cfg.tie_embeddings,
            "torch_dtype": "float32", "dtype": "float32"}
  if list(eos_ids):
    common["eos_token_id"] = int(list(eos_ids)[0])
  if bos_id is not None:
    common["bos_token_id"] = int(bos_id)
  if cfg.is_gpt2:
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": cfg.d_model,
            "n_layer": cfg.n_layers, "n_head": cfg.n_heads, "n_inner": cfg.d_ff,
            "n_positions": cfg.max_positions, "layer_norm_epsilon": cfg.norm_eps,
            "activation_function": "gelu_new", **common}
  if cfg.qkv_bias:
    raise ValueError("Drafts with q/k/v bias (Qwen2) are not exported; use a Llama-family draft.")
  return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
          "hidden_size": cfg.d_model, "intermediate_size": cfg.d_ff,
          "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
          "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
          "max_position_embeddings": cfg.max_positions, "rms_norm_eps": cfg.norm_eps,
          "rope_theta": cfg.rope_theta,
          "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
          "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, **common}


def hf_tensors(cfg: ModelConfig, params: dict, include_embeddings: bool = True) -> dict:
  """specjax params -> {HF tensor name: numpy array} (torch Linear weights are [out, in])."""
  a = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  out = {}
  if cfg.is_gpt2:
    if include_embeddings:
      out["transformer.wte.weight"] = a(params["embed"])
      out["transformer.wpe.weight"] = a(params["pos_embed"])
    for i, l in enumerate(params["layers"]):
      pre = f"transformer.h.{i}."
      at = l["attn"]
      out[pre + "attn.c_attn.weight"] = a(np.concatenate([at[n]["kernel"] for n in "qkv"], 1))
      out[pre + "attn.c_attn.bias"] = a(np.concatenate([at[n]["bias"] for n in "qkv"]))
      out[pre + "attn.c_proj.weight"] = a(at["o"]["kernel"])
      out[pre + "attn.c_proj.bias"] = a(at["o"]["bias"])
      for hf_n, n in (("ln_1", "attn_norm"), ("ln_2", "mlp_norm")):
        out[pre + hf_n + ".weight"], out[pre + hf_n + ".bias"] = a(l[n]["scale"]), a(l[n]["bias"])
      for n in ("fc", "proj"):
        out[pre + f"mlp.c_{n}.weight"] = a(l["mlp"][n]["kernel"])
        out[pre + f"mlp.c_{n}.bias"] = a(l["mlp"][n]["bias"])
    out["transformer.ln_f.weight"] = a(params["final_norm"]["scale"])
    out["transformer.ln_f.bias"] = a(params["final_norm"]["bias"])
  else:
    if include_embeddings:
      out["model.embed_tokens.weight"] = a(params["embed"])
    for i, l in enumerate(params["layers"]):
      pre = f"model.layers.{i}."
      for n in "qkvo":
        out[pre + f"self_attn.{n}_proj.weight"] = a(np.asarray(l["attn"][n]["kernel"]).T)
      for n in ("gate", "up", "down"):
        out[pre + f"mlp.{n}_proj.weight"] = a(np.asarray(l["mlp"][n]["kernel"]).T)
      out[pre + "input_layernorm.weight"] = a(l["attn_norm"]["scale"])
      out[pre + "post_attention_layernorm.weight"] = a(l["mlp_norm"]["scale"])
    out["model.norm.weight"] = a(params["final_norm"]["scale"])
  if not cfg.tie_embeddings and include_embeddings:
    out["lm_head.weight"] = a(np.asarray(params["lm_head"]["kernel"]).T)
  return out


def _meta(params: dict, **extra) -> dict:
  meta = dict(extra)
  if "head_vocab" in params:
    meta["head_vocab"] = [int(i) for i in np.asarray(params["head_vocab"])]
  return meta


def export_hf(cfg: ModelConfig, params: dict, out_dir: str, tokenizer=None, eos_ids=(),
              bos_id: Optional[int] = None, **meta) -> str:
  """Writes a transformers-loadable directory (see module docstring); returns out_dir."""
  if "fc" in params:
    raise ValueError("A feature (EAGLE-style) draft reads the target's hidden states and has no "
                     "transformers form; save it with save_asset (scripts/export_hf.py --asset).")
  from safetensors.numpy import save_file
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
    json.dump(hf_config(cfg, eos_ids, bos_id), f, indent=2)
  save_file(hf_tensors(cfg, params), os.path.join(out_dir, _NATIVE), metadata={"format": "pt"})
  os.chmod(os.path.join(out_dir, _NATIVE), 0o644)
  with open(os.path.join(out_dir, META_FILE), "w", encoding="utf-8") as f:
    json.dump(_meta(params, **meta), f)
  if tokenizer is not None:
    tokenizer.save_pretrained(out_dir)
  return out_dir


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
  save_file(tensors, os.path.join(out_dir, _NATIVE), metadata={"format": "pt"})
  os.chmod(os.path.join(out_dir, _NATIVE), 0o644)
  with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
    json.dump(hf_config(cfg), f, indent=2)
  with open(os.path.join(out_dir, META_FILE), "w", encoding="utf-8") as f:
    json.dump(_meta(params, shares_embeddings_with=target, **meta), f, indent=1)
  return out_dir


def _read_asset(asset_dir: str):
  from specjax.errors import LoadError
  from specjax.loading import hf
  meta = read_draft_meta(asset_dir)
  if meta is None:
    raise LoadError(f"{asset_dir}: no {META_FILE}; not a specjax draft asset.")
  hf_cfg = hf.read_json(os.path.join(asset_dir, "config.json"), asset_dir)
  cfg = hf.config_from_hf(hf_cfg, asset_dir)
  tensors = hf.read_safetensors([os.path.join(asset_dir, _NATIVE)], asset_dir)
  return meta, cfg, tensors


def with_head_kernel(cfg: ModelConfig, params: dict) -> dict:
  """Adds "head_kernel" [D, V'], the output-head columns of `head_vocab` gathered once,
  so a reduced-head draft does not gather them at every decode step (inference only:
  training keeps the shared embeddings as the single source)."""
  kernel = params["embed"].T if cfg.tie_embeddings else params["lm_head"]["kernel"]
  return dict(params, head_kernel=kernel[:, params["head_vocab"]])


def load_asset(asset_dir: str, target=None, name: Optional[str] = None):
  """The shipped draft as a `specjax.loading.Model` (reduced head included), its frozen
  embeddings taken from `target` (a Model, or loaded from the asset's target name)."""
  import jax
  import jax.numpy as jnp
  from specjax.errors import LoadError
  from specjax.loading import Model, hf, load_model
  meta, cfg, tensors = _read_asset(asset_dir)
  if target is None:
    target = load_model(meta["shares_embeddings_with"])
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


def materialize_hf(asset_dir: str, cache_dir: Optional[str] = None) -> str:
  """A full Hugging Face directory for the shipped draft (embeddings from its target),
  built once into $SPECJAX_CACHE (default ~/.cache/specjax) and reused while the asset
  is unchanged. `load_model` of it gives the draft with the full output head."""
  cache_dir = cache_dir or os.environ.get("SPECJAX_CACHE",
                                          os.path.join(os.path.expanduser("~"), ".cache", "specjax"))
  digest = _digest(asset_dir)
  out = os.path.join(cache_dir, "drafts", os.path.basename(os.path.normpath(asset_dir)) + "-" + digest)
  if os.path.isfile(os.path.join(out, "DONE")):
    return out
  from specjax.errors import LoadError
  if (read_draft_meta(asset_dir) or {}).get("kind") == "feature":
    raise LoadError(f"{asset_dir} is a feature (EAGLE-style) draft: it reads the target's hidden "
                    "states, so it has no transformers form to use as assistant_model.")
  draft = load_asset(asset_dir)
  meta = _meta(draft.params)
  tmp = out + f".tmp{os.getpid()}"
  export_hf(draft.cfg, draft.params, tmp, tokenizer=draft.tokenizer, eos_ids=draft.eos_ids,
            bos_id=draft.bos_id, **{k: v for k, v in meta.items() if k != "head_vocab"})
  open(os.path.join(tmp, "DONE"), "w").close()
  try:
    os.replace(tmp, out)
  except OSError:  # another process finished first
    pass
  return out
