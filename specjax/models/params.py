"""Parameter pytree layout and random initialisation.

    {"embed": [V, D], "pos_embed": [P, D] (GPT-2 only),
     "layers": [ {"attn_norm": {"scale", "bias"?},
                  "attn": {"q", "k", "v", "o": {"kernel": [in, out], "bias"?},
                           "q_norm", "k_norm": {"scale": [E]} (qk_norm only, Qwen3)},
                  "mlp_norm": {...},
                  "mlp": {"fc", "proj"} (GPT-2) | {"gate", "up", "down"} (Llama)} ] * L,
     "final_norm": {...}, "lm_head": {"kernel": [D, V]} (untied only),
     "head_vocab": [V'] int32 (optional: a reduced output vocabulary, FR-Spec style drafts),
     "head_kernel": [D, V'] (optional: those head columns gathered once, for inference)}

Kernels are stored [in, out] so a layer is `x @ kernel (+ bias)`. Sharding (which
axis of each leaf is split over the mesh's "model" axis) is in `specjax.models.sharding`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.models.config import ModelConfig


def _norm(cfg: ModelConfig, dtype) -> dict:
  p = {"scale": jnp.ones((cfg.d_model,), dtype)}
  if cfg.is_gpt2:
    p["bias"] = jnp.zeros((cfg.d_model,), dtype)
  return p


def _dense(key, n_in: int, n_out: int, bias: bool, dtype, std: float = 0.02) -> dict:
  p = {"kernel": (std * jax.random.normal(key, (n_in, n_out))).astype(dtype)}
  if bias:
    p["bias"] = jnp.zeros((n_out,), dtype)
  return p


def init_params(cfg: ModelConfig, key: jax.Array, dtype=jnp.float32, std: float = 0.02) -> dict:
  """Random parameters in the layout above (GPT-2 style N(0, std) init)."""
  d, e = cfg.d_model, cfg.head_dim
  keys = jax.random.split(key, cfg.n_layers + 3)
  params = {"embed": (std * jax.random.normal(keys[0], (cfg.vocab_size, d))).astype(dtype)}
  if cfg.is_gpt2:
    params["pos_embed"] = (std * jax.random.normal(keys[1], (cfg.max_positions, d))).astype(dtype)
  layers = []
  for i in range(cfg.n_layers):
    k = jax.random.split(keys[3 + i], 7)
    qkv_bias = cfg.qkv_bias or cfg.is_gpt2
    attn = {
        "q": _dense(k[0], d, cfg.n_heads * e, qkv_bias, dtype, std),
        "k": _dense(k[1], d, cfg.n_kv_heads * e, qkv_bias, dtype, std),
        "v": _dense(k[2], d, cfg.n_kv_heads * e, qkv_bias, dtype, std),
        "o": _dense(k[3], cfg.n_heads * e, d, cfg.is_gpt2, dtype, std),
    }
    if cfg.qk_norm:
      attn["q_norm"] = {"scale": jnp.ones((e,), dtype)}
      attn["k_norm"] = {"scale": jnp.ones((e,), dtype)}
    if cfg.is_gpt2:
      mlp = {"fc": _dense(k[4], d, cfg.d_ff, True, dtype, std),
             "proj": _dense(k[5], cfg.d_ff, d, True, dtype, std)}
    else:
      mlp = {"gate": _dense(k[4], d, cfg.d_ff, False, dtype, std),
             "up": _dense(k[5], d, cfg.d_ff, False, dtype, std),
             "down": _dense(k[6], cfg.d_ff, d, False, dtype, std)}
    layers.append({"attn_norm": _norm(cfg, dtype), "attn": attn,
                   "mlp_norm": _norm(cfg, dtype), "mlp": mlp})
  params["layers"] = layers
  params["final_norm"] = _norm(cfg, dtype)
  if not cfg.tie_embeddings:
    params["lm_head"] = _dense(keys[2], d, cfg.vocab_size, False, dtype, std)
  return params


def cast(params: dict, dtype) -> dict:
  """Casts every floating leaf to dtype."""
  return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                      params)
