"""EAGLE-3 drafts on disk, both layouts: config fields, tensor names, checks against a target.

Tensor names (torch `nn.Linear` weights are [out, in]; specjax kernels [in, out]):

    fc.weight [D, A*Dt] (fc.bias)         layers.{i}.self_attn.{q,k,v,o}_proj.weight (.bias)
    layers.0.hidden_norm.weight           layers.{i}.self_attn.{q,k}_norm.weight (Qwen3)
    layers.{i}.input_layernorm.weight     layers.{i}.post_attention_layernorm.weight
    layers.{i}.mlp.{gate,up,down}_proj.weight
    norm.weight   lm_head.weight [Vd, D]  d2t [Vd]  t2d [V]  embed_tokens.weight [V, D] (optional)
    input_norm.weight [A*Dt] (norm_before_fc)   fc_norm.{j}.weight [Dt] (fc_norm)

speculators writes these names; the EAGLE authors' / SpecForge legacy layout names layer 0
`midlayer.*` (`LEGACY_PREFIX`). Shared by `speculators_format` and `eagle3_legacy`, which
differ in their config.json only.
"""
from __future__ import annotations

import os
from typing import Optional

import jax.numpy as jnp
import numpy as np

from specjax.errors import LoadError
from specjax.loading import hf
from specjax.loading.draft_formats import torch_file
from specjax.models import draft_vocab
from specjax.models.config import ModelConfig
from specjax.models.eagle3 import Eagle3Config

LEGACY_PREFIX = "midlayer."
LAYER_TYPES = ("llama", "qwen3")
# transformers' defaults for fields a config may leave out (speculators writes
# `to_diff_dict()`: only the fields that differ from these).
_DEFAULTS = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                  num_hidden_layers=32, num_attention_heads=32, rms_norm_eps=1e-6,
                  max_position_embeddings=2048, rope_theta=10000.0),
    "qwen3": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016,
                  num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                  head_dim=128, rms_norm_eps=1e-6, max_position_embeddings=32768,
                  rope_theta=10000.0),
}


def default_aux_layers(n_layers: int) -> tuple:
  """EAGLE-3's default aux layer ids for a target of n_layers: (2, L // 2, L - 3)."""
  return (2, n_layers // 2, n_layers - 3)


def layer_config(layer_hf: dict, name: str) -> ModelConfig:
  """The draft layers' ModelConfig from a transformers config dict (llama or qwen3)."""
  mtype = layer_hf.get("model_type", "llama")
  if mtype not in LAYER_TYPES:
    raise LoadError(f"{name}: an EAGLE-3 draft with {mtype!r} layers; specjax runs "
                    f"{', '.join(LAYER_TYPES)} draft layers.")
  full = {**_DEFAULTS[mtype], **{k: v for k, v in layer_hf.items() if v is not None}}
  full["architectures"] = ["Qwen3ForCausalLM" if mtype == "qwen3" else "LlamaForCausalLM"]
  full["tie_word_embeddings"] = False
  full.pop("sliding_window", None)
  return hf.config_from_hf(full, name)


def check_target(cfg: Eagle3Config, target, name: str) -> None:
  """One LoadError line where the draft was made for another target (before any weights)."""
  tc = target.cfg
  if cfg.vocab_size != tc.vocab_size:
    raise LoadError(f"{name}: an EAGLE-3 draft for a vocabulary of {cfg.vocab_size} tokens, but "
                    f"the target has {tc.vocab_size}; use the draft made for this target.")
  if cfg.target_d_model != tc.d_model:
    raise LoadError(f"{name}: an EAGLE-3 draft reading target hidden states of width "
                    f"{cfg.target_d_model}, but the target's hidden size is {tc.d_model}; "
                    "use the draft made for this target.")
  ids = list(cfg.aux_layers)
  if not ids or len(set(ids)) != len(ids) or min(ids) < 0 or max(ids) > tc.n_layers:
    raise LoadError(f"{name}: aux hidden-state layer ids {ids} do not fit a target of "
                    f"{tc.n_layers} layers (distinct ids in [0, {tc.n_layers}]); the draft was "
                    "made for a deeper target.")
  if not 0 < cfg.draft_vocab_size <= tc.vocab_size:
    raise LoadError(f"{name}: draft_vocab_size {cfg.draft_vocab_size} is not in [1, "
                    f"{tc.vocab_size}] (the target's vocabulary).")


def tensor_files(path: str, name: str) -> tuple:
  """(safetensors files, .bin files) of a checkpoint directory; LoadError if neither."""
  files = sorted(os.listdir(path))
  st = [os.path.join(path, f) for f in files if f.endswith(".safetensors")]
  if st:
    return st, []
  bins = [os.path.join(path, f) for f in files if f.endswith(".bin") and "optimizer" not in f
          and "training_args" not in f]
  if not bins:
    raise LoadError(f"{name}: no weights in {path} (expected model.safetensors or "
                    "pytorch_model.bin next to config.json).")
  return [], bins


def read_tensors(path: str, name: str) -> dict:
  """{tensor name: numpy array} of a checkpoint: safetensors, or torch .bin files (read
  without torch, `torch_file`)."""
  st, bins = tensor_files(path, name)
  out = {}
  for f in st or bins:
    out.update(torch_file.read_weights(f, name))
  return out


def params_from_tensors(tensors: dict, cfg: Eagle3Config, target, name: str,
                        dtype=jnp.float32) -> dict:
  """The draft's params (`specjax.models.eagle3`) from its tensors, checked for shapes
  and a draft vocabulary consistent with the target's."""
  t = {(("layers.0." + k[len(LEGACY_PREFIX):]) if k.startswith(LEGACY_PREFIX) else k): v
       for k, v in tensors.items()}
  t = {k[len("model."):] if k.startswith("model.") else k: v for k, v in t.items()}
  take = hf._Take(t, name)  # pylint: disable=protected-access
  lc, d = cfg.layer, cfg.d_model
  f = lambda x: jnp.asarray(np.asarray(x, np.float32), dtype)

  def dense(key):
    p = {"kernel": f(np.asarray(take(key + ".weight")).T)}
    bias = take(key + ".bias", optional=True)
    return p if bias is None else dict(p, bias=f(bias))

  fc = dense("fc")
  a = len(cfg.aux_layers)
  if fc["kernel"].shape != (a * cfg.target_d_model, d):
    raise LoadError(f"{name}: fc.weight is {tuple(fc['kernel'].shape[::-1])}, but {a} aux layers "
                    f"of width {cfg.target_d_model} into width {d} need "
                    f"({d}, {a * cfg.target_d_model}).")
  embed = take("embed_tokens.weight", optional=True)
  if embed is None:
    if target.cfg.d_model != d:
      raise LoadError(f"{name}: the draft has no embed_tokens of its own and its width {d} is not "
                      f"the target's {target.cfg.d_model}; it cannot share the target's.")
    embed = target.params["embed"][:target.cfg.vocab_size]
  params = {"embed": f(embed), "fc": fc}
  if tuple(params["embed"].shape) != (cfg.vocab_size, d):
    raise LoadError(f"{name}: embed_tokens.weight is {tuple(params['embed'].shape)}, expected "
                    f"({cfg.vocab_size}, {d}).")
  if cfg.norm_before_fc:
    params["input_norm"] = {"scale": f(take("input_norm.weight"))}
  if cfg.fc_norm:
    params["fc_norm"] = [{"scale": f(take(f"fc_norm.{j}.weight"))} for j in range(a)]
  layers = []
  for i in range(lc.n_layers):
    pre = f"layers.{i}."
    attn = {k: dense(f"{pre}self_attn.{k}_proj") for k in "qkvo"}
    if lc.qk_norm:
      attn.update({f"{k}_norm": {"scale": f(take(f"{pre}self_attn.{k}_norm.weight"))} for k in "qk"})
    layer = {"attn_norm": {"scale": f(take(pre + "input_layernorm.weight"))}, "attn": attn,
             "mlp_norm": {"scale": f(take(pre + "post_attention_layernorm.weight"))},
             "mlp": {k: dense(f"{pre}mlp.{k}_proj") for k in ("gate", "up", "down")}}
    if i == 0:
      layer["hidden_norm"] = {"scale": f(take(pre + "hidden_norm.weight"))}
    want = (2 * d if i == 0 else d, lc.n_heads * lc.head_dim)
    if tuple(attn["q"]["kernel"].shape) != want:
      raise LoadError(f"{name}: {pre}self_attn.q_proj.weight is "
                      f"{tuple(attn['q']['kernel'].shape[::-1])}, expected {want[::-1]}.")
    layers.append(layer)
  params["layers"] = layers
  params["final_norm"] = {"scale": f(take("norm.weight"))}
  params["lm_head"] = dense("lm_head")
  vd = params["lm_head"]["kernel"].shape[1]
  if vd != cfg.draft_vocab_size:
    raise LoadError(f"{name}: lm_head.weight scores {vd} ids but the config's draft_vocab_size "
                    f"is {cfg.draft_vocab_size}.")
  d2t, t2d = take("d2t", optional=True), take("t2d", optional=True)
  if vd != cfg.vocab_size or d2t is not None:
    ids = checked_draft_ids(d2t, t2d, vd, cfg.vocab_size, target, name)
    if vd != cfg.vocab_size or not np.array_equal(ids, np.arange(vd)):
      params["draft_ids"] = jnp.asarray(ids, jnp.int32)
  return params


def torch_array(x) -> np.ndarray:
  """A tensor as the writers store it: float32, contiguous."""
  return np.ascontiguousarray(np.asarray(x, np.float32))


def dense_tensors(key: str, p: dict) -> dict:
  """A dense param {"kernel" [I, O], "bias"?} as torch's `{key}.weight` [O, I] (and `.bias`)."""
  out = {key + ".weight": torch_array(np.asarray(p["kernel"]).T)}
  if "bias" in p:
    out[key + ".bias"] = torch_array(p["bias"])
  return out


def layer_tensors(layer: dict, pre: str) -> dict:
  """One decoder layer's params as transformers' Llama / Qwen3 tensors under `pre`: the
  attention projections, q/k norms, input norm (absent from EAGLE-1's first layer),
  post-attention norm, EAGLE-3's hidden_norm and the MLP, each where the layer has it."""
  attn, out = layer["attn"], {}
  for k in "qkvo":
    out.update(dense_tensors(f"{pre}self_attn.{k}_proj", attn[k]))
  for k in ("q_norm", "k_norm"):
    if k in attn:
      out[f"{pre}self_attn.{k}.weight"] = torch_array(attn[k]["scale"])
  for name, key in (("input_layernorm", "attn_norm"), ("post_attention_layernorm", "mlp_norm"),
                    ("hidden_norm", "hidden_norm")):
    if key in layer:
      out[f"{pre}{name}.weight"] = torch_array(layer[key]["scale"])
  for k in ("gate", "up", "down"):
    out.update(dense_tensors(f"{pre}mlp.{k}_proj", layer["mlp"][k]))
  return out


def tensors_from_params(params: dict, cfg: Eagle3Config, legacy: bool = False,
                        with_embed: bool = True) -> dict:
  """The inverse of `params_from_tensors`: {name: numpy array} (float32, torch layout);
  `legacy` names layer 0 `midlayer.*`."""
  a = torch_array
  out = dense_tensors("fc", params["fc"])
  if with_embed:
    out["embed_tokens.weight"] = a(params["embed"])
  if "input_norm" in params:
    out["input_norm.weight"] = a(params["input_norm"]["scale"])
  for j, p in enumerate(params.get("fc_norm", [])):
    out[f"fc_norm.{j}.weight"] = a(p["scale"])
  for i, l in enumerate(params["layers"]):
    out.update(layer_tensors(l, LEGACY_PREFIX if legacy and i == 0 else f"layers.{i}."))
  out["norm.weight"] = a(params["final_norm"]["scale"])
  out.update(dense_tensors("lm_head", params["lm_head"]))
  vd = params["lm_head"]["kernel"].shape[1]
  if "draft_ids" in params or vd != cfg.vocab_size:
    ids = np.asarray(params.get("draft_ids", np.arange(vd)), np.int64)
    out["d2t"] = ids - np.arange(vd, dtype=np.int64)
    t2d = np.zeros((cfg.vocab_size,), bool)
    t2d[ids] = True
    out["t2d"] = t2d
  return out


def layer_hf_config(cfg: Eagle3Config) -> dict:
  """The draft layers' transformers config dict (what `layer_config` reads back)."""
  return model_hf_config(cfg.layer)


def speculators_block(algorithm: str, verifier: Optional[str], verifier_archs=("LlamaForCausalLM",),
                       speculative_tokens: int = 3) -> dict:
  """config.json's `speculators_config` (speculators' SpeculatorsConfig, what vLLM reads):
  the algorithm, one greedy proposal method of `speculative_tokens`, and the verifier."""
  return {"algorithm": algorithm,
          "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens,
                                "verifier_accept_k": 1, "accept_tolerance": 0.0}],
          "default_proposal_method": "greedy",
          "verifier": {"name_or_path": verifier, "architectures": list(verifier_archs)}}


def model_hf_config(lc: ModelConfig) -> dict:
  """A Llama / Qwen3 ModelConfig as a transformers config dict (a draft's layers; EAGLE-1's
  `transformer_layer_config` too)."""
  out = {"model_type": "qwen3" if lc.qk_norm else "llama", "vocab_size": lc.vocab_size,
         "hidden_size": lc.d_model, "intermediate_size": lc.d_ff,
         "num_hidden_layers": lc.n_layers, "num_attention_heads": lc.n_heads,
         "num_key_value_heads": lc.n_kv_heads, "head_dim": lc.head_dim,
         "max_position_embeddings": lc.max_positions, "rms_norm_eps": lc.norm_eps,
         "hidden_act": "silu", "attention_bias": lc.qkv_bias, "tie_word_embeddings": False,
         "rope_theta": lc.rope_theta}
  if lc.rope_type == "default":
    out["rope_parameters"] = {"rope_type": "default", "rope_theta": lc.rope_theta}
  elif lc.rope_type == "linear":
    out["rope_parameters"] = {"rope_type": "linear", "rope_theta": lc.rope_theta,
                              "factor": lc.rope_factor}
  elif lc.rope_type == "llama3":
    out["rope_parameters"] = {
        "rope_type": "llama3", "rope_theta": lc.rope_theta, "factor": lc.rope_factor,
        "low_freq_factor": lc.rope_low_freq_factor, "high_freq_factor": lc.rope_high_freq_factor,
        "original_max_position_embeddings": lc.rope_original_max_positions}
  else:
    raise ValueError(f"Rope scaling {lc.rope_type!r} has no transformers config form to export.")
  return out


def read_bool(hf_cfg: dict, key: str, name: str, default: bool = False) -> bool:
  v = hf_cfg.get(key, default)
  if not isinstance(v, bool):
    raise LoadError(f"{name}: config field {key!r} must be true or false, got {v!r}.")
  return v


def read_aux(ids, name: str, n_target_layers: int) -> tuple:
  """The aux layer ids of a config (None: EAGLE-3's default for the target's depth)."""
  if ids is None:
    return default_aux_layers(n_target_layers)
  if not isinstance(ids, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                   for i in ids):
    raise LoadError(f"{name}: eagle_aux_hidden_state_layer_ids must be a list of integers, "
                    f"got {ids!r}.")
  return tuple(ids)


def model_width(hf_cfg: dict, layer_cfg: ModelConfig, key: str = "target_hidden_size") -> int:
  """The target width the draft's fc reads (target_hidden_size, else the draft's own)."""
  v: Optional[int] = hf_cfg.get(key)
  return int(v) if v else layer_cfg.d_model


def checked_draft_ids(d2t, t2d, vd: int, vocab_size: int, target, name: str) -> np.ndarray:
  """The target ids of a draft vocabulary of `vd` ids from its d2t and t2d tensors, checked
  against the target; a missing tensor or a bad mapping is one LoadError line."""
  if d2t is None or t2d is None:
    raise LoadError(f"{name}: a draft vocabulary of {vd} ids (target: {vocab_size}) without "
                    "its d2t and t2d tensors.")
  try:
    return draft_vocab.check_vocab(d2t, t2d, target.cfg.vocab_size, vd, what=f"draft {name}")
  except ValueError as e:
    raise LoadError(str(e)) from None
