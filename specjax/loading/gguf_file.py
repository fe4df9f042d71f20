"""GGUF files (llama.cpp format) -> (ModelConfig, params, metadata), read with `gguf`.

Tensors are dequantized to float32 with `gguf.dequantize`. Numpy views of GGUF
matrices are [out, in] (like torch `nn.Linear`), so they are transposed into the
[in, out] kernels of `specjax.models.params`.

llama.cpp's converter permutes the Q and K projections of the `llama` architecture
(rows regrouped for its interleaved-pair RoPE); that permutation is reversed here
exactly as transformers' GGUF loader does (`LlamaTensorProcessor._reverse_permute_weights`)
so the weights fit the Hugging Face `rotate_half` RoPE of `specjax.models.transformer`.
The `qwen2` and `qwen3` architectures are stored unpermuted (`qwen3` adds per-head
`attn_q_norm` / `attn_k_norm`); `gpt2` stores fused QKV.

RoPE scaling: llama.cpp writes Llama-3's `llama3` scaling as a `rope_freqs.weight`
tensor of per-frequency divisors (no metadata), read here as `rope_type="factors"`;
`{arch}.rope.scaling.type` "linear" carries `{arch}.rope.scaling.factor`; any other
scaling type is refused. `{arch}.attention.sliding_window` sets the window.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from specjax.errors import LoadError
from specjax.loading.hf import check_shapes
from specjax.models.config import ModelConfig

if TYPE_CHECKING:  # annotation only: gguf is imported when a file is read
  import gguf

ARCHITECTURES = ("llama", "qwen2", "qwen3", "gpt2")


def _reader_class():
  """`gguf.GGUFReader` over a plain ndarray view of its memmap.

  The stock reader slices an `np.memmap` for each of the ~100k vocabulary strings and
  merges, and memmap slicing overhead makes that 3x slower (6 s vs 2 s for SmolLM2);
  the plain view maps the same file pages.
  """
  import gguf  # local: only needed for GGUF sources

  class Reader(gguf.GGUFReader):
    @property
    def data(self):
      return self._plain

    @data.setter
    def data(self, value):
      self._plain = np.asarray(value)

  return Reader


def read_gguf(path: str, source: str) -> "gguf.GGUFReader":
  """Opens a GGUF file (memory-mapped), turning parse failures into LoadError."""
  try:
    return _reader_class()(path)
  except Exception as e:  # the reader raises ValueError, struct/IndexError... on bad files
    raise LoadError(f"{source}: not a readable GGUF file ({type(e).__name__}: {e}); "
                    "the file is corrupt or truncated - re-download it.") from e


def metadata(reader) -> dict[str, Any]:
  """All key/value fields as python values (strings, numbers, lists)."""
  out = {}
  for key, field in reader.fields.items():
    try:
      out[key] = field.contents()
    except Exception:  # exotic field types are not needed for loading
      continue
  return out


def _get(meta: dict, key: str, source: str, default: Any = None) -> Any:
  if key in meta:
    return meta[key]
  if default is not None:
    return default
  raise LoadError(f"{source}: GGUF metadata lacks {key!r}; the file is incomplete.")


def _f32(x) -> float:
  """A float32 metadata value as the shortest decimal that round-trips (1e-05, not
  9.999999747378752e-06), so configs match the config.json they were converted from."""
  return float(np.format_float_positional(np.float32(x), unique=True, trim="-"))


def _rope_fields(meta: dict, arch: str, tensors: dict, head_dim: int, source: str) -> dict:
  """ModelConfig RoPE fields from `{arch}.rope.*` metadata and a `rope_freqs` tensor."""
  out = {"rope_theta": _f32(meta.get(f"{arch}.rope.freq_base", 10000.0))}
  scaling = meta.get(f"{arch}.rope.scaling.type", "none")
  if scaling == "linear":
    out.update(rope_type="linear", rope_factor=_f32(meta[f"{arch}.rope.scaling.factor"]))
  elif scaling not in ("none", None):
    raise LoadError(f"{source}: rope scaling {scaling!r} is not supported (specjax implements "
                    "plain, linear and Llama-3 (rope_freqs) RoPE); use another file.")
  if "rope_freqs.weight" in tensors:
    factors = np.asarray(tensors["rope_freqs.weight"], np.float32).reshape(-1)
    if out.get("rope_type"):
      raise LoadError(f"{source}: both rope_freqs and {scaling!r} scaling are set; "
                      "the file is inconsistent.")
    out.update(rope_type="factors", rope_freq_factors=tuple(float(f) for f in factors))
  return out


def config_from_gguf(meta: dict, tensor_shapes: dict[str, tuple], source: str,
                     tensors: Optional[dict] = None) -> ModelConfig:
  """ModelConfig from `{arch}.*` metadata; refuses unknown rope scaling and partial rotary.

  tensors: the dequantized tensors, needed only for a `rope_freqs.weight` (Llama-3).
  """
  arch = meta.get("general.architecture")
  if arch not in ARCHITECTURES:
    raise LoadError(f"{source}: unsupported GGUF architecture {arch!r}; specjax loads "
                    f"{', '.join(ARCHITECTURES)} GGUF files.")
  g = lambda key, default=None: _get(meta, f"{arch}.{key}", source, default)
  d, h = int(g("embedding_length")), int(g("attention.head_count"))
  kv = int(meta.get(f"{arch}.attention.head_count_kv", h))
  head_dim = int(meta.get(f"{arch}.attention.key_length", d // h))
  rot = meta.get(f"{arch}.rope.dimension_count")
  if arch != "gpt2" and rot is not None and int(rot) != head_dim:
    raise LoadError(f"{source}: partial rotary embeddings (rope dims {rot} < head dim "
                    f"{head_dim}) are not supported.")
  vocab = tensor_shapes["token_embd.weight"][0]
  eps_key = "attention.layer_norm_epsilon" if arch == "gpt2" else "attention.layer_norm_rms_epsilon"
  rope = {} if arch == "gpt2" else _rope_fields(
      meta, arch, tensors if tensors is not None else {}, head_dim, source)
  return ModelConfig(
      family="gpt2" if arch == "gpt2" else "llama", vocab_size=int(vocab), d_model=d,
      n_layers=int(g("block_count")), n_heads=h, n_kv_heads=kv, head_dim=head_dim,
      d_ff=int(g("feed_forward_length")), max_positions=int(g("context_length", 2048)),
      norm_eps=_f32(g(eps_key, 1e-5)), tie_embeddings="output.weight" not in tensor_shapes,
      qkv_bias=arch in ("qwen2", "gpt2") or "blk.0.attn_q.bias" in tensor_shapes,
      qk_norm="blk.0.attn_q_norm.weight" in tensor_shapes,
      sliding_window=int(meta.get(f"{arch}.attention.sliding_window") or 0), **rope)


def reverse_permute(w: np.ndarray, n_head: int) -> np.ndarray:
  """Undoes llama.cpp's Q/K row permutation (rows [n_head * E] , any trailing dims).

  llama.cpp stores each head's rows as interleaved (even, odd) pairs; the HF layout
  has the first half then the second half of each head. Same as transformers.
  """
  e2 = w.shape[0] // n_head // 2
  return w.reshape(n_head, e2, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def _dequantized(reader, source: str) -> dict[str, np.ndarray]:
  import gguf
  out = {}
  for t in reader.tensors:
    try:
      out[t.name] = np.asarray(gguf.dequantize(t.data, t.tensor_type), np.float32)
    except NotImplementedError as e:
      raise LoadError(f"{source}: tensor {t.name} uses quantization {t.tensor_type.name}, "
                      "which gguf cannot dequantize; use another quantization.") from e
    except Exception as e:
      raise LoadError(f"{source}: cannot read tensor {t.name} ({type(e).__name__}: {e}); "
                      "the file is corrupt or truncated.") from e
  return out


def params_from_gguf(tensors: dict[str, np.ndarray], cfg: ModelConfig, arch: str,
                     source: str) -> dict:
  """Maps GGUF tensor names (`blk.{i}.attn_q.weight`, ...) onto the specjax pytree."""
  def take(name: str, optional: bool = False) -> Optional[np.ndarray]:
    if name in tensors:
      return tensors[name]
    if optional:
      return None
    raise LoadError(f"{source}: tensor {name!r} missing from the GGUF file.")

  def dense(name: str, permute_heads: int = 0) -> dict:
    w, b = take(name + ".weight"), take(name + ".bias", optional=True)
    if permute_heads:
      w = reverse_permute(w, permute_heads)
      b = None if b is None else reverse_permute(b, permute_heads)
    p = {"kernel": w.T}
    if b is not None:
      p["bias"] = b
    return p

  def norm(name: str) -> dict:
    p = {"scale": take(name + ".weight")}
    if cfg.is_gpt2:
      p["bias"] = take(name + ".bias")
    return p

  params = {"embed": take("token_embd.weight")}
  if cfg.is_gpt2:
    params["pos_embed"] = take("position_embd.weight")
  permute = arch == "llama"
  layers = []
  for i in range(cfg.n_layers):
    pre = f"blk.{i}."
    if cfg.is_gpt2:
      qkv = dense(pre + "attn_qkv")  # kernel [D, 3D]
      d = cfg.d_model
      attn = {n: {k: v[..., j * d:(j + 1) * d] for k, v in qkv.items()} for j, n in enumerate("qkv")}
      mlp = {"fc": dense(pre + "ffn_up"), "proj": dense(pre + "ffn_down")}
    else:
      attn = {"q": dense(pre + "attn_q", cfg.n_heads if permute else 0),
              "k": dense(pre + "attn_k", cfg.n_kv_heads if permute else 0),
              "v": dense(pre + "attn_v")}
      if cfg.qk_norm:
        attn.update(q_norm={"scale": take(pre + "attn_q_norm.weight")},
                    k_norm={"scale": take(pre + "attn_k_norm.weight")})
      mlp = {"gate": dense(pre + "ffn_gate"), "up": dense(pre + "ffn_up"),
             "down": dense(pre + "ffn_down")}
    attn["o"] = dense(pre + "attn_output")
    layers.append({"attn_norm": norm(pre + "attn_norm"), "attn": attn,
                   "mlp_norm": norm(pre + "ffn_norm"), "mlp": mlp})
  params["layers"] = layers
  params["final_norm"] = norm("output_norm")
  if not cfg.tie_embeddings:
    params["lm_head"] = {"kernel": take("output.weight").T}
  return params


def load_gguf(path: str, source: str) -> tuple[ModelConfig, dict, dict]:
  """(cfg, numpy params, metadata) of a GGUF file."""
  if not os.path.isfile(path):
    raise LoadError(f"{source}: GGUF file {path} does not exist.")
  reader = read_gguf(path, source)
  meta = metadata(reader)
  shapes = {t.name: tuple(int(s) for s in reversed(t.shape)) for t in reader.tensors}
  if "token_embd.weight" not in shapes:
    raise LoadError(f"{source}: GGUF file has no token_embd.weight tensor; not a language model.")
  tensors = _dequantized(reader, source)
  cfg = config_from_gguf(meta, shapes, source, tensors)
  params = params_from_gguf(tensors, cfg, meta["general.architecture"], source)
  check_shapes(params, cfg, source)
  return cfg, params, meta
