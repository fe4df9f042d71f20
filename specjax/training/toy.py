"""A toy target a small draft can learn, for tests and the tiny config.

The target is a tiny Llama with peaked next-token distributions (large random
weights); the default toy draft has the same width and shares its embeddings, so
it can represent the target exactly and distillation must drive alpha up.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import numpy as np

from specjax.models import ModelConfig, init_params


@dataclasses.dataclass
class ToyModel:
  """The fields of `specjax.loading.Model` that training and decoding read."""
  name: str
  cfg: ModelConfig
  params: dict
  tokenizer: Optional[object] = None
  eos_ids: tuple = ()
  bos_id: Optional[int] = None


def toy_target(seed: int = 0, vocab_size: int = 64, d_model: int = 32, n_layers: int = 1,
               n_heads: int = 4, n_kv_heads: int = 2, d_ff: int = 64, std: float = 0.5,
               attn_scale: float = 0.0, max_positions: int = 256) -> ToyModel:
  """Mostly a random bigram map (a wide-weight MLP on the current token) plus a weak
  attention term (output projection scaled by attn_scale), so one layer can learn it."""
  cfg = ModelConfig(family="llama", vocab_size=vocab_size, d_model=d_model, n_layers=n_layers,
                    n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=d_model // n_heads,
                    d_ff=d_ff, max_positions=max_positions)
  params = init_params(cfg, jax.random.PRNGKey(seed), std=std)
  for layer in params["layers"]:
    layer["attn"]["o"]["kernel"] = layer["attn"]["o"]["kernel"] * attn_scale
  return ToyModel(name="toy-target", cfg=cfg, params=params, eos_ids=(vocab_size - 1,))


def toy_prompts(n: int, seed: int, vocab_size: int, min_len: int = 3, max_len: int = 10) -> list:
  """n random prompts of token ids in [1, vocab_size - 1) (no EOS inside)."""
  rng = np.random.default_rng(seed)
  return [rng.integers(1, vocab_size - 1, size=int(rng.integers(min_len, max_len + 1))).tolist()
          for _ in range(n)]
