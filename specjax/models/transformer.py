"""Pure-functional decoder forward pass for the GPT-2 and Llama families.

Axes: B batch, T new tokens, S cache slots, D model width, H query heads,
K key/value heads, G = H // K heads per group, E head dim, F MLP width, V vocab.

One call serves prefill (T = prompt bucket), decode (T = 1) and verify (T = k + 1):

    logits, cache = forward(params, cfg, tokens, cache)

With `cache=None` it is a cache-free causal forward over the whole sequence
(training). Params are a plain pytree (see `specjax.models.params`).
"""
from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp

from specjax.models.cache import KEY_SLOTS, VALUE_SLOTS, KVCache, write_keys, write_values
from specjax.models.config import ModelConfig


def _dense(p: dict, x: jax.Array) -> jax.Array:
  y = x @ p["kernel"]
  return y + p["bias"] if "bias" in p else y


# One row (a decode step): with the weight stored [O, I] (`params.inference_layout`:
# transposed, q/k/v and gate/up fused) the product is XLA's streaming matrix-vector loop
# over contiguous rows, faster than the canonical [I, O] kernels. Two or more rows
# (verify passes, prefills, batches): the canonical kernels and XLA's GEMM, which
# measured faster for 2..33 rows than [O, I] products, plain or taken in row blocks
# inside a scan (experiments/pass_cost/README.md, measured back to back).
_T_LAYOUT_MAX_ROWS = 1


def _rows(x: jax.Array) -> int:
  rows = 1
  for n in x.shape[:-1]:
    rows *= n
  return rows


def _use_t(p: dict, key: str, x: jax.Array) -> bool:
  """Whether x uses the inference layout's p[key] ([O, I]): up to _T_LAYOUT_MAX_ROWS rows.
  `layer_params` merges that layout into the canonical weights, which serve the rest."""
  return key in p and _rows(x) <= _T_LAYOUT_MAX_ROWS


def matmul_t(x: jax.Array, wt: jax.Array) -> jax.Array:
  """x [..., I] times a weight stored transposed, wt [O, I] -> [..., O] (x @ wt.T)."""
  return jnp.einsum("...i,oi->...o", x, wt)


def norm(p: dict, cfg: ModelConfig, x: jax.Array) -> jax.Array:
  """LayerNorm (GPT-2) or RMSNorm (Llama), computed in float32."""
  xf = x.astype(jnp.float32)
  if cfg.is_gpt2:
    xf = xf - xf.mean(-1, keepdims=True)
    y = xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + cfg.norm_eps)
    return (y * p["scale"] + p["bias"]).astype(x.dtype)
  y = xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + cfg.norm_eps)
  return (y * p["scale"]).astype(x.dtype)


def rope(x: jax.Array, positions: jax.Array, cfg: ModelConfig) -> jax.Array:
  """Rotary embedding, Hugging Face `rotate_half` convention, with the config's RoPE
  scaling (`ModelConfig.rope_inv_freq`). x: [B, T, N, E]."""
  inv_freq = jnp.asarray(cfg.rope_inv_freq())  # [E/2]
  angles = positions[..., None].astype(jnp.float32) * inv_freq  # [B, T, E/2]
  angles = jnp.concatenate([angles, angles], -1)[:, :, None, :]  # [B, T, 1, E]
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  rotated = jnp.concatenate([-x2, x1], -1)
  return (x * jnp.cos(angles) + rotated * jnp.sin(angles)).astype(x.dtype)


def project_qkv(p: dict, cfg: ModelConfig, x: jax.Array, positions: jax.Array):
  """x [B, T, D] -> q [B, T, H, E], k and v [B, T, K, E] (q/k norm and rotary for Llama)."""
  b, t, _ = x.shape
  h, kh, e = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
  if _use_t(p, "qkv_t", x):  # the fused inference layout
    qkv = matmul_t(x, p["qkv_t"])
    if "qkv_bias" in p:
      qkv = qkv + p["qkv_bias"]
    q, k, v = jnp.split(qkv, [h * e, (h + kh) * e], axis=-1)
    q, k, v = q.reshape(b, t, h, e), k.reshape(b, t, kh, e), v.reshape(b, t, kh, e)
  else:
    q = _dense(p["q"], x).reshape(b, t, h, e)
    k = _dense(p["k"], x).reshape(b, t, kh, e)
    v = _dense(p["v"], x).reshape(b, t, kh, e)
  if cfg.qk_norm:  # Qwen3: RMSNorm over each head's E dims, before the rotary embedding
    q, k = norm(p["q_norm"], cfg, q), norm(p["k_norm"], cfg, k)
  if not cfg.is_gpt2:
    q, k = rope(q, positions, cfg), rope(k, positions, cfg)
  return q, k, v


def attend(p: dict, cfg: ModelConfig, q: jax.Array, keys: jax.Array, values: jax.Array,
           mask: jax.Array, cache_layout: bool = False) -> jax.Array:
  """Grouped-query attention of q [B, T, H, E] over keys/values [B, S, K, E] (or a
  cache's keys [B, K, E, S] and values [B, K, S, E] when `cache_layout`) where mask
  [B or 1, T, S] is True; returns the output projection [B, T, D]."""
  return out_proj(p, attention_core(q, keys, values, mask, cache_layout))


def attention_core(q: jax.Array, keys: jax.Array, values: jax.Array, mask: jax.Array,
                   cache_layout: bool = False) -> jax.Array:
  """Softmax attention of q [B, T, H, E] over keys/values [B, S, K, E] (or the cache's
  keys [B, K, E, S] and values [B, K, S, E] when `cache_layout`) where mask [B or 1, T, S]
  is True -> [B, T, H * E] (heads concatenated, before the output projection)."""
  b, t, h, e = q.shape
  kh = keys.shape[1 if cache_layout else 2]
  ks, vs = ("bkes", "bkse") if cache_layout else ("bske", "bske")
  qg = q.reshape(b, t, kh, h // kh, e)
  scores = jnp.einsum(f"btkge,{ks}->bkgts", qg, keys.astype(q.dtype)).astype(jnp.float32)
  scores = scores / jnp.sqrt(jnp.float32(e))
  scores = jnp.where(mask[:, None, None], scores, jnp.finfo(jnp.float32).min)
  weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
  return jnp.einsum(f"bkgts,{vs}->btkge", weights, values.astype(q.dtype)).reshape(b, t, h * e)


def out_proj(p: dict, y: jax.Array) -> jax.Array:
  """The attention output projection [B, T, H * E] -> [B, T, D]."""
  if _use_t(p, "o_t", y):
    y = matmul_t(y, p["o_t"])
    return y + p["o"]["bias"] if "bias" in p["o"] else y
  return _dense(p["o"], y)


def _attention(p: dict, cfg: ModelConfig, x, positions, layer_kv, lengths, mask=None):
  """Self-attention, causal by position unless `mask` [B or 1, T, S] says which keys
  each new token sees (a token tree); returns the output and the layer's updated (k, v)."""
  q, k, v = project_qkv(p, cfg, x, positions)
  if layer_kv is None:  # cache-free: attend within the sequence
    if mask is None:
      mask = jnp.arange(x.shape[1])[None, None, :] <= positions[:, :, None]  # [B, T, T]
    return attend(p, cfg, q, k, v, mask), layer_kv
  if mask is not None:  # a token tree: slots are not positions, so attend densely under the mask
    keys = write_keys(layer_kv[0], k, lengths)  # [B, K, E, S]
    values = write_values(layer_kv[1], v, lengths)  # [B, K, S, E]
    return attend(p, cfg, q, keys, values, mask, cache_layout=True), (keys, values)
  y, layer_kv = cached_attention(q, k, v, layer_kv, positions, lengths)
  return out_proj(p, y), layer_kv


def cached_attention(q: jax.Array, k: jax.Array, v: jax.Array, layer_kv: tuple,
                     positions: jax.Array, lengths: jax.Array):
  """Writes the new k, v [B, T, K, E] into the layer's cache at `lengths` and attends
  q [B, T, H, E] over it causally. Returns (y [B, T, H * E], (keys [B, K, E, S], values
  [B, K, S, E]))."""
  keys = write_keys(layer_kv[0], k, lengths)
  values = write_values(layer_kv[1], v, lengths)
  t = q.shape[1]
  if t >= 2 * QUERY_CHUNK and t % QUERY_CHUNK == 0:  # a long prefill: causal blocks only
    chunks = lambda a: jnp.moveaxis(a.reshape(a.shape[0], t // QUERY_CHUNK, QUERY_CHUNK,
                                              *a.shape[2:]), 1, 0)
    _, ys = jax.lax.scan(lambda c, qp: (c, live_attention(qp[0], keys, values, qp[1])), None,
                         (chunks(q), chunks(positions)))  # [T / C, B, C, H * E]
    y = jnp.moveaxis(ys, 0, 1).reshape(q.shape[0], t, -1)
  else:
    y = live_attention(q, keys, values, positions)
  return y, (keys, values)


# Cached attention reads the cache in blocks of KEY_BLOCK slots, only up to the block
# holding the last query's position (the live window), with an online softmax; a long
# prefill runs in query chunks of QUERY_CHUNK, each over the key blocks it can see, so
# the masked upper triangle is skipped.
KEY_BLOCK = 256
QUERY_CHUNK = 256


def live_attention(q: jax.Array, keys: jax.Array, values: jax.Array,
                   positions: jax.Array) -> jax.Array:
  """Causal attention of q [B, T, H, E] at `positions` [B, T] over cache slots
  [0, max position] of the cache's keys [B, K, E, S] and values [B, K, S, E], in blocks
  -> [B, T, H * E].

  Each KV head's G query heads and T tokens form one [G * T, E] matrix, so a block is
  one batched product per (row, KV head) with no transpose inside the loop."""
  b, t, h, e = q.shape
  kh, s = values.shape[1], values.shape[2]
  g = h // kh
  blk = min(KEY_BLOCK, s)
  qg = jnp.moveaxis(q.reshape(b, t, kh, g, e), 1, 3).reshape(b, kh, g * t, e)  # [B, K, G*T, E]
  qg = qg.astype(jnp.float32) / jnp.sqrt(jnp.float32(e))
  qpos = jnp.broadcast_to(positions[:, None, :], (b, g, t)).reshape(b, 1, g * t)  # [B, 1, G*T]
  n_blocks = jnp.minimum((jnp.max(positions) + blk) // blk, -(-s // blk))  # live blocks

  def block(a, at, slots):  # keys [B, K, E, blk], values [B, K, blk, E]
    return jax.lax.dynamic_slice_in_dim(a, at, blk, axis=slots + 1).astype(jnp.float32)

  def body(j, carry):
    m, l, acc = carry  # [B, K, G*T], [B, K, G*T], [B, K, G*T, E]
    start = j * blk
    at = jnp.minimum(start, s - blk)  # the last block may overlap the one before it
    scores = jnp.einsum("bkme,bkes->bkms", qg, block(keys, at, KEY_SLOTS))  # [B, K, G*T, blk]
    kpos = at + jnp.arange(blk)
    mask = (kpos >= start)[None, None, None, :] & (kpos[None, None, None, :] <= qpos[..., None])
    scores = jnp.where(mask, scores, -jnp.inf)
    m_new = jnp.maximum(m, scores.max(-1))
    m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
    w = jnp.exp(scores - m_safe[..., None])
    corr = jnp.exp(m - m_safe)
    acc = acc * corr[..., None] + jnp.einsum("bkms,bkse->bkme", w, block(values, at, VALUE_SLOTS))
    return m_new, l * corr + w.sum(-1), acc

  init = (jnp.full((b, kh, g * t), -jnp.inf, jnp.float32), jnp.zeros((b, kh, g * t), jnp.float32),
          jnp.zeros((b, kh, g * t, e), jnp.float32))
  _, l, acc = jax.lax.fori_loop(0, n_blocks, body, init)
  out = (acc / l[..., None]).reshape(b, kh, g, t, e)
  return jnp.moveaxis(out, 3, 1).reshape(b, t, h * e).astype(q.dtype)


def mlp(p: dict, cfg: ModelConfig, x: jax.Array) -> jax.Array:
  """The block's MLP (GELU for GPT-2, SwiGLU for Llama)."""
  if cfg.is_gpt2:
    if _use_t(p, "fc_t", x):
      hid = jax.nn.gelu(matmul_t(x, p["fc_t"]) + p["fc"]["bias"], approximate=True)
      return matmul_t(hid, p["proj_t"]) + p["proj"]["bias"]
    return _dense(p["proj"], jax.nn.gelu(_dense(p["fc"], x), approximate=True))
  if _use_t(p, "gate_up_t", x):  # the fused inference layout
    gate, up = jnp.split(matmul_t(x, p["gate_up_t"]), 2, axis=-1)
    return matmul_t(jax.nn.silu(gate) * up, p["down_t"])
  return _dense(p["down"], jax.nn.silu(_dense(p["gate"], x)) * _dense(p["up"], x))


def embed(params: dict, cfg: ModelConfig, tokens: jax.Array, positions: jax.Array) -> jax.Array:
  """Token (plus learned position, GPT-2) embeddings. tokens, positions: [B, T]."""
  x = params["embed"][tokens]  # [B, T, D]
  if cfg.is_gpt2:
    x = x + params["pos_embed"][jnp.minimum(positions, cfg.max_positions - 1)]
  return x


def positions_for(cache: Optional[KVCache], b: int, t: int) -> jax.Array:
  """[B, T] positions of T new tokens: after the cache's lengths, or from 0 without a cache."""
  if cache is None:
    return jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  return cache.lengths[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]


def layer_params(params: dict, i: int) -> dict:
  """Layer i's params, with its inference layout (`params.inference_layout`) merged in."""
  p = params["layers"][i]
  if "inference" not in params:
    return p
  extra = params["inference"]["layers"][i]
  return {**p, "attn": {**p["attn"], **extra["attn"]}, "mlp": {**p["mlp"], **extra["mlp"]}}


# Jitted, so the N layers of a model, which share their shapes, are traced and lowered once
# per program (a call each); XLA inlines the calls before it optimizes, so the compiled
# program is the one the unrolled layers gave. The embedded 30-layer target's programs
# spent a fifth of their compile time tracing and lowering its layers.
@functools.partial(jax.jit, static_argnums=1)
def block(p: dict, cfg: ModelConfig, x: jax.Array, positions: jax.Array,
          layer_kv: Optional[tuple], lengths: Optional[jax.Array], mask: Optional[jax.Array]):
  """One decoder block (its params with the inference layout merged in) over x [B, T, D]
  -> (x [B, T, D], the layer's updated (keys, values), or None without a cache)."""
  h = norm(p["attn_norm"], cfg, x) if "attn_norm" in p else x  # none: EAGLE-1's first layer
  attn, layer_kv = _attention(p["attn"], cfg, h, positions, layer_kv, lengths, mask)
  x = x + attn
  return x + mlp(p["mlp"], cfg, norm(p["mlp_norm"], cfg, x)), layer_kv


def blocks(params: dict, cfg: ModelConfig, x: jax.Array, positions: jax.Array,
           cache: Optional[KVCache] = None, n_layers: Optional[int] = None,
           mask: Optional[jax.Array] = None, collect: Optional[tuple] = None):
  """The first `n_layers` blocks (all by default) over an embedded input x [B, T, D].

  Returns (hidden [B, T, D], cache) where the cache has advanced by T per row and
  holds updated entries for the layers that ran (the rest are returned untouched).
  mask [B or 1, T, S]: the keys each new token attends to (default: causal by position).
  collect: layer indices whose outputs are also returned, concatenated in that order, as a
  third value [B, T, len(collect) * D] (EAGLE-3 style multi-layer features); -1 is the
  embedded input.
  """
  n = cfg.n_layers if n_layers is None else n_layers
  t = x.shape[1]
  lengths = None if cache is None else cache.lengths
  new_k, new_v, outs = [], [], {-1: x}  # -1: the blocks' input (EAGLE-3 aux id 0)
  for i in range(n):
    layer_kv = None if cache is None else (cache.k[i], cache.v[i])
    x, layer_kv = block(layer_params(params, i), cfg, x, positions, layer_kv, lengths, mask)
    if cache is not None:
      new_k.append(layer_kv[0])
      new_v.append(layer_kv[1])
    outs[i] = x
  if cache is not None:
    cache = cache.replace(k=tuple(new_k) + cache.k[n:], v=tuple(new_v) + cache.v[n:],
                          lengths=cache.lengths + t)
  if collect is not None:
    missing = [i for i in collect if i not in outs]
    if missing:
      raise ValueError(f"Cannot collect layers {missing}: only layers 0..{n - 1} ran.")
    return x, cache, jnp.concatenate([outs[i] for i in collect], axis=-1)
  return x, cache


def forward_hidden(params: dict, cfg: ModelConfig, tokens: jax.Array,
                   cache: Optional[KVCache] = None, n_layers: Optional[int] = None,
                   positions: Optional[jax.Array] = None, mask: Optional[jax.Array] = None,
                   collect: Optional[tuple] = None):
  """Embeds tokens [B, T] and runs the first `n_layers` blocks; no final norm.

  Returns (hidden [B, T, D], cache advanced by T), plus the collected layers' outputs
  [B, T, len(collect) * D] when `collect` is given, as `blocks`. positions [B, T]
  (default: after the cache's lengths) and mask [B, T, S] (default: causal) let a
  token tree be scored in one pass: nodes at length + depth seeing their ancestors.
  """
  cfg.check_window(tokens.shape[1] if cache is None else cache.max_len)
  if positions is None:
    positions = positions_for(cache, *tokens.shape)
  return blocks(params, cfg, embed(params, cfg, tokens, positions), positions, cache, n_layers,
                mask=mask, collect=collect)


# How a pass's rows reach the output head, by row count. One row: the matrix-vector
# product on the [V, D] weight. 2.._HEAD_REDUCE_MAX_ROWS rows on the CPU: a
# multiply-and-reduce over D, [V, 1, D] * [1, R, D] summed, which XLA hands to a YNNPACK
# reduction (`pass_options` keeps reductions there) that reads the weight once for all
# rows; measured 1.2-1.7x faster than the GEMM on a [D, V] copy, the weight as left
# operand, or one matrix-vector product per row ("Head as a reduction" in
# `git show 0adddfe:experiments/pass_cost/README.md`). More rows (training) and other
# backends: the plain product.
_HEAD_REDUCE_MAX_ROWS = 64


def head_reduce(x: jax.Array, w_t: jax.Array) -> jax.Array:
  """x [..., D] times w_t [V, D] -> [..., V] as a multiply-and-reduce over D."""
  rows = x.reshape(-1, x.shape[-1])  # [R, D]
  y = jnp.sum(w_t[:, None, :] * rows[None], axis=-1)  # [V, R]
  return y.T.reshape(*x.shape[:-1], w_t.shape[0])


def full_head(params: dict, cfg: ModelConfig, x: jax.Array) -> jax.Array:
  """Normed hidden x [..., D] -> logits [..., V] over the whole vocabulary, in the form
  that is fastest for x's row count (see above)."""
  if cfg.tie_embeddings:  # embed [V, D] is already the [out, in] layout
    w_t = params["embed"]
  else:  # [V, D] from the inference layout, or None
    w_t = params.get("inference", {}).get("head_t")
  if w_t is None:  # an untied head without the inference layout
    return x @ params["lm_head"]["kernel"]
  rows = _rows(x)
  if 1 < rows <= _HEAD_REDUCE_MAX_ROWS and jax.default_backend() == "cpu":
    return head_reduce(x, w_t)
  return matmul_t(x, w_t)


def head(params: dict, cfg: ModelConfig, hidden: jax.Array) -> jax.Array:
  """Final norm and output projection: [B, T, D] -> float32 logits [B, T, V]."""
  x = norm(params["final_norm"], cfg, hidden)
  if "head_vocab" not in params:  # [..., :V]: a head padded for a mesh has zero columns past V
    return full_head(params, cfg, x)[..., :cfg.vocab_size].astype(jnp.float32)
  kernel = params["embed"].T if cfg.tie_embeddings else params["lm_head"]["kernel"]  # [D, V]
  # Reduced output vocabulary (FR-Spec style drafts): score only the listed ids;
  # every other id gets probability zero, so verification stays exact.
  ids = params["head_vocab"]  # [V'] int32
  # "head_kernel" [D, V'] is the same columns gathered once at load time (inference);
  # without it they are gathered here (training, where the embeddings are shared).
  sub_kernel = params["head_kernel"] if "head_kernel" in params else jnp.take(kernel, ids, axis=1)
  sub = (x @ sub_kernel).astype(jnp.float32)  # [B, T, V']
  full = jnp.full(sub.shape[:-1] + (cfg.vocab_size,), jnp.finfo(jnp.float32).min, jnp.float32)
  return full.at[..., ids].set(sub)


def forward(params: dict, cfg: ModelConfig, tokens: jax.Array,
            cache: Optional[KVCache] = None, n_layers: Optional[int] = None):
  """tokens [B, T] (+ cache) -> (logits [B, T, V] float32, cache advanced by T)."""
  hidden, cache = forward_hidden(params, cfg, tokens, cache, n_layers)
  return head(params, cfg, hidden), cache
