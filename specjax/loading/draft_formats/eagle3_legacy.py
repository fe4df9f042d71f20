"""The EAGLE authors' / SpecForge layout of an EAGLE-3 draft: load and write.

config.json: a Llama config of the draft layer with architectures
`LlamaForCausalLMEagle3` and `draft_vocab_size` (vocab_size is the target's); aux layer
ids are not part of it in the EAGLE authors' checkpoints, which read (2, L/2, L-3) of
the target: SpecForge may add `eagle_config.eagle_aux_hidden_state_layer_ids`, read here
(also at the top level), as are `target_hidden_size` and the norm flags where present.
Weights: fc.weight, midlayer.*, norm.weight, lm_head.weight, d2t, t2d (no embeddings:
the target's are shared), in safetensors or torch `pytorch_model.bin`.
speculators' converter (`speculators convert --algorithm eagle3`) reads this layout.
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

ARCHITECTURE = "LlamaForCausalLMEagle3"
_FLAGS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")


def config_of(hf_cfg: dict, target, name: str) -> Eagle3Config:
  """The Eagle3Config of a legacy config.json, checked against the target."""
  layer = et.layer_config({k: v for k, v in hf_cfg.items() if k != "architectures"}, name)
  eagle = hf_cfg.get("eagle_config") if isinstance(hf_cfg.get("eagle_config"), dict) else {}
  ids = eagle.get("eagle_aux_hidden_state_layer_ids",
                  hf_cfg.get("eagle_aux_hidden_state_layer_ids"))
  vd = hf_cfg.get("draft_vocab_size", layer.vocab_size)
  if not isinstance(vd, int) or isinstance(vd, bool):
    raise LoadError(f"{name}: draft_vocab_size must be an integer, got {vd!r}.")
  flags = {k: et.read_bool(hf_cfg, k, name) for k in _FLAGS}
  if flags["norm_before_fc"] and flags["fc_norm"]:
    raise LoadError(f"{name}: norm_before_fc and fc_norm are both set; an EAGLE-3 draft has one.")
  cfg = Eagle3Config(layer=layer, aux_layers=et.read_aux(ids, name, target.cfg.n_layers),
                     target_d_model=et.model_width(hf_cfg, layer), draft_vocab_size=vd, **flags)
  et.check_target(cfg, target, name)
  return cfg


def load(path: str, target, name: str, fmt: str = "eagle3", dtype=jnp.float32) -> PublishedDraft:
  """A legacy EAGLE-3 directory -> PublishedDraft(kind="eagle3") for target."""
  cfg = config_of(read_config(path) or {}, target, name)
  et.tensor_files(path, name)  # a clear line before anything is read if there are none
  params = et.params_from_tensors(et.read_tensors(path, name), cfg, target, name, dtype)
  return PublishedDraft(name=name, kind="eagle3", fmt=fmt, cfg=cfg, params=params)


def config_dict(cfg: Eagle3Config) -> dict:
  """The legacy config.json: the draft layer's Llama config and the EAGLE-3 fields."""
  out = et.layer_hf_config(cfg)
  out.update(architectures=[ARCHITECTURE], draft_vocab_size=cfg.draft_vocab_size,
             eagle_config={"eagle_aux_hidden_state_layer_ids": list(cfg.aux_layers)},
             torch_dtype="float32")
  if cfg.target_d_model != cfg.d_model:
    out["target_hidden_size"] = cfg.target_d_model
  out.update({k: True for k in _FLAGS if getattr(cfg, k)})
  return out


def save(draft: PublishedDraft, out_dir: str, verifier: Optional[str] = None) -> str:
  """Writes an EAGLE-3 draft in the legacy layout (config.json + model.safetensors)."""
  del verifier  # the legacy layout does not name its target
  from safetensors.numpy import save_file  # local: keeps `import specjax` light
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
    json.dump(config_dict(draft.cfg), f, indent=2)
  save_file(et.tensors_from_params(draft.params, draft.cfg, legacy=True, with_embed=False),
            os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
  return out_dir
