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

Kernels are stored [in, out] so a layer is `x @ kernel (+ bias)`. This canonical layout
is what training, checkpoints and the Hugging Face export read and write. `PARAM_AXES`
below declares the logical axis of each leaf that a mesh may split (vocab, heads,
kv_heads, mlp); `specjax.parallel` maps them to mesh axes and places the params.

Loading a model for inference on one device (`specjax.load_model` without a mesh) adds a
derived layout under one more key, never read by training, export or sharding:

    "inference": {"layers": [ {"attn": {"qkv_t": [H*E + 2*K*E, D], "qkv_bias"?, "o_t": [D, H*E]},
                               "mlp": {"gate_up_t": [2F, D], "down_t": [D, F]} (Llama)
                                    | {"fc_t": [F, D], "proj_t": [D, F]} (GPT-2)} ] * L,
                  "head_t": [V, D] (untied heads only; a tied head reads "embed")}

the layer weights transposed to [out, in] and fused (q/k/v, gate/up), so that a decode
step reads each weight as contiguous rows (`transformer.matmul_t`), and an untied head
transposed to the [V, D] layout a tied one has in its embedding (`transformer.full_head`).
`canonical(params)` drops it again.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.models.config import ModelConfig
from specjax.parallel import ParamAxes

# Logical axes of the leaves above, by the keys that end a leaf's path (so every layer,
# a draft's own blocks and optimizer moments that mirror the params match). Undeclared
# leaves (norms, pos_embed, q/k norms, o/proj/down biases, a feature draft's fc and
# fc_layers, head_vocab, Medusa heads) are replicated. "inference" is derived for one
# device and dropped before placement (`canonical`). On a "model" axis wider than the kv
# heads, "kv_heads" dimensions are repeated; a "vocab" one it does not divide is zero-padded
# (`parallel.widen_params`); "vocab_subset" (a reduced head's ids) is split but never padded.
PARAM_AXES = ParamAxes(tree={
    "embed": ("vocab", None),                                          # [V, D]
    "lm_head": {"kernel": (None, "vocab")},                            # [D, V]
    "head_kernel": (None, "vocab_subset"),                             # [D, V'], never padded
    "attn": {"q": {"kernel": (None, "heads"), "bias": ("heads",)},     # [D, H*E]
             "k": {"kernel": (None, "kv_heads"), "bias": ("kv_heads",)},  # [D, K*E]
             "v": {"kernel": (None, "kv_heads"), "bias": ("kv_heads",)},
             "o": {"kernel": ("heads", None)}},                        # [H*E, D]
    "mlp": {"gate": {"kernel": (None, "mlp"), "bias": ("mlp",)},      # [D, F]
            "up": {"kernel": (None, "mlp"), "bias": ("mlp",)},
            "fc": {"kernel": (None, "mlp"), "bias": ("mlp",)},
            "down": {"kernel": ("mlp", None)}, "proj": {"kernel": ("mlp", None)}},  # [F, D]
}, derived=("inference",))


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


def inference_layout(params: dict, cfg: ModelConfig) -> dict:
  """params plus the derived "inference" entry described above (a copy of the layer weights)."""
  if "inference" in params or "layers" not in params:
    return params
  t = lambda w: jnp.asarray(w).T
  layers = []
  for lp in params["layers"]:
    a, m = lp["attn"], lp["mlp"]
    attn = {"qkv_t": t(jnp.concatenate([a["q"]["kernel"], a["k"]["kernel"], a["v"]["kernel"]], 1)),
            "o_t": t(a["o"]["kernel"])}
    if "bias" in a["q"]:
      attn["qkv_bias"] = jnp.concatenate([a["q"]["bias"], a["k"]["bias"], a["v"]["bias"]])
    if cfg.is_gpt2:
      mlp = {"fc_t": t(m["fc"]["kernel"]), "proj_t": t(m["proj"]["kernel"])}
    else:
      mlp = {"gate_up_t": t(jnp.concatenate([m["gate"]["kernel"], m["up"]["kernel"]], 1)),
             "down_t": t(m["down"]["kernel"])}
    layers.append({"attn": attn, "mlp": mlp})
  extra = {"layers": layers}
  if not cfg.tie_embeddings and "lm_head" in params:
    extra["head_t"] = t(params["lm_head"]["kernel"])
  return {**params, "inference": extra}


def canonical(params: dict) -> dict:
  """params without the derived inference layout (what training and export take)."""
  return PARAM_AXES.strip(params)
