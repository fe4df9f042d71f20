"""A stub decoder behind the model interface, with no transformer (as t5x tests decoding).

Axes: B batch, T new tokens, S cache slots, V vocab, L cache layers.

The logits for the token after position t are a closed-form function of the
(token, position) pairs it attends to, in integer arithmetic, so a pure-Python greedy
reference (`reference_greedy`) agrees with the jitted loop exactly, ties included (both
take the lowest id among tied maxima):

  score(t)     = sum over attended slots s of (token_s + 1) * w(pos_s + phase)
  w(p)         = (7 p + 3) mod 11 - 5                        (an integer in [-5, 5])
  logits(t)[v] = (score (2v + 1) + 5v) mod 17 + BIAS [v == succ(token_t)]
  succ(x)      = CYCLE floor(x / CYCLE) + (x + 1) mod CYCLE   (cycles of CYCLE ids)

The `succ` bias makes the text cycle (so prompt lookup finds repeats) and the
`score` term breaks the cycle often (so it is accepted only sometimes). `phase` is a
parameter: a stub draft with another phase agrees with the target often but not
always; an early-exit pass (`n_layers` below `cfg.n_layers`) adds EXIT_PHASE to it.

The stub keeps token + 1 and the position of every slot in a `KVCache` of L = n_layers
layers: a pass writes every layer its cache has and reads the last one, so cache
writes, rollback by lengths, tree masks and positions, the gather of an accepted path
and the early-exit draft's share of the first layers are all exercised.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.drafters import ModelDrafter
from specjax.models import KVCache
from specjax.models.cache import write_keys, write_values

V = 25
BIAS = 13
CYCLE = 5
EXIT_PHASE = 1


@dataclasses.dataclass(frozen=True)
class StubConfig:
  """What the loop and `generate` read from a target's config."""
  vocab_size: int = V
  n_layers: int = 2
  max_positions: int = 512


def weight(pos, phase):
  """w(pos + phase): an integer in [-5, 5] (numpy or jax arrays)."""
  return (7 * (pos + phase) + 3) % 11 - 5


def logits_of(score, own, v: int = V):
  """score [...] (integer-valued), own token [...] -> logits [..., V] (integer-valued)."""
  xp = jnp if isinstance(score, jax.Array) else np
  ids = xp.arange(v)
  base = (score[..., None] * (2 * ids + 1) + 5 * ids) % 17
  succ = CYCLE * (own // CYCLE) + (own + 1) % CYCLE
  return base + BIAS * (ids == succ[..., None])


@flax.struct.dataclass
class StubModel:
  """The closed form above behind `init_cache` / `prefill` / `step` / `head`.

  params: {"phase": int32 scalar} (a leaf, so drafts of other phases share programs).
  hidden [B, T, 2] = (score, own token) as float32 (exact: the values stay < 2^24).
  """
  params: dict
  cfg: StubConfig = flax.struct.field(pytree_node=False, default=StubConfig())
  name: str = flax.struct.field(pytree_node=False, default="stub")
  eos_ids: tuple = flax.struct.field(pytree_node=False, default=())

  @property
  def vocab_size(self) -> int:
    return self.cfg.vocab_size

  def init_cache(self, batch: int, max_len: int) -> KVCache:
    z = jnp.zeros((batch, 1, max_len), jnp.float32)  # KVCache's layouts with K = D = 1
    layers = range(self.cfg.n_layers)
    return KVCache(k=tuple(z[:, :, None] for _ in layers), v=tuple(z[..., None] for _ in layers),
                   lengths=jnp.zeros((batch,), jnp.int32))

  def prefill(self, tokens, lengths, max_len: int, collect=None):
    assert collect is None, "the stub has no feature layers"
    hidden, cache = self.step(tokens, None, None, self.init_cache(tokens.shape[0], max_len))
    return hidden, cache.with_lengths(lengths)

  def step(self, tokens, positions, mask, cache: KVCache, n_layers: Optional[int] = None,
           collect=None):
    """tokens [B, T] at slots lengths + 0..T-1 -> (hidden [B, T, 2], cache + T)."""
    assert collect is None, "the stub has no feature layers"
    b, t = tokens.shape
    if positions is None:
      positions = cache.lengths[:, None] + jnp.arange(t)[None]  # [B, T]
    new_k = (tokens + 1).astype(jnp.float32)[..., None, None]  # [B, T, 1, 1]
    new_v = positions.astype(jnp.float32)[..., None, None]
    ks = tuple(write_keys(k, new_k, cache.lengths) for k in cache.k)
    vs = tuple(write_values(v, new_v, cache.lengths) for v in cache.v)
    toks, pos = ks[-1][:, 0, 0, :], vs[-1][:, 0, :, 0]  # [B, S]: the last layer's entries
    if mask is None:  # causal by position: slots = positions in a chain
      mask = jnp.arange(toks.shape[1])[None, None] <= positions[:, :, None]  # [B, T, S]
    phase = self.params["phase"]
    if n_layers is not None and n_layers < self.cfg.n_layers:
      phase = phase + EXIT_PHASE
    contrib = toks * weight(pos.astype(jnp.int32), phase)  # [B, S]
    score = jnp.sum(jnp.where(mask, contrib[:, None], 0.0), -1)  # [B, T]
    hidden = jnp.stack([score, tokens.astype(jnp.float32)], -1)  # [B, T, 2]
    return hidden, KVCache(k=ks, v=vs, lengths=cache.lengths + t)

  def head(self, hidden):
    """hidden [B, T, 2] -> float32 logits [B, T, V]."""
    h = hidden.astype(jnp.int32)
    return logits_of(h[..., 0], h[..., 1], self.cfg.vocab_size).astype(jnp.float32)


def stub(phase: int = 0, eos_ids: tuple = ()) -> StubModel:
  """The stub target (phase 0) or a stub draft (another phase)."""
  return StubModel(params={"phase": jnp.int32(phase)}, eos_ids=tuple(eos_ids))


@flax.struct.dataclass
class StubDraftDrafter(ModelDrafter):
  """`ModelDrafter` (its own cache, refeeds, tree expansion) over a stub draft model:
  the one change is that its `model` is a `StubModel`, not a transformer `Decoder`."""

  @property
  def model(self) -> StubModel:
    return StubModel(params=self.params, cfg=self.cfg, name=self.name)


def stub_draft(phase: int = 2) -> StubDraftDrafter:
  """A separate stub draft whose weights are shifted by `phase` positions."""
  return StubDraftDrafter(params={"phase": jnp.int32(phase)}, cfg=StubConfig(),
                          name=f"stub draft (phase {phase})")


def reference_logits(ids: Sequence[int], phase: int = 0) -> np.ndarray:
  """The stub's logits [V] after the whole of `ids` (a draft: phase != 0), in numpy
  integers. Early exit of the target is phase EXIT_PHASE."""
  score = sum((t + 1) * int(weight(i, phase)) for i, t in enumerate(ids))
  return logits_of(np.asarray(score), np.asarray(ids[-1]))


def reference_next(ids: Sequence[int], phase: int = 0) -> int:
  """The stub's greedy next token after the whole of `ids` (the lowest id of a tie)."""
  return int(np.argmax(reference_logits(ids, phase)))


def reference_greedy(prompt: Sequence[int], n: int, eos_ids: Sequence[int] = ()) -> list:
  """The target alone, greedy: n new tokens, or up to and including the first EOS."""
  ids = list(prompt)
  for _ in range(n):
    ids.append(reference_next(ids))
    if ids[-1] in eos_ids:
      break
  return ids[len(prompt):]


def ragged_prompts(n: int, seed: int, lo: int = 3, hi: int = 12) -> list:
  """n prompts of token ids with lengths in [lo, hi) (rows differ in length), some
  with a repeated stretch so prompt lookup has something to find."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    row = rng.integers(0, V, rng.integers(lo, hi)).tolist()
    if i % 2:
      row = row + row[: len(row) // 2]
    out.append(row)
  return out
