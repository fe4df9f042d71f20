"""vllm-project/speculators' format for an EAGLE-3 draft (what vLLM reads): load and write.

config.json (speculators' `Eagle3SpeculatorConfig`):
    speculators_model_type "eagle3", transformer_layer_config (a llama/qwen3 config dict,
    written as its diff from transformers' defaults), draft_vocab_size,
    eagle_aux_hidden_state_layer_ids (None: (2, L/2, L-3) of the verifier), target_hidden_size,
    norm_before_residual, norm_before_fc, fc_norm, norm_output,
    speculators_config {algorithm, proposal_methods, default_proposal_method,
                        verifier {name_or_path, architectures}}
model.safetensors: the names of `eagle3_tensors` (layers.{i}.*), d2t and t2d.

speculators type "eagle" (EAGLE-1 / HASS) goes to `draft_formats.eagle1`.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import jax.numpy as jnp

from specjax.errors import LoadError
from specjax.loading.draft_formats import PublishedDraft, read_config
from specjax.loading.draft_formats import eagle3_tensors as et
from specjax.models.eagle3 import Eagle3Config

SPECULATORS_VERSION = "0.9.0"  # the version whose config this writes (and tests read back)


def config_of(hf_cfg: dict, target, name: str) -> tuple:
  """(Eagle3Config, verifier name or None) of a speculators eagle3 config.json, checked
  against the target before any weights are read."""
  stype = hf_cfg.get("speculators_model_type")
  if stype not in (None, "eagle3"):
    raise LoadError(f"{name}: speculators_model_type {stype!r}; this loader reads 'eagle3'.")
  layer_hf = hf_cfg.get("transformer_layer_config")
  if not isinstance(layer_hf, dict):
    raise LoadError(f"{name}: config.json has no transformer_layer_config (a speculators "
                    "eagle3 draft names its decoder layer's config there).")
  layer = et.layer_config(layer_hf, name)
  flags = {k: et.read_bool(hf_cfg, k, name) for k in
           ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")}
  if flags["norm_before_fc"] and flags["fc_norm"]:
    raise LoadError(f"{name}: norm_before_fc and fc_norm are both set; speculators allows one.")
  vd = hf_cfg.get("draft_vocab_size", 32000)
  if not isinstance(vd, int) or isinstance(vd, bool):
    raise LoadError(f"{name}: draft_vocab_size must be an integer, got {vd!r}.")
  cfg = Eagle3Config(
      layer=layer,
      aux_layers=et.read_aux(hf_cfg.get("eagle_aux_hidden_state_layer_ids"), name,
                             target.cfg.n_layers),
      target_d_model=et.model_width(hf_cfg, layer), draft_vocab_size=vd, **flags)
  et.check_target(cfg, target, name)
  verifier = ((hf_cfg.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
  return cfg, verifier


def load(path: str, target, name: str, fmt: str = "speculators:eagle3",
         dtype=jnp.float32) -> PublishedDraft:
  """A speculators eagle3 directory -> PublishedDraft(kind="eagle3") for target."""
  cfg, verifier = config_of(read_config(path) or {}, target, name)
  params = et.params_from_tensors(et.read_tensors(path, name), cfg, target, name, dtype)
  return PublishedDraft(name=name, kind="eagle3", fmt=fmt, cfg=cfg, params=params,
                        verifier=verifier)


def config_dict(cfg: Eagle3Config, verifier: Optional[str], verifier_archs=("LlamaForCausalLM",),
                speculative_tokens: int = 3) -> dict:
  """The config.json speculators' `Eagle3SpeculatorConfig` validates and vLLM reads."""
  return {
      "architectures": ["Eagle3DraftModel"],
      "speculators_model_type": "eagle3",
      "speculators_version": SPECULATORS_VERSION,
      "transformer_layer_config": et.layer_hf_config(cfg),
      "draft_vocab_size": cfg.draft_vocab_size,
      "eagle_aux_hidden_state_layer_ids": list(cfg.aux_layers),
      "target_hidden_size": None if cfg.target_d_model == cfg.d_model else cfg.target_d_model,
      "norm_before_residual": cfg.norm_before_residual, "norm_before_fc": cfg.norm_before_fc,
      "fc_norm": cfg.fc_norm, "norm_output": cfg.norm_output, "embed_requires_grad": False,
      "tie_word_embeddings": False, "dtype": "float32",
      "speculators_config": et.speculators_block("eagle3", verifier, verifier_archs,
                                                  speculative_tokens),
  }


def save(draft: PublishedDraft, out_dir: str, verifier: Optional[str] = None,
         verifier_archs=("LlamaForCausalLM",), speculative_tokens: int = 3) -> str:
  """Writes an EAGLE-3 draft in speculators' format (config.json + model.safetensors)."""
  from safetensors.numpy import save_file  # local: keeps `import specjax` light
  os.makedirs(out_dir, exist_ok=True)
  cfg = draft.cfg
  with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
    json.dump(config_dict(cfg, verifier or draft.verifier, verifier_archs, speculative_tokens), f,
              indent=2)
  save_file(et.tensors_from_params(draft.params, cfg), os.path.join(out_dir, "model.safetensors"),
            metadata={"format": "pt"})
  return out_dir
