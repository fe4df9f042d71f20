"""The EAGLE-3 draft (Li et al., 2025) as published: vllm-project/speculators' Eagle3DraftModel
and the EAGLE authors' / SpecForge `LlamaForCausalLMEagle3`.

Axes: B batch, T positions, S cache slots, A aux layers, Dt target width, D draft width,
V target vocabulary, Vd draft vocabulary.

The draft reads the target's *auxiliary hidden states*: for each aux layer id a, the
input of target layer a (the output of layer a - 1; a = L is the last layer's output,
before the final norm), as vLLM's `aux_hidden_state_layers` and speculators'
`eagle_aux_hidden_state_layer_ids` define them (Llama-3 default {2, L/2, L-3}).
specjax's `collect` indexes layer outputs, so the draft reads `feature_layers` = a - 1
(-1: the embeddings). At position j the draft pairs token j + 1 with the aux states of
position j (speculators' `shift_batch`) and predicts token j + 2:

    g = fc(concat aux)                                  # [B, T, A*Dt] -> [B, T, D]
    layer 0 (the "midlayer"):
      x = concat(input_layernorm(embed(token)), hidden_norm(g))   # [B, T, 2D]
      h = (norm_before_residual ? hidden_norm(g) : g) + attn(x)  # q/k/v project from 2D
      h = h + mlp(post_attention_layernorm(h))
    layers 1.. (speculators' num_hidden_layers > 1): plain decoder layers
    logits = lm_head(norm(h))                           # [B, T, Vd] -> target ids by d2t

Later draft steps feed back the draft's own h (norm(h) with `norm_output`, Eagle 3.1) in
place of g. speculators' variants: `norm_before_fc` (one RMSNorm over the concatenated
aux states), `fc_norm` (an RMSNorm per aux state). Embeddings are the target's.

Params:
    {"embed": [V, D], "fc": {"kernel": [A*Dt, D]},
     "input_norm": {"scale": [A*Dt]} (norm_before_fc), "fc_norm": [{"scale": [Dt]}] * A (fc_norm),
     "layers": [{"attn_norm", "hidden_norm" (layer 0 only), "attn": {"q","k","v": [2D or D, .],
                 "o", "q_norm"/"k_norm" (Qwen3)}, "mlp_norm", "mlp": {"gate","up","down"}}],
     "final_norm": {"scale": [D]}, "lm_head": {"kernel": [D, Vd]},
     "draft_ids": [Vd] int32 (the target id of each draft id; absent when Vd = V)}
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from specjax.models import draft_vocab
from specjax.models.cache import KVCache, write_keys, write_values
from specjax.models.config import ModelConfig
from specjax.models.transformer import (attend, cached_attention, mlp, norm, out_proj,
                                        positions_for, project_qkv)


@dataclasses.dataclass(frozen=True)
class Eagle3Config:
  """Static config of an EAGLE-3 draft.

  layer: the draft's decoder layers (llama family, `qk_norm` for a Qwen3 layer config;
    vocab_size is the target's, d_model the draft's width D, n_layers its depth).
  aux_layers: EAGLE-3 aux layer ids (inputs of those target layers), as the checkpoint names them.
  target_d_model: the target's width Dt (fc reads A * Dt).
  """
  layer: ModelConfig
  aux_layers: tuple
  target_d_model: int
  draft_vocab_size: int
  norm_before_residual: bool = False
  norm_before_fc: bool = False
  fc_norm: bool = False
  norm_output: bool = False

  @property
  def feature_layers(self) -> tuple:
    """The target layer outputs (`collect` indices) holding the aux states: a - 1."""
    return tuple(int(a) - 1 for a in self.aux_layers)

  @property
  def vocab_size(self) -> int:
    return self.layer.vocab_size

  @property
  def d_model(self) -> int:
    return self.layer.d_model


def _rms(x: jax.Array, scale: jax.Array, eps: float) -> jax.Array:
  xf = x.astype(jnp.float32)
  return (xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + eps) * scale).astype(x.dtype)


def fuse(params: dict, cfg: Eagle3Config, aux: jax.Array) -> jax.Array:
  """The target's aux states concatenated [B, T, A*Dt] -> the draft's hidden g [B, T, D]."""
  eps = cfg.layer.norm_eps
  if cfg.norm_before_fc:
    aux = _rms(aux, params["input_norm"]["scale"], eps)
  if cfg.fc_norm:
    parts = jnp.split(aux, len(params["fc_norm"]), axis=-1)
    aux = jnp.concatenate([_rms(x, p["scale"], eps) for x, p in zip(parts, params["fc_norm"])], -1)
  return aux.astype(params["fc"]["kernel"].dtype) @ params["fc"]["kernel"]


def _attention(p: dict, cfg: ModelConfig, x, positions, layer_kv, lengths, mask):
  """Self-attention of x [B, T, 2D or D] (already normed) -> ([B, T, D], layer (k, v))."""
  q, k, v = project_qkv(p, cfg, x, positions)
  if layer_kv is None:  # cache-free: keys are these positions (mask default causal)
    if mask is None:
      mask = jnp.arange(x.shape[1])[None, None, :] <= positions[:, :, None]
    return attend(p, cfg, q, k, v, mask), None
  if mask is not None:  # a token tree: dense over the cache under the mask
    keys, values = write_keys(layer_kv[0], k, lengths), write_values(layer_kv[1], v, lengths)
    return attend(p, cfg, q, keys, values, mask, cache_layout=True), (keys, values)
  y, layer_kv = cached_attention(q, k, v, layer_kv, positions, lengths)
  return out_proj(p, y), layer_kv


def _layer_input(p: dict, cfg: Eagle3Config, i: int, x: jax.Array, e: jax.Array):
  """Layer i's attention input and residual: layer 0 (EAGLE-3's) attends over
  [input_layernorm(embedding); hidden_norm(x)] [B, T, 2D], its residual x (or
  hidden_norm(x) with norm_before_residual); later layers are plain pre-norm blocks."""
  if i > 0:
    return norm(p["attn_norm"], cfg.layer, x), x
  g = norm(p["hidden_norm"], cfg.layer, x)
  inp = jnp.concatenate([norm(p["attn_norm"], cfg.layer, e), g], axis=-1)  # [B, T, 2D]
  return inp, (g if cfg.norm_before_residual else x)


def forward(params: dict, cfg: Eagle3Config, hidden: jax.Array, tokens: jax.Array,
            cache: Optional[KVCache] = None, positions: Optional[jax.Array] = None,
            mask: Optional[jax.Array] = None):
  """hidden [B, T, D] (fc'd aux states `fuse`, or the draft's own fed-back h), tokens [B, T]
  -> (h [B, T, D] before the final norm, cache advanced by T).
  positions [B, T] (default: after the cache's lengths) and mask [B, T, S] as in
  `transformer.forward_hidden` (token trees); without a cache, mask [B or 1, T, T]."""
  lc = cfg.layer
  if positions is None:
    positions = positions_for(cache, *tokens.shape)
  lengths = None if cache is None else cache.lengths
  e = params["embed"][tokens].astype(hidden.dtype)  # [B, T, D]
  x, new_k, new_v = hidden, [], []
  for i, p in enumerate(params["layers"]):
    layer_kv = None if cache is None else (cache.k[i], cache.v[i])
    inp, resid = _layer_input(p, cfg, i, x, e)
    y, layer_kv = _attention(p["attn"], lc, inp, positions, layer_kv, lengths, mask)
    x = resid + y
    x = x + mlp(p["mlp"], lc, norm(p["mlp_norm"], lc, x))
    if cache is not None:
      new_k.append(layer_kv[0])
      new_v.append(layer_kv[1])
  if cache is not None:
    cache = cache.replace(k=tuple(new_k), v=tuple(new_v), lengths=cache.lengths + tokens.shape[1])
  return x, cache


def feedback(params: dict, cfg: Eagle3Config, h: jax.Array) -> jax.Array:
  """What the next draft step reads in place of g: h, or norm(h) with `norm_output`."""
  return norm(params["final_norm"], cfg.layer, h) if cfg.norm_output else h


def draft_logits(params: dict, cfg: Eagle3Config, h: jax.Array) -> jax.Array:
  """h [B, T, D] -> float32 logits over the draft vocabulary [B, T, Vd]."""
  return (norm(params["final_norm"], cfg.layer, h) @ params["lm_head"]["kernel"]).astype(jnp.float32)


def logits(params: dict, cfg: Eagle3Config, h: jax.Array) -> jax.Array:
  """h [B, T, D] -> float32 logits over the target vocabulary [B, T, V]; ids outside the
  draft vocabulary get the float32 minimum (q = 0 after the warp)."""
  out = draft_logits(params, cfg, h)
  if "draft_ids" not in params:
    return out
  return draft_vocab.to_target_logits(out, params["draft_ids"], cfg.vocab_size)


def init_cache(params: dict, cfg: Eagle3Config, batch: int, max_len: int) -> KVCache:
  return KVCache.init(cfg.layer, batch, max_len, params["fc"]["kernel"].dtype)


def unrolled(params: dict, cfg: Eagle3Config, aux: jax.Array, tokens: jax.Array,
             steps: int) -> list:
  """Cache-free training forward with the training-time test, as speculators runs it:
  aux [B, T, A*Dt] the target's aux states at positions 0..T-1, tokens [B, T] the tokens
  at 1..T. Step 0 is `forward` over fuse(aux); step s reads, at position i, step s-1's
  h (`feedback`) and token i + 1 + s (teacher-forced; 0 past the end) at position i + s,
  attending step 0's entries at <= i and each later step's entry at i: what the draft's
  cache holds at its s-th drafting step. Returns [h of step 0 .. steps-1], each [B, T, D]."""
  b, t = tokens.shape
  lc = cfg.layer
  pos0 = positions_for(None, b, t)
  i = jnp.arange(t)
  kv = [[] for _ in params["layers"]]  # per layer: (k, v) of each step so far
  outs, hidden = [], fuse(params, cfg, aux)
  for s in range(steps):
    toks = jnp.concatenate([tokens[:, s:], jnp.zeros((b, s), tokens.dtype)], axis=1)
    positions = pos0 + s
    mask = jnp.concatenate([i[None, :] <= i[:, None]] +
                           [i[None, :] == i[:, None]] * s, axis=1)[None]  # [1, T, (s+1)T]
    e = params["embed"][toks].astype(hidden.dtype)
    x = hidden
    for layer, p in enumerate(params["layers"]):
      inp, resid = _layer_input(p, cfg, layer, x, e)
      q, k, v = project_qkv(p["attn"], lc, inp, positions)
      kv[layer].append((k, v))
      keys = jnp.concatenate([kk for kk, _ in kv[layer]], axis=1)
      values = jnp.concatenate([vv for _, vv in kv[layer]], axis=1)
      x = resid + attend(p["attn"], lc, q, keys, values, mask)
      x = x + mlp(p["mlp"], lc, norm(p["mlp_norm"], lc, x))
    outs.append(x)
    hidden = feedback(params, cfg, x)
  return outs


def init_params(cfg: Eagle3Config, key: jax.Array, embed: jax.Array, std: float = 0.02,
                draft_ids: Optional[jax.Array] = None, dtype=jnp.float32) -> dict:
  """Random params in the layout above (N(0, std) kernels, unit norms), sharing `embed`
  [V, D] (the target's); draft_ids [Vd]: the draft vocabulary's target ids (None: all)."""
  lc, d, e = cfg.layer, cfg.d_model, cfg.layer.head_dim
  a = len(cfg.aux_layers)
  keys = iter(jax.random.split(key, 4 + 7 * lc.n_layers))
  dense = lambda i, o: {"kernel": (std * jax.random.normal(next(keys), (i, o))).astype(dtype)}
  ones = lambda n: {"scale": jnp.ones((n,), dtype)}
  params = {"embed": embed.astype(dtype), "fc": dense(a * cfg.target_d_model, d),
            "final_norm": ones(d), "lm_head": dense(d, cfg.draft_vocab_size)}
  if cfg.norm_before_fc:
    params["input_norm"] = ones(a * cfg.target_d_model)
  if cfg.fc_norm:
    params["fc_norm"] = [ones(cfg.target_d_model) for _ in range(a)]
  layers = []
  for i in range(lc.n_layers):
    width = 2 * d if i == 0 else d
    attn = {"q": dense(width, lc.n_heads * e), "k": dense(width, lc.n_kv_heads * e),
            "v": dense(width, lc.n_kv_heads * e), "o": dense(lc.n_heads * e, d)}
    if lc.qk_norm:
      attn.update(q_norm=ones(e), k_norm=ones(e))
    layer = {"attn_norm": ones(d), "attn": attn, "mlp_norm": ones(d),
             "mlp": {"gate": dense(d, lc.d_ff), "up": dense(d, lc.d_ff), "down": dense(lc.d_ff, d)}}
    if i == 0:
      layer["hidden_norm"] = ones(d)
    layers.append(layer)
  params["layers"] = layers
  if draft_ids is not None:
    params["draft_ids"] = jnp.asarray(draft_ids, jnp.int32)
  return params
