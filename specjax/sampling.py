"""The one warp function from logits to next-token probabilities.

Target and draft both go through `warp`, in one fixed order: temperature, then
top-k, then top-p. Temperature 0 means greedy: a one-hot on the argmax, so the
speculative acceptance rule min(1, p/q) reduces to exact-match verification.

Ties: both filters keep every id tied with the last one they keep, so the result
never depends on the order of tied ids. top-k keeps the ids whose logit is >= the
k-th largest (more than k when ids tie with the k-th), as transformers'
TopKLogitsWarper does; top-p keeps the smallest prefix of the sorted ids whose mass
reaches top_p, plus every id tied with its last one (transformers' TopPLogitsWarper
cuts inside a tie at whatever order its sort returns). Greedy takes the lowest id
among tied maxima (argmax).

Two forms of the settings: `SamplingParams` (static, hashable: the API's and the
trainer's) and `TracedSampling` (its numbers as array leaves: the decoding loop's, so
calls that differ only in temperature, top_k or top_p values run one compiled program;
greedy or not stays static, as the greedy path skips the warp altogether).
"""
from __future__ import annotations

import dataclasses
from typing import Union

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np


@jax.tree_util.register_static  # a pytree of no leaves: static wherever it sits in one
@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """Static (hashable) sampling settings. top_k=0 and top_p=1.0 disable those filters."""
  temperature: float = 0.0
  top_k: int = 0
  top_p: float = 1.0

  def __post_init__(self):
    if not self.temperature >= 0.0:
      raise ValueError(f"temperature must be >= 0 (0 means greedy), got {self.temperature}.")
    if not (isinstance(self.top_k, int) and self.top_k >= 0):
      raise ValueError(f"top_k must be a non-negative integer (0 disables it), got {self.top_k!r}.")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"top_p must be in (0, 1] (1.0 disables it), got {self.top_p}.")

  @property
  def greedy(self) -> bool:
    return self.temperature == 0.0

  def traced(self) -> "TracedSampling":
    """The same settings with the numbers as arrays (greedy: placeholders, never read)."""
    return TracedSampling(temperature=jnp.float32(1.0 if self.greedy else self.temperature),
                          top_k=jnp.int32(self.top_k), top_p=jnp.float32(self.top_p),
                          greedy=self.greedy)


@flax.struct.dataclass
class TracedSampling:
  """`SamplingParams` as a pytree: temperature, top_k, top_p are scalar array leaves
  (traced under jit: changing them reuses the program); greedy is static."""
  temperature: jax.Array  # float32 []
  top_k: jax.Array  # int32 [] (0: off)
  top_p: jax.Array  # float32 [] (1.0: off)
  greedy: bool = flax.struct.field(pytree_node=False, default=False)


Sampling = Union[SamplingParams, TracedSampling]


def argmax(logits: jax.Array) -> jax.Array:
  """jnp.argmax(logits, -1) as int32 (the first maximum; the first NaN if there is one),
  taken as a max and a masked min: two plain reductions, which XLA's CPU backend runs
  2.7-5.4x faster over a 49K vocabulary than its (value, index) reduction
  (`experiments/pass_cost/argmax_forms.md` in git history at 2cd81df)."""
  m = jnp.max(logits, -1, keepdims=True)  # NaN if the row has one
  hit = (logits == m) | jnp.isnan(logits)
  ids = jnp.arange(logits.shape[-1], dtype=jnp.int32)
  return jnp.min(jnp.where(hit, ids, logits.shape[-1]), -1)


def warp(logits: jax.Array, sampling: Sampling) -> jax.Array:
  """logits [..., V] -> float32 probabilities [..., V] after temperature, top-k, top-p.
  With `TracedSampling` the filters are `lax.cond`s on the traced values (skipped at run
  time when off); with `SamplingParams` they are decided while tracing."""
  logits = logits.astype(jnp.float32)
  if sampling.greedy:
    return jax.nn.one_hot(argmax(logits), logits.shape[-1], dtype=jnp.float32)
  logits = logits / sampling.temperature
  top_k, top_p = sampling.top_k, sampling.top_p
  neg_inf = jnp.float32(-jnp.inf)
  logits = _when((0 < top_k) & (top_k < logits.shape[-1]),
                 lambda x: jnp.where(x < _kth_largest(x, top_k), neg_inf, x), logits)
  logits = _when(top_p < 1.0, lambda x: jnp.where(_top_p_keep(x, top_p), x, neg_inf), logits)
  return jax.nn.softmax(logits, axis=-1)


def _when(pred, fn, x):
  """fn(x) where pred holds, else x: decided now for a Python bool, by `lax.cond` for an
  array (a scalar predicate: XLA runs one branch)."""
  if isinstance(pred, (bool, np.bool_)):
    return fn(x) if pred else x
  return jax.lax.cond(pred, fn, lambda y: y, x)


def _kth_largest(logits: jax.Array, top_k) -> jax.Array:
  """[..., 1]: the top_k-th largest logit of each row (ties counted), by `lax.top_k` for
  a Python int, else by bisection over the order keys (a traced top_k has no static
  size): the largest key t with count(key >= t) >= top_k, in 32 masked counts over V."""
  if isinstance(top_k, int):
    return jax.lax.top_k(logits, top_k)[0][..., -1:]
  key = _order_key(logits)  # [..., V]
  lo = jnp.min(key, -1, keepdims=True)  # count(key >= lo) = V >= top_k
  hi = jnp.max(key, -1, keepdims=True) + 1  # count(key >= hi) = 0 < top_k

  def halve(_, bounds):
    lo, hi = bounds
    mid = (lo >> 1) + (hi >> 1) + (lo & hi & 1)  # floor((lo + hi) / 2) without overflow
    enough = jnp.sum(key >= mid, -1, keepdims=True) >= top_k
    return jnp.where(enough, mid, lo), jnp.where(enough, hi, mid)

  t, _ = jax.lax.fori_loop(0, 32, halve, (lo, hi))
  return jnp.max(jnp.where(key == t, logits, -jnp.inf), -1, keepdims=True)


def _order_key(x: jax.Array) -> jax.Array:
  """float32 -> int32 in the same order (IEEE bits, negatives flipped; -0.0 as +0.0)."""
  bits = jax.lax.bitcast_convert_type(jnp.where(x == 0, jnp.float32(0), x), jnp.int32)
  return jnp.where(bits < 0, bits ^ jnp.int32(0x7FFFFFFF), bits)


def _top_p_keep(logits: jax.Array, top_p: float) -> jax.Array:
  """bool [..., V]: the ids top-p keeps, without sorting the vocabulary.

  Sorted descending, top-p keeps every id whose mass before it (the mass of strictly
  larger logits) is < top_p, with its ties. That set is {i : key_i >= t}, t the smallest
  order key with mass(key > t) < top_p; mass(key > t) falls as t grows, so 32 bisection
  steps over the int32 keys find t exactly. Each step is one masked sum over V: on a
  49k vocabulary on CPU this is 14-25x faster than the sort it replaces
  (experiments/sampling/top_p_cost.md).
  """
  probs = jax.nn.softmax(logits, axis=-1)
  key = _order_key(logits)  # [..., V]
  lo = jnp.min(key, -1, keepdims=True) - 1  # mass(key > lo) = 1 >= top_p (or all kept)
  hi = jnp.max(key, -1, keepdims=True)  # mass(key > hi) = 0 < top_p

  def halve(_, bounds):
    lo, hi = bounds
    mid = (lo >> 1) + (hi >> 1) + (lo & hi & 1)  # floor((lo + hi) / 2) without overflow
    below = jnp.sum(jnp.where(key > mid, probs, 0.0), -1, keepdims=True) < top_p
    return jnp.where(below, lo, mid), jnp.where(below, mid, hi)

  _, t = jax.lax.fori_loop(0, 32, halve, (lo, hi))
  return key >= t


def sample(key: jax.Array, probs: jax.Array) -> jax.Array:
  """Draws one token per row from probabilities [..., V] (any positive scale) -> int32 [...].

  Inverse-CDF sampling: one uniform per row instead of the V Gumbel draws of
  `jax.random.categorical` (on a 49k vocabulary on CPU that was ~4x slower and showed
  up in every decode step). A one-hot row returns its argmax; a zero-probability id is
  never returned.
  """
  v = probs.shape[-1]
  cdf = jnp.cumsum(probs.astype(jnp.float32), axis=-1)  # [..., V]
  u = jax.random.uniform(key, probs.shape[:-1] + (1,), jnp.float32) * cdf[..., -1:]
  idx = jnp.sum(cdf <= u, axis=-1)  # first id whose cdf exceeds u
  last_nonzero = v - 1 - jnp.argmax(jnp.flip(probs > 0, axis=-1), axis=-1)  # rounding guard
  return jnp.minimum(idx, last_nonzero).astype(jnp.int32)
