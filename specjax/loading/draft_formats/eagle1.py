"""EAGLE-1 drafts (SafeAILab/EAGLE; speculators' type "eagle", EAGLE-1/2 and HASS) ->
specjax's feature draft (`specjax.models.feature_draft` with EAGLE-1's options).

The SafeAILab layout (`eagle/model/cnets1.py`): config.json is a Llama config of the
draft's layers (num_hidden_layers = 1 usually; optional "bias", default true), weights in
pytorch_model.bin or model.safetensors:

    fc.weight [D, 2D], fc.bias [D]?       x = fc([embed(token j+1); f_j])
    layers.{i}.*                          a Llama decoder layer; layer 0 has no input_layernorm
    embed_tokens.weight [V, D]?           else the target's embeddings

f_j is the target's hidden state after its final norm (`base_model.model(...)[0]`), the
draft's output goes straight to the target's lm_head (no norm of its own), and the draft's
predicted features are fed back as they are. speculators' "eagle" type holds the same
draft: config.json has speculators_model_type "eagle", speculators_config (the verifier),
transformer_layer_config (the layer's Llama config), fusion_bias and layernorms; tensors
fusion_fc.* (= fc), transformer.* (= layers.0), and with layernorms embedding_layernorm
(the embedding half, before fc), transformer.input_layernorm and pre_lm_head_layernorm.

In specjax terms (docs/extending.md, "EAGLE-1 and Medusa-1"): fc's inputs are not scaled
to unit RMS (`FeatureStyle(unit_rms=False)`), the target's final norm is copied in as
"feature_norm", layers without an input norm lack "attn_norm", and a draft without a
pre-head norm lacks "final_norm". Everything else (positions, cache, trees) is the feature
drafter's own.

    detect(path) -> bool
    load(path, target, name, fmt) -> PublishedDraft(kind="eagle1", cfg=Eagle1Config, params)
    save(draft, out_dir, verifier) -> out_dir   speculators' "eagle" type (load's inverse)

The writer follows speculators' `EagleSpeculatorConfig` (speculators 0.1-0.4; 0.9 no longer
ships the type) and its EAGLE converter: one decoder layer, no embed_tokens unless the
draft owns embeddings unlike the target's (the converter drops them: the verifier's are
used). vLLM's reader of speculators' configs registers eagle3 (later also peagle, dflash,
dspark), not "eagle"; vLLM runs EAGLE-1 drafts in the SafeAILab layout."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import jax.numpy as jnp
import numpy as np

from specjax.errors import LoadError
from specjax.loading import hf as hf_lib
from specjax.loading.draft_formats.eagle3_tensors import (dense_tensors, layer_tensors,
                                                          model_hf_config, speculators_block,
                                                          torch_array)
from specjax.loading.draft_formats.torch_file import file_shapes, read_weights
from specjax.models.config import ModelConfig
from specjax.models.feature_draft import FeatureStyle
from specjax.models.params import inference_layout

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# LlamaConfig's defaults: transformers 4's to_diff_dict leaves them out of
# speculators' transformer_layer_config.
LLAMA_DEFAULTS = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
                  "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "hidden_act": "silu",
                  "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
                  "tie_word_embeddings": False, "rope_theta": 10000.0}
# speculators' tensor names -> the SafeAILab names used below
SPECULATORS_NAMES = (("fusion_fc.", "fc."), ("transformer.", "layers.0."),
                     ("embedding_layernorm.", "embed_norm."), ("pre_lm_head_layernorm.", "norm."))
# The last speculators release whose EagleSpeculatorConfig reads what `save` writes.
SPECULATORS_EAGLE_VERSION = "0.4.0"


@dataclasses.dataclass(frozen=True)
class Eagle1Config:
  """What the feature drafter needs besides the params: the draft's own layers' config
  (its width, vocabulary and head tied as the target's) and EAGLE-1's static style.
  own_embed: the checkpoint's embed_tokens differ from the target's (params["embed"] is
  then the draft's own; `save` writes it back)."""
  model: ModelConfig
  style: FeatureStyle
  own_embed: bool = False


def weights_file(path: str) -> Optional[str]:
  """The draft's single weights file (safetensors preferred), or None."""
  for f in WEIGHT_FILES:
    if os.path.isfile(os.path.join(path, f)):
      return os.path.join(path, f)
  return None


def _is_speculators(hf: dict) -> bool:
  algo = (hf.get("speculators_config") or {}).get("algorithm") if isinstance(
      hf.get("speculators_config"), dict) else None
  return hf.get("speculators_model_type", algo) == "eagle"


def _canonical(name: str, speculators: bool) -> str:
  if speculators:
    for old, new in SPECULATORS_NAMES:
      if name.startswith(old):
        return new + name[len(old):]
  return name


def detect(path: str) -> bool:
  """A directory holding an EAGLE-1 draft: speculators' type "eagle", or a config.json and
  a weights file with fc.weight [D, 2D] and layers.0.* (no midlayer.*, no lm_head)."""
  if not os.path.isdir(path) or not os.path.isfile(os.path.join(path, "config.json")):
    return False
  hf = hf_lib.read_json(os.path.join(path, "config.json"), path)
  if _is_speculators(hf):
    return True
  if "speculators_model_type" in hf or weights_file(path) is None:
    return False
  shapes = file_shapes(weights_file(path), path)
  fc = shapes.get("fc.weight")
  return (fc is not None and len(fc) == 2 and fc[1] == 2 * fc[0]
          and any(n.startswith("layers.0.") for n in shapes)
          and not any(n.startswith(("midlayer.", "lm_head")) for n in shapes))


def _layer_config(hf: dict, speculators: bool, name: str) -> tuple[dict, dict]:
  """(the draft layers' Llama config dict, expected options {"bias", "layernorms"}; None =
  follow the weights)."""
  if not speculators:
    return hf, {"bias": hf.get("bias"), "layernorms": False}
  layer = hf.get("transformer_layer_config")
  if not isinstance(layer, dict):
    raise LoadError(f"{name}: a speculators 'eagle' config without a transformer_layer_config "
                    "dict; re-convert the draft with speculators.")
  if layer.get("model_type", "llama") != "llama":
    raise LoadError(f"{name}: transformer_layer_config model_type {layer['model_type']!r}; "
                    "specjax reads EAGLE-1 drafts with Llama layers.")
  return {**LLAMA_DEFAULTS, **layer}, {"bias": bool(hf.get("fusion_bias", False)),
                                      "layernorms": bool(hf.get("layernorms", False))}


def _expected(cfg: ModelConfig, shapes: dict, opts: dict) -> dict:
  """{tensor name: shape} the draft must hold (optional ones where the weights or config
  ask for them)."""
  d, h, kv, e, f = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff
  want = {"fc.weight": (d, 2 * d)}
  if opts["bias"] or (opts["bias"] is None and "fc.bias" in shapes):
    want["fc.bias"] = (d,)
  if opts["layernorms"]:
    want.update({"embed_norm.weight": (d,), "norm.weight": (d,)})
  for i in range(cfg.n_layers):
    pre = f"layers.{i}."
    attn = {"q": (h * e, d), "k": (kv * e, d), "v": (kv * e, d), "o": (d, h * e)}
    want.update({pre + f"self_attn.{x}_proj.weight": s for x, s in attn.items()})
    want.update({pre + "mlp.gate_proj.weight": (f, d), pre + "mlp.up_proj.weight": (f, d),
                 pre + "mlp.down_proj.weight": (d, f), pre + "post_attention_layernorm.weight": (d,)})
    if i > 0 or opts["layernorms"]:
      want[pre + "input_layernorm.weight"] = (d,)
    if cfg.qkv_bias:
      want.update({pre + f"self_attn.{x}_proj.bias": (attn[x][0],) for x in "qkv"})
  if "embed_tokens.weight" in shapes:
    want["embed_tokens.weight"] = (cfg.vocab_size, d)
  return want


def check(cfg: ModelConfig, shapes: dict, opts: dict, target_cfg: ModelConfig, name: str) -> None:
  """One LoadError line when the draft was made for another target or its tensors do not
  match its config; reads no weights."""
  if target_cfg.is_gpt2:
    raise LoadError(f"{name}: EAGLE-1 drafts read a Llama-family target's RMS-normed hidden "
                    "states; this target is GPT-2.")
  if cfg.d_model != target_cfg.d_model:
    raise LoadError(f"{name}: this EAGLE-1 draft is for a target with hidden size {cfg.d_model}, "
                    f"but this target's is {target_cfg.d_model}; use a draft trained for it.")
  if cfg.vocab_size != target_cfg.vocab_size:
    raise LoadError(f"{name}: this EAGLE-1 draft has a vocabulary of {cfg.vocab_size}, but this "
                    f"target's is {target_cfg.vocab_size}; use a draft trained for its tokenizer.")
  want = _expected(cfg, shapes, opts)
  missing = [k for k in want if k not in shapes]
  if missing:
    raise LoadError(f"{name}: the EAGLE-1 draft lacks {len(missing)} tensors its config needs "
                    f"(e.g. {missing[0]!r}); the file is truncated or not an EAGLE-1 draft.")
  attn = {x: f"layers.0.self_attn.{x}_proj.weight" for x in "qk"}
  if any(tuple(shapes[k]) != want[k] for k in attn.values()):
    got = ", ".join(f"{x}_proj {tuple(shapes[k])}" for x, k in attn.items())
    raise LoadError(f"{name}: config.json gives {cfg.n_heads} attention heads and "
                    f"{cfg.n_kv_heads} key/value heads of {cfg.head_dim} dims, but the weights "
                    f"have {got}; the config does not belong to these weights.")
  bad = [(k, tuple(shapes[k]), s) for k, s in want.items() if tuple(shapes[k]) != s]
  if bad:
    k, got, exp = bad[0]
    raise LoadError(f"{name}: tensor {k!r} has shape {got}, expected {exp} from config.json; "
                    "the checkpoint is inconsistent.")


def _params(t: dict, cfg: ModelConfig, opts: dict, target, dtype) -> tuple[dict, ModelConfig]:
  """The feature draft's params (jax arrays) and its config with the head tied as needed.
  Tensors the reference model has no place for (a first-layer input norm or extra norms
  without layernorms, fc.bias under "bias": false) are left out, as its
  load_state_dict(strict=False) leaves them."""
  f32 = lambda k: np.asarray(t[k], np.float32)
  lin = lambda k: {"kernel": f32(k + ".weight").T, **({"bias": f32(k + ".bias")}
                                                      if k + ".bias" in t else {})}
  layers = []
  for i in range(cfg.n_layers):
    pre = f"layers.{i}."
    layer = {"attn": {x: lin(pre + f"self_attn.{x}_proj") for x in "qkvo"},
             "mlp_norm": {"scale": f32(pre + "post_attention_layernorm.weight")},
             "mlp": {x: lin(pre + f"mlp.{x}_proj") for x in ("gate", "up", "down")}}
    if pre + "input_layernorm.weight" in t and (i > 0 or opts["layernorms"]):
      layer["attn_norm"] = {"scale": f32(pre + "input_layernorm.weight")}
    layers.append(layer)
  params = {"layers": layers, "fc": lin("fc"),
            "feature_norm": {"scale": np.asarray(target.params["final_norm"]["scale"])}}
  if opts["bias"] is False:
    params["fc"].pop("bias", None)
  if opts["layernorms"]:
    params["embed_norm"] = {"scale": f32("embed_norm.weight")}
    params["final_norm"] = {"scale": f32("norm.weight")}
  params = inference_layout(_cast(params, dtype), cfg)  # the fast decode-step layout
  # Embeddings: the draft's own where it ships different ones (EAGLE loads them over the
  # target's), else the target's, shared. The head is always the target's.
  tembed = target.params["embed"]
  own = f32("embed_tokens.weight") if "embed_tokens.weight" in t else None
  if own is not None and np.array_equal(own, np.asarray(tembed, np.float32)):
    own = None
  params["embed"] = tembed if own is None else jnp.asarray(own, dtype)
  tied = target.cfg.tie_embeddings and own is None
  if not tied:
    kernel = (target.params["lm_head"]["kernel"] if not target.cfg.tie_embeddings
              else jnp.asarray(tembed).T)
    params["lm_head"] = {"kernel": kernel}
    head_t = target.params.get("inference", {}).get("head_t")
    if head_t is not None and not target.cfg.tie_embeddings:
      params["inference"] = {**params["inference"], "head_t": head_t}
  return params, dataclasses.replace(cfg, tie_embeddings=tied)


def _cast(tree, dtype):
  if isinstance(tree, dict):
    return {k: _cast(v, dtype) for k, v in tree.items()}
  if isinstance(tree, list):
    return [_cast(v, dtype) for v in tree]
  return jnp.asarray(tree, dtype)


def load(path: str, target, name: Optional[str] = None, fmt: str = "eagle1",
         dtype=jnp.float32):
  """Reads an EAGLE-1 draft for `target` (a loaded Model) -> PublishedDraft(kind="eagle1").

  The config and the file's tensor names and shapes are checked against the target before
  any weight is read."""
  from specjax.loading.draft_formats import PublishedDraft
  name = name or path
  cfg_path = os.path.join(path, "config.json")
  if not os.path.isfile(cfg_path):
    raise LoadError(f"{name}: no config.json in {path}; an EAGLE-1 draft needs the config of "
                    "its layers.")
  hf = hf_lib.read_json(cfg_path, name)
  speculators = _is_speculators(hf)
  layer_hf, opts = _layer_config(hf, speculators, name)
  wfile = weights_file(path)
  if wfile is None:
    raise LoadError(f"{name}: no {' or '.join(WEIGHT_FILES)} in {path}; not an EAGLE-1 draft.")
  if not layer_hf.get("architectures") and "model_type" not in layer_hf:
    layer_hf = dict(layer_hf, model_type="llama")  # cnets1 builds Llama layers
  try:
    cfg = hf_lib.config_from_hf(layer_hf, name)
  except KeyError as e:
    raise LoadError(f"{name}: config.json lacks {e.args[0]!r}; an EAGLE-1 draft's config is the "
                    "Llama config of its layers.") from None
  shapes = {_canonical(k, speculators): tuple(s) for k, s in file_shapes(wfile, name).items()}
  cfg = dataclasses.replace(  # cnets1 takes q/k/v biases from the config's qkv_bias
      cfg, qkv_bias=cfg.qkv_bias or "layers.0.self_attn.q_proj.bias" in shapes)
  check(cfg, shapes, opts, target.cfg, name)
  tensors = {_canonical(k, speculators): v for k, v in read_weights(wfile, name).items()}
  params, cfg = _params(tensors, cfg, opts, target, dtype)
  verifier = None
  if speculators:
    verifier = ((hf.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
  style = FeatureStyle(unit_rms=False, feature_norm_eps=float(target.cfg.norm_eps))
  own = params["embed"] is not target.params["embed"]  # `_params` kept the draft's own
  return PublishedDraft(name=name, kind="eagle1", fmt=fmt,
                        cfg=Eagle1Config(model=cfg, style=style, own_embed=own),
                        params=params, verifier=verifier)


# ------------------------------------------------------------------------ writing


def _writable(draft) -> bool:
  """The draft's `layernorms` flag; one ValueError line where speculators' "eagle" type
  cannot hold the draft exactly."""
  if draft.kind != "eagle1":
    raise ValueError(f"A {draft.kind} draft is not an EAGLE-1 draft; speculators' 'eagle' type "
                     "holds EAGLE-1 / HASS drafts (kind eagle1).")
  p, cfg = draft.params, draft.cfg.model
  if cfg.n_layers != 1:
    raise ValueError(f"speculators' 'eagle' type holds one decoder layer (transformer.*); this "
                     f"EAGLE-1 draft has {cfg.n_layers}.")
  odd = ([k for k in ("fc_layers", "head_vocab") if k in p]
         + (["unit-RMS fc inputs"] if draft.cfg.style.unit_rms else [])
         + ([] if "feature_norm" in p else ["no copy of the target's final norm"]))
  if odd:
    raise ValueError(f"{draft.name}: not EAGLE-1's computation ({', '.join(odd)}); speculators' "
                     "'eagle' type cannot hold it exactly.")
  layernorms = "embed_norm" in p
  if ("final_norm" in p) != layernorms or ("attn_norm" in p["layers"][0]) != layernorms:
    raise ValueError(f"{draft.name}: speculators' layernorms go together (embedding, layer input "
                     "and pre-head norms); this draft has some of them only.")
  return layernorms


def tensors_of(draft) -> dict:
  """{speculators tensor name: float32 numpy array, torch layout} of an EAGLE-1 draft."""
  p = draft.params
  out = {**dense_tensors("fusion_fc", p["fc"]), **layer_tensors(p["layers"][0], "transformer.")}
  if "embed_norm" in p:
    out["embedding_layernorm.weight"] = torch_array(p["embed_norm"]["scale"])
    out["pre_lm_head_layernorm.weight"] = torch_array(p["final_norm"]["scale"])
  if draft.cfg.own_embed:
    out["embed_tokens.weight"] = torch_array(p["embed"])
  return out


def config_dict(draft, verifier: Optional[str], verifier_archs=("LlamaForCausalLM",),
                speculative_tokens: int = 3) -> dict:
  """The config.json of speculators' "eagle" type (`EagleSpeculatorConfig`) for the draft."""
  layernorms = _writable(draft)
  return {
      "architectures": ["EagleSpeculator", "LlamaDecoderLayer"],
      "speculators_model_type": "eagle",
      "speculators_version": SPECULATORS_EAGLE_VERSION,
      "transformer_layer_architecture": "LlamaDecoderLayer",
      "transformer_layer_config": model_hf_config(draft.cfg.model),
      "layernorms": layernorms, "fusion_bias": "bias" in draft.params["fc"],
      "speculators_config": speculators_block("eagle", verifier, verifier_archs,
                                              speculative_tokens),
  }


def save(draft, out_dir: str, verifier: Optional[str] = None,
         verifier_archs=("LlamaForCausalLM",), speculative_tokens: int = 3) -> str:
  """Writes an EAGLE-1 draft (PublishedDraft of kind "eagle1") as speculators' "eagle" type:
  config.json + model.safetensors, which `load` reads back to the same params. verifier:
  the target's name recorded in speculators_config (default: the one the draft names)."""
  from safetensors.numpy import save_file  # local: keeps `import specjax` light
  cfg = config_dict(draft, verifier or draft.verifier, verifier_archs, speculative_tokens)
  tensors = tensors_of(draft)
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
    json.dump(cfg, f, indent=2)
  save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
  return out_dir
