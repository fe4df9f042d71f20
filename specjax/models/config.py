"""Static model configuration shared by every decoder family.

`ModelConfig` is frozen and hashable, so it is passed as a static argument under
`jax.jit`; tiny test variants are made with `dataclasses.replace`.

RoPE scaling (`rope_type`) follows transformers' `modeling_rope_utils`:
  "default": inv_freq_i = theta^(-2i/E);
  "linear":  inv_freq / rope_factor (position interpolation);
  "llama3":  Llama-3.1's banded rescaling (wavelengths longer than
             original_max / low_freq_factor divided by the factor, shorter than
             original_max / high_freq_factor kept, smooth in between);
  "dynamic": dynamic NTK, which equals "default" up to the trained context; the loader
             caps `max_positions` there, so it never rescales;
  "factors": per-frequency divisors given as a tuple (`rope_freq_factors`), as GGUF
             files store Llama-3 scaling (llama.cpp's `rope_freqs.weight`).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

FAMILIES = ("gpt2", "llama")
ROPE_TYPES = ("default", "linear", "llama3", "dynamic", "factors")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture hyper-parameters of one decoder-only transformer.

  family: "gpt2" (learned positions, LayerNorm, GELU, tied head) or "llama"
    (RMSNorm, RoPE, SwiGLU, grouped-query attention; Qwen2 adds q/k/v bias, Qwen3 a
    per-head RMSNorm of q and k (`qk_norm`), Mistral a sliding window).
  sliding_window: 0 (none) or the attention window W; specjax runs such a model only
    while every sequence fits the window (cache length <= W), where the window is a no-op.
  """
  family: str
  vocab_size: int
  d_model: int
  n_layers: int
  n_heads: int
  n_kv_heads: int
  head_dim: int
  d_ff: int
  max_positions: int = 2048
  norm_eps: float = 1e-5
  rope_theta: float = 10000.0
  tie_embeddings: bool = True
  qkv_bias: bool = False
  qk_norm: bool = False
  sliding_window: int = 0
  rope_type: str = "default"
  rope_factor: float = 1.0
  rope_low_freq_factor: float = 1.0
  rope_high_freq_factor: float = 4.0
  rope_original_max_positions: int = 0
  rope_freq_factors: tuple = ()

  def __post_init__(self):
    if self.family not in FAMILIES:
      raise ValueError(f"Unknown model family {self.family!r}; expected one of {FAMILIES}.")
    if self.n_heads % self.n_kv_heads:
      raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}.")
    if self.rope_type not in ROPE_TYPES:
      raise ValueError(f"Unknown rope scaling type {self.rope_type!r}; specjax implements "
                       f"{ROPE_TYPES}.")
    if self.rope_type == "factors" and len(self.rope_freq_factors) != self.head_dim // 2:
      raise ValueError(f"rope_freq_factors has {len(self.rope_freq_factors)} entries; "
                       f"head_dim {self.head_dim} needs {self.head_dim // 2}.")

  @property
  def is_gpt2(self) -> bool:
    return self.family == "gpt2"

  def rope_inv_freq(self) -> np.ndarray:
    """[E/2] float32 inverse frequencies after scaling (a compile-time constant)."""
    e = self.head_dim
    inv = (1.0 / (np.float32(self.rope_theta) ** (np.arange(0, e, 2, dtype=np.float32) / e)))
    inv = inv.astype(np.float32)
    if self.rope_type == "linear":
      inv = inv / np.float32(self.rope_factor)
    elif self.rope_type == "factors":
      inv = inv / np.asarray(self.rope_freq_factors, np.float32)
    elif self.rope_type == "llama3":
      factor, old = self.rope_factor, self.rope_original_max_positions
      low_wavelen = old / self.rope_low_freq_factor
      high_wavelen = old / self.rope_high_freq_factor
      wavelen = 2 * math.pi / inv
      scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
      smooth = (old / wavelen - self.rope_low_freq_factor) / (
          self.rope_high_freq_factor - self.rope_low_freq_factor)
      smoothed = (1 - smooth) * scaled / factor + smooth * scaled
      medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
      inv = np.where(medium, smoothed, scaled)
    return np.asarray(inv, np.float32)

  def check_window(self, length: int) -> None:
    """Raises when a sequence/cache of `length` slots exceeds the sliding window."""
    if self.sliding_window and length > self.sliding_window:
      raise ValueError(
          f"This model uses sliding-window attention (window {self.sliding_window}) and "
          f"specjax runs it only while the whole sequence fits the window, but {length} "
          f"slots were asked for; keep prompt + new tokens within {self.sliding_window}.")

  @property
  def num_params(self) -> int:
    """Parameter count implied by the config (embeddings counted once when tied)."""
    d, f, l = self.d_model, self.d_ff, self.n_layers
    qkv = d * (self.n_heads + 2 * self.n_kv_heads) * self.head_dim
    attn = qkv + self.n_heads * self.head_dim * d
    mlp = (2 if self.is_gpt2 else 3) * d * f
    emb = self.vocab_size * d * (1 if self.tie_embeddings else 2)
    pos = self.max_positions * d if self.is_gpt2 else 0
    return l * (attn + mlp) + emb + pos
