"""Hugging Face directories out: a specjax model as config.json + safetensors.

The inverse of `hf.py`: `export_hf(cfg, params, out_dir)` writes a complete
LlamaForCausalLM (or GPT2LMHeadModel) directory that transformers loads with
`from_pretrained` (e.g. as `assistant_model`) and `specjax.load_model` loads too. The
embedding table is written in full. A reduced `head_vocab` cannot be expressed in a
transformers config: it is stored in `specjax_draft.json` next to the weights and the
exported head is the full one (exact either way: speculative verification accepts any
draft distribution). Used by the trainer's export and by `asset.materialize_hf`.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from specjax.loading.hf import DRAFT_META_FILE as META_FILE
from specjax.models import ModelConfig

NATIVE = "model.safetensors"


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


def draft_meta(params: dict, **extra) -> dict:
  """specjax_draft.json's fields: `extra` plus a reduced head's `head_vocab` ids."""
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
  save_file(hf_tensors(cfg, params), os.path.join(out_dir, NATIVE), metadata={"format": "pt"})
  os.chmod(os.path.join(out_dir, NATIVE), 0o644)
  with open(os.path.join(out_dir, META_FILE), "w", encoding="utf-8") as f:
    json.dump(draft_meta(params, **meta), f)
  if tokenizer is not None:
    tokenizer.save_pretrained(out_dir)
  return out_dir
