"""Hugging Face checkpoint directories: config.json + safetensors -> (ModelConfig, params).

Supported architectures (the `architectures` / `model_type` of config.json):
  GPT2LMHeadModel (gpt2, distilgpt2, gpt2-medium/large/xl), LlamaForCausalLM (Llama,
  SmolLM2, TinyLlama, Llama-3.x with `llama3` rope scaling; tied or untied head),
  Qwen2ForCausalLM (Qwen2/2.5: q/k/v bias), Qwen3ForCausalLM (per-head q/k RMSNorm,
  explicit head_dim) and MistralForCausalLM (sliding window, run while it is a no-op).

Weights are read with `safetensors` into numpy (no torch). PyTorch `.bin` checkpoints
are refused with a message saying how to convert them. Torch `nn.Linear` weights are
[out, in] and are transposed to the [in, out] kernels of `specjax.models.params`;
GPT-2's `Conv1D` weights are already [in, out].
"""
from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from specjax.errors import LoadError
from specjax.models.config import ModelConfig

# Architecture name (config.json "architectures"[0]) -> model_type it implies.
ARCHITECTURES = {
    "GPT2LMHeadModel": "gpt2",
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MistralForCausalLM": "mistral",
}
_MODEL_TYPES = set(ARCHITECTURES.values())


def read_json(path: str, source: str) -> dict:
  """Reads a JSON file, turning parse errors into a LoadError naming the source."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise LoadError(f"{source}: cannot read {os.path.basename(path)} ({e}).") from e


DRAFT_META_FILE = "specjax_draft.json"  # written next to a draft's weights (asset.py, hf_export.py)


def read_draft_meta(directory: str) -> Optional[dict]:
  """A draft directory's specjax_draft.json (None when it has none); LoadError if unreadable."""
  path = os.path.join(directory, DRAFT_META_FILE)
  return read_json(path, directory) if os.path.isfile(path) else None


def model_type_of(hf: dict, source: str) -> str:
  """The supported model_type ("gpt2" | "llama" | "qwen2") of a config.json dict."""
  archs = hf.get("architectures") or []
  for arch in archs:
    if arch in ARCHITECTURES:
      return ARCHITECTURES[arch]
  if not archs and hf.get("model_type") in _MODEL_TYPES:
    return hf["model_type"]
  found = archs[0] if archs else hf.get("model_type", "<none>")
  raise LoadError(
      f"{source}: unsupported architecture {found!r}. specjax loads "
      f"{', '.join(ARCHITECTURES)} checkpoints (or GGUF files with a llama/qwen2/gpt2 "
      "architecture); pick one of those models.")


_ROPE_SUPPORTED = ("default", "linear", "dynamic", "llama3")


def _rope_fields(hf: dict, source: str) -> dict:
  """RoPE theta and scaling from transformers 4 (`rope_theta`/`rope_scaling`) or 5
  (`rope_parameters`) as ModelConfig fields; an unknown scaling type is a LoadError."""
  params = dict(hf.get("rope_scaling") or {})
  params.update(hf.get("rope_parameters") or {})
  kind = params.get("rope_type", params.get("type")) or "default"
  if kind not in _ROPE_SUPPORTED:
    raise LoadError(
        f"{source}: rope scaling {kind!r} is not supported (specjax implements "
        f"{', '.join(_ROPE_SUPPORTED)}); use a checkpoint with one of those.")
  out = {"rope_theta": float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))}
  max_pos = hf.get("max_position_embeddings", 2048)
  if kind == "linear":
    out.update(rope_type="linear", rope_factor=float(params["factor"]))
  elif kind == "llama3":
    out.update(rope_type="llama3", rope_factor=float(params["factor"]),
               rope_low_freq_factor=float(params["low_freq_factor"]),
               rope_high_freq_factor=float(params["high_freq_factor"]),
               rope_original_max_positions=int(params["original_max_position_embeddings"]))
  elif kind == "dynamic":  # equals plain RoPE within the trained context, capped there
    out["max_positions"] = int(params.get("original_max_position_embeddings") or max_pos)
  return out


def _sliding_window(hf: dict, mtype: str) -> int:
  """The attention window (0 = none): Mistral's `sliding_window`, Qwen2/3's when
  `use_sliding_window` is on or any `layer_types` entry is sliding."""
  window = hf.get("sliding_window") or 0
  layer_types = hf.get("layer_types") or []
  if mtype == "mistral" or hf.get("use_sliding_window") or any(
      t != "full_attention" for t in layer_types):
    return int(window)
  return 0


def config_from_hf(hf: dict, source: str) -> ModelConfig:
  """Maps a config.json dict onto ModelConfig, refusing features the forward lacks."""
  mtype = model_type_of(hf, source)
  if mtype == "gpt2":
    act = hf.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
      raise LoadError(f"{source}: GPT-2 activation {act!r} unsupported (need gelu_new).")
    if hf.get("scale_attn_by_inverse_layer_idx") or not hf.get("scale_attn_weights", True):
      raise LoadError(f"{source}: non-standard GPT-2 attention scaling is not supported.")
    d, h = hf["n_embd"], hf["n_head"]
    return ModelConfig(
        family="gpt2", vocab_size=hf["vocab_size"], d_model=d, n_layers=hf["n_layer"],
        n_heads=h, n_kv_heads=h, head_dim=d // h, d_ff=hf.get("n_inner") or 4 * d,
        max_positions=hf.get("n_positions", 1024), norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        tie_embeddings=hf.get("tie_word_embeddings", True), qkv_bias=True)
  act = hf.get("hidden_act", "silu")
  if act not in ("silu", "swish"):
    raise LoadError(f"{source}: activation {act!r} unsupported (Llama/Qwen2 need silu).")
  d, h = hf["hidden_size"], hf["num_attention_heads"]
  fields = dict(
      family="llama", vocab_size=hf["vocab_size"], d_model=d, n_layers=hf["num_hidden_layers"],
      n_heads=h, n_kv_heads=hf.get("num_key_value_heads") or h,
      head_dim=hf.get("head_dim") or d // h, d_ff=hf["intermediate_size"],
      max_positions=hf.get("max_position_embeddings", 2048),
      norm_eps=hf.get("rms_norm_eps", 1e-6), tie_embeddings=hf.get("tie_word_embeddings", False),
      qkv_bias=mtype == "qwen2" or bool(hf.get("attention_bias", False)),
      qk_norm=mtype == "qwen3", sliding_window=_sliding_window(hf, mtype))
  fields.update(_rope_fields(hf, source))
  return ModelConfig(**fields)


# ---------------------------------------------------------------------------- weights

def weight_files(directory: str, source: str) -> list[str]:
  """The safetensors files of a checkpoint (sharded via its index, or single)."""
  index = os.path.join(directory, "model.safetensors.index.json")
  if os.path.isfile(index):
    shards = sorted(set(read_json(index, source).get("weight_map", {}).values()))
    missing = [s for s in shards if not os.path.isfile(os.path.join(directory, s))]
    if missing or not shards:
      raise LoadError(f"{source}: shards listed in model.safetensors.index.json are missing: "
                      f"{missing or 'none listed'}; re-download the checkpoint.")
    return [os.path.join(directory, s) for s in shards]
  single = os.path.join(directory, "model.safetensors")
  if os.path.isfile(single):
    return [single]
  files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
  if files:
    return [os.path.join(directory, f) for f in files]
  if any(f.endswith(".bin") or f.endswith(".pt") for f in os.listdir(directory)):
    raise LoadError(
        f"{source}: only PyTorch .bin weights found, which cannot be read without torch. "
        "Convert once to safetensors, e.g. `AutoModelForCausalLM.from_pretrained(d)"
        ".save_pretrained(d, safe_serialization=True)`, then load again.")
  raise LoadError(f"{source}: no weights found (expected model.safetensors or "
                  "model-*.safetensors next to config.json).")


def read_safetensors(files: list[str], source: str) -> dict[str, np.ndarray]:
  """All tensors of the given files as numpy arrays (bf16 via ml_dtypes)."""
  from safetensors import safe_open  # local: keeps `import specjax` light
  tensors = {}
  for path in files:
    try:
      with safe_open(path, framework="numpy") as f:
        for name in f.keys():
          tensors[name] = f.get_tensor(name)
    except Exception as e:  # safetensors raises its own error types and OSError
      raise LoadError(f"{source}: cannot read {os.path.basename(path)} ({type(e).__name__}: {e}); "
                      "the file is corrupt or truncated - re-download or re-save it.") from e
  return tensors


_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
              "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


class TensorView:
  """A lazy view of one safetensors tensor, transposed and/or windowed.

  Supports what the weight mapping needs (`.shape`, `.dtype`, `.T`, basic slices) and
  reads only the selected region when indexed with `np.asarray(view[index])`, so
  `specjax.parallel.place_params` hands each device its own slice straight from the file.
  """

  def __init__(self, handle, name: str, base_shape, dtype, perm=None, window=None):
    self._h, self._name, self._dtype = handle, name, dtype
    self._perm = tuple(perm) if perm is not None else tuple(range(len(base_shape)))
    self._window = tuple(window) if window is not None else tuple((0, n) for n in base_shape)

  @property
  def shape(self) -> tuple:
    return tuple(self._window[a][1] - self._window[a][0] for a in self._perm)

  @property
  def ndim(self) -> int:
    return len(self._perm)

  @property
  def dtype(self):
    return self._dtype

  @property
  def T(self) -> "TensorView":
    return TensorView(self._h, self._name, (), self._dtype, self._perm[::-1], self._window)

  def __getitem__(self, key) -> "TensorView":
    key = key if isinstance(key, tuple) else (key,)
    window = list(self._window)
    for axis, k in enumerate(key):
      if not isinstance(k, slice) or k.step not in (None, 1):
        raise TypeError(f"TensorView supports contiguous slices only, got {k!r}.")
      base = self._perm[axis]
      lo, hi = window[base]
      start, stop, _ = k.indices(hi - lo)
      window[base] = (lo + start, lo + max(start, stop))
    return TensorView(self._h, self._name, (), self._dtype, self._perm, window)

  def __array__(self, dtype=None, copy=None):
    x = self._h.get_slice(self._name)[tuple(slice(lo, hi) for lo, hi in self._window)]
    x = np.transpose(np.asarray(x), self._perm)
    return x if dtype is None else x.astype(dtype)


def open_safetensors(files: list[str], source: str) -> dict[str, TensorView]:
  """Lazy views of every tensor of the given files (nothing is read until indexed)."""
  from safetensors import safe_open  # local: keeps `import specjax` light
  import ml_dtypes
  views = {}
  for path in files:
    try:
      handle = safe_open(path, framework="numpy")
      for name in handle.keys():
        sl = handle.get_slice(name)
        kind = sl.get_dtype()
        dtype = ml_dtypes.bfloat16 if kind == "BF16" else _ST_DTYPES[kind]
        views[name] = TensorView(handle, name, tuple(sl.get_shape()), np.dtype(dtype))
    except Exception as e:  # safetensors raises its own error types and OSError
      raise LoadError(f"{source}: cannot read {os.path.basename(path)} ({type(e).__name__}: {e}); "
                      "the file is corrupt or truncated - re-download or re-save it.") from None
  return views


def _strip_prefixes(tensors: dict) -> dict:
  """Drops the `transformer.` / `model.` wrappers so names start at the block level."""
  out = {}
  for name, x in tensors.items():
    for prefix in ("transformer.", "model."):
      if name.startswith(prefix):
        name = name[len(prefix):]
        break
    out[name] = x
  return out


class _Take:
  """Pops named tensors, reporting a missing one as a LoadError naming the source."""

  def __init__(self, tensors: dict, source: str):
    self.tensors, self.source = tensors, source

  def __call__(self, name: str, optional: bool = False) -> Optional[np.ndarray]:
    if name in self.tensors:
      return self.tensors[name]
    if optional:
      return None
    raise LoadError(f"{self.source}: tensor {name!r} missing from the checkpoint; "
                    "the weights do not match config.json.")


def _dense(weight: np.ndarray, bias: Optional[np.ndarray], transpose: bool) -> dict:
  p = {"kernel": weight.T if transpose else weight}
  if bias is not None:
    p["bias"] = bias
  return p


def _gpt2_params(take: _Take, cfg: ModelConfig) -> dict:
  d = cfg.d_model
  params = {"embed": take("wte.weight"), "pos_embed": take("wpe.weight")}
  layers = []
  for i in range(cfg.n_layers):
    pre = f"h.{i}."
    w, b = take(pre + "attn.c_attn.weight"), take(pre + "attn.c_attn.bias")  # [D, 3D], [3D]
    attn = {n: {"kernel": w[:, j * d:(j + 1) * d], "bias": b[j * d:(j + 1) * d]}
            for j, n in enumerate("qkv")}
    attn["o"] = _dense(take(pre + "attn.c_proj.weight"), take(pre + "attn.c_proj.bias"), False)
    layers.append({
        "attn_norm": {"scale": take(pre + "ln_1.weight"), "bias": take(pre + "ln_1.bias")},
        "attn": attn,
        "mlp_norm": {"scale": take(pre + "ln_2.weight"), "bias": take(pre + "ln_2.bias")},
        "mlp": {"fc": _dense(take(pre + "mlp.c_fc.weight"), take(pre + "mlp.c_fc.bias"), False),
                "proj": _dense(take(pre + "mlp.c_proj.weight"), take(pre + "mlp.c_proj.bias"),
                               False)},
    })
  params["layers"] = layers
  params["final_norm"] = {"scale": take("ln_f.weight"), "bias": take("ln_f.bias")}
  return params


def _llama_params(take: _Take, cfg: ModelConfig) -> dict:
  params = {"embed": take("embed_tokens.weight")}
  layers = []
  for i in range(cfg.n_layers):
    pre = f"layers.{i}."
    lin = lambda n: _dense(take(pre + n + ".weight"), take(pre + n + ".bias", optional=True), True)
    layers.append({
        "attn_norm": {"scale": take(pre + "input_layernorm.weight")},
        "attn": {k: lin(f"self_attn.{k}_proj") for k in "qkvo"} | (
            {f"{k}_norm": {"scale": take(pre + f"self_attn.{k}_norm.weight")} for k in "qk"}
            if cfg.qk_norm else {}),
        "mlp_norm": {"scale": take(pre + "post_attention_layernorm.weight")},
        "mlp": {k: lin(f"mlp.{k}_proj") for k in ("gate", "up", "down")},
    })
  params["layers"] = layers
  params["final_norm"] = {"scale": take("norm.weight")}
  return params


def params_from_hf(tensors: dict[str, np.ndarray], cfg: ModelConfig, source: str) -> dict:
  """Builds the specjax parameter pytree (numpy leaves) from HF tensor names."""
  tensors = _strip_prefixes(tensors)
  take = _Take(tensors, source)
  params = _gpt2_params(take, cfg) if cfg.is_gpt2 else _llama_params(take, cfg)
  if not cfg.tie_embeddings:
    params["lm_head"] = {"kernel": take("lm_head.weight").T}
  check_shapes(params, cfg, source)
  return params


def check_shapes(params: dict, cfg: ModelConfig, source: str) -> None:
  """Fails early (with the source named) when weights and config disagree."""
  expect = {"embed": (cfg.vocab_size, cfg.d_model),
            "q": (cfg.d_model, cfg.n_heads * cfg.head_dim),
            "k": (cfg.d_model, cfg.n_kv_heads * cfg.head_dim),
            "down_or_proj": (cfg.d_ff, cfg.d_model)}
  layer = params["layers"][0]
  got = {"embed": params["embed"].shape, "q": layer["attn"]["q"]["kernel"].shape,
         "k": layer["attn"]["k"]["kernel"].shape,
         "down_or_proj": layer["mlp"]["proj" if cfg.is_gpt2 else "down"]["kernel"].shape}
  bad = {k: (got[k], v) for k, v in expect.items() if tuple(got[k]) != v}
  if bad or len(params["layers"]) != cfg.n_layers:
    raise LoadError(f"{source}: weight shapes do not match the config "
                    f"(name: (found, expected)) {bad}; the checkpoint is inconsistent.")


def load_hf_dir(directory: str, source: str, lazy: bool = False) -> tuple[ModelConfig, dict, dict]:
  """(cfg, numpy params, config.json dict) of a local Hugging Face model directory.

  lazy: the params are `TensorView`s into the files (for placement shard by shard)."""
  path = os.path.join(directory, "config.json")
  if not os.path.isfile(path):
    raise LoadError(f"{source}: no config.json in {directory}; expected a Hugging Face model "
                    "directory (config.json + *.safetensors) or a .gguf file.")
  hf = read_json(path, source)
  cfg = config_from_hf(hf, source)
  files = weight_files(directory, source)
  tensors = open_safetensors(files, source) if lazy else read_safetensors(files, source)
  return cfg, params_from_hf(tensors, cfg, source), hf
