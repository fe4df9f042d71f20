"""vllm-project/speculators' format for a P-EAGLE draft (`speculators_model_type` "peagle").

config.json: an EAGLE-3 speculators config (`speculators_format`) plus mask_token_id;
speculators_config.proposal_methods[0].speculative_tokens is the number of parallel
depths it was trained for. model.safetensors: EAGLE-3's tensors (`eagle3_tensors`) plus
mask_hidden [1, 1, A*Dt]. Checked against the target before any weight is read.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import jax.numpy as jnp
import numpy as np

from specjax.errors import LoadError
from specjax.loading.draft_formats import PublishedDraft, read_config
from specjax.loading.draft_formats import eagle3_tensors as et
from specjax.loading.draft_formats import speculators_format
from specjax.models import peagle as peagle_lib


def config_of(hf_cfg: dict, target, name: str) -> tuple:
  """(PEagleConfig, verifier or None), checked against the target (one LoadError line)."""
  e3, verifier = speculators_format.config_of(dict(hf_cfg, speculators_model_type="eagle3"),
                                              target, name)
  mask = hf_cfg.get("mask_token_id")
  if not isinstance(mask, int) or isinstance(mask, bool):
    raise LoadError(f"{name}: a P-EAGLE draft needs its integer mask_token_id (the token it was "
                    f"trained to read at parallel positions), got {mask!r}.")
  methods = (hf_cfg.get("speculators_config") or {}).get("proposal_methods") or [{}]
  depths = methods[0].get("speculative_tokens", 8)
  cfg = peagle_lib.PEagleConfig(eagle3=e3, mask_token_id=mask, n_depths=int(depths))
  try:
    peagle_lib.check_target(cfg, target.cfg, name)
  except ValueError as e:
    raise LoadError(str(e)) from None
  return cfg, verifier


def load(path: str, target, name: str, fmt: str = "speculators:peagle",
         dtype=jnp.float32) -> PublishedDraft:
  """A speculators peagle directory -> PublishedDraft(kind="peagle") for target."""
  cfg, verifier = config_of(read_config(path) or {}, target, name)
  tensors = et.read_tensors(path, name)
  if "mask_hidden" not in tensors:
    raise LoadError(f"{name}: tensor 'mask_hidden' missing from the P-EAGLE checkpoint.")
  mask_hidden = np.asarray(tensors.pop("mask_hidden"), np.float32).reshape(-1)
  e = cfg.eagle3
  if mask_hidden.shape[0] != len(e.aux_layers) * e.target_d_model:
    raise LoadError(f"{name}: mask_hidden has {mask_hidden.shape[0]} values; {len(e.aux_layers)} "
                    f"aux layers of width {e.target_d_model} need "
                    f"{len(e.aux_layers) * e.target_d_model}.")
  params = et.params_from_tensors(tensors, e, target, name, dtype)
  params["mask_hidden"] = jnp.asarray(mask_hidden, dtype)
  return PublishedDraft(name=name, kind="peagle", fmt=fmt, cfg=cfg, params=params,
                        verifier=verifier)


def save(draft: PublishedDraft, out_dir: str, verifier: Optional[str] = None,
         verifier_archs=("LlamaForCausalLM",)) -> str:
  """Writes a P-EAGLE draft in speculators' format (config.json + model.safetensors)."""
  from safetensors.numpy import save_file  # local: keeps `import specjax` light
  cfg = draft.cfg
  hf_cfg = speculators_format.config_dict(cfg.eagle3, verifier or draft.verifier, verifier_archs,
                                          speculative_tokens=cfg.n_depths)
  hf_cfg.update(architectures=["PEagleSpeculator"], speculators_model_type="peagle",
                mask_token_id=cfg.mask_token_id, embed_requires_grad=True)
  hf_cfg["speculators_config"]["algorithm"] = "peagle"
  tensors = et.tensors_from_params(draft.params, cfg.eagle3)
  tensors["mask_hidden"] = np.asarray(draft.params["mask_hidden"], np.float32).reshape(1, 1, -1)
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
    json.dump(hf_cfg, f, indent=2)
  save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
  return out_dir
