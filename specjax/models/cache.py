"""Key/value cache: fixed maximum length, one length per row.

Axes: B batch, S cache slots, K key/value heads, D head dim.
Row b's next T tokens are written at slots [lengths[b], lengths[b] + T); slots at or
past a row's length are never attended, so rolling back rejected tokens is just
setting `lengths`.

Buffers are heads-major, so each (row, head) owns a contiguous run and attention over a
block of slots is one batched product per (row, head) with no transpose: values
[B, K, S, D], keys transposed to [B, K, D, S] (slots minor), which makes the scores
q @ keys a plain [G*T, D] x [D, S] product; XLA's CPU dot ran that 2-3x faster than the
[S, D]-transposed form, and a slots-major [B, S, K, D] cache made it transpose every
layer's keys and values on every step ("Cache layout" in
`git show 0adddfe:experiments/pass_cost/README.md`).
"""
from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from specjax.models.config import ModelConfig
from specjax.parallel import constrain_cache


@flax.struct.dataclass
class KVCache:
  """Per-layer key/value buffers and the per-row count of valid slots."""
  k: tuple  # L x [B, K, D, S] (slots minor)
  v: tuple  # L x [B, K, S, D]
  lengths: jax.Array  # [B] int32

  @classmethod
  def init(cls, cfg: ModelConfig, batch: int, max_len: int, dtype=jnp.float32) -> "KVCache":
    kh, d = cfg.n_kv_heads, cfg.head_dim
    # On a mesh (jax.set_mesh) rows go over "data", kv heads over "model".
    zeros = lambda shape: tuple(constrain_cache(jnp.zeros(shape, dtype)) for _ in range(cfg.n_layers))
    return cls(k=zeros((batch, kh, d, max_len)), v=zeros((batch, kh, max_len, d)),
               lengths=jnp.zeros((batch,), jnp.int32))

  @property
  def max_len(self) -> int:
    return self.v[0].shape[2]

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


# The slot axis of one row's buffer: keys [K, D, S], values [K, S, D].
KEY_SLOTS, VALUE_SLOTS = 2, 1


def write_rows(buf: jax.Array, new: jax.Array, starts: jax.Array, slots: int) -> jax.Array:
  """Writes new[b] ([T, K, D], as the projections give it) into buf[b] at slot starts[b],
  per row; `slots` is the slot axis of a row's buffer (KEY_SLOTS or VALUE_SLOTS)."""
  new = jnp.moveaxis(new.astype(buf.dtype), 1, slots + 1)  # [B, K, T, D] or [B, K, D, T]
  return jax.vmap(lambda b, x, s: jax.lax.dynamic_update_slice_in_dim(b, x, s, axis=slots))(
      buf, new, starts)


def write_keys(buf: jax.Array, new: jax.Array, starts: jax.Array) -> jax.Array:
  """new keys [B, T, K, D] into a key buffer [B, K, D, S] at slots starts[b] + [0, T)."""
  return write_rows(buf, new, starts, KEY_SLOTS)


def write_values(buf: jax.Array, new: jax.Array, starts: jax.Array) -> jax.Array:
  """new values [B, T, K, D] into a value buffer [B, K, S, D] at slots starts[b] + [0, T)."""
  return write_rows(buf, new, starts, VALUE_SLOTS)


def gather_rows(buf: jax.Array, starts: jax.Array, src: jax.Array, slots: int) -> jax.Array:
  """Moves slot starts[b] + src[b, i] of buf[b] to slot starts[b] + i for i < T, per row.

  buf [B, ...] with a row's slots on axis `slots` (KEY_SLOTS or VALUE_SLOTS); starts [B],
  src [B, T] offsets with src[b, i] >= i (a tree's accepted path: node ids in depth
  order), so no slot is read after it was written.
  """
  def row(b, s, o):
    picked = jnp.take(b, s + o, axis=slots, mode="clip")  # T slots
    return jax.lax.dynamic_update_slice_in_dim(b, picked, s, axis=slots)
  return jax.vmap(row)(buf, starts, src)


def gather_path(cache: KVCache, starts: jax.Array, src: jax.Array) -> KVCache:
  """`gather_rows` on every layer's keys and values (lengths untouched): after a tree
  pass the accepted path lands in contiguous slots, so rollback by lengths holds."""
  return cache.replace(k=tuple(gather_rows(x, starts, src, KEY_SLOTS) for x in cache.k),
                       v=tuple(gather_rows(x, starts, src, VALUE_SLOTS) for x in cache.v))
