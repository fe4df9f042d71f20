"""Key/value cache: fixed maximum length, one length per row.

Axes: B batch, S cache slots, K key/value heads, D head dim.
Row b's next T tokens are written at slots [lengths[b], lengths[b] + T); slots at or
past a row's length are never attended, so rolling back rejected tokens is just
setting `lengths`.
"""
from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from specjax.models.config import ModelConfig
from specjax.models.sharding import constrain_cache


@flax.struct.dataclass
class KVCache:
  """Per-layer key/value buffers and the per-row count of valid slots."""
  k: tuple  # L x [B, S, K, D]
  v: tuple  # L x [B, S, K, D]
  lengths: jax.Array  # [B] int32

  @classmethod
  def init(cls, cfg: ModelConfig, batch: int, max_len: int, dtype=jnp.float32) -> "KVCache":
    shape = (batch, max_len, cfg.n_kv_heads, cfg.head_dim)
    # On a mesh (jax.set_mesh) rows go over "data", kv heads over "model".
    zeros = tuple(constrain_cache(jnp.zeros(shape, dtype)) for _ in range(cfg.n_layers))
    return cls(k=zeros, v=zeros, lengths=jnp.zeros((batch,), jnp.int32))

  @property
  def max_len(self) -> int:
    return self.k[0].shape[1]

  @property
  def n_layers(self) -> int:
    return len(self.k)

  def with_lengths(self, lengths: jax.Array) -> "KVCache":
    return self.replace(lengths=jnp.asarray(lengths, jnp.int32))

  def first_layers(self, n: int) -> "KVCache":
    """A view on the first n layers (the early-exit drafter's share)."""
    return self.replace(k=self.k[:n], v=self.v[:n])

  def merge_first_layers(self, head: "KVCache") -> "KVCache":
    """Puts back the first len(head.k) layers written through `first_layers`."""
    n = len(head.k)
    return self.replace(k=head.k + self.k[n:], v=head.v + self.v[n:], lengths=head.lengths)


def write_rows(buf: jax.Array, new: jax.Array, starts: jax.Array) -> jax.Array:
  """Writes new[b] ([T, ...]) into buf[b] ([S, ...]) at slot starts[b], per row."""
  return jax.vmap(lambda b, x, s: jax.lax.dynamic_update_slice_in_dim(b, x, s, axis=0))(
      buf, new.astype(buf.dtype), starts)


def gather_rows(buf: jax.Array, starts: jax.Array, src: jax.Array) -> jax.Array:
  """Moves buf[b, starts[b] + src[b, i]] to slot starts[b] + i for i < T, per row.

  buf [B, S, ...], starts [B], src [B, T] offsets with src[b, i] >= i (a tree's accepted
  path: node ids in depth order), so no slot is read after it was written.
  """
  def row(b, s, o):
    picked = jnp.take(b, s + o, axis=0, mode="clip")  # [T, ...]
    return jax.lax.dynamic_update_slice_in_dim(b, picked, s, axis=0)
  return jax.vmap(row)(buf, starts, src)


def gather_path(cache: KVCache, starts: jax.Array, src: jax.Array) -> KVCache:
  """`gather_rows` on every layer's keys and values (lengths untouched): after a tree
  pass the accepted path lands in contiguous slots, so rollback by lengths holds."""
  return cache.replace(k=tuple(gather_rows(x, starts, src) for x in cache.k),
                       v=tuple(gather_rows(x, starts, src) for x in cache.v))
