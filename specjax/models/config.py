"""Static model configuration shared by every decoder family.

`ModelConfig` is frozen and hashable, so it is passed as a static argument under
`jax.jit`; tiny test variants are made with `dataclasses.replace`.
"""
from __future__ import annotations

import dataclasses

FAMILIES = ("gpt2", "llama")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture hyper-parameters of one decoder-only transformer.

  family: "gpt2" (learned positions, LayerNorm, GELU, tied head) or "llama"
    (RMSNorm, RoPE, SwiGLU, grouped-query attention; Qwen2 adds q/k/v bias).
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

  def __post_init__(self):
    if self.family not in FAMILIES:
      raise ValueError(f"Unknown model family {self.family!r}; expected one of {FAMILIES}.")
    if self.n_heads % self.n_kv_heads:
      raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}.")

  @property
  def is_gpt2(self) -> bool:
    return self.family == "gpt2"

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
