"""The model interface: how the decoding loop and the drafters reach a decoder.

Axes: B batch, P prompt bucket, T new tokens, S cache slots, D hidden width, V vocab.

A decoder is a pytree (weights as leaves, config static) with

  init_cache(batch, max_len) -> cache                      # empty, lengths 0
  prefill(tokens [B, P], lengths [B], max_len, collect=None) -> (hidden [B, P, D], cache)
  step(tokens [B, T], positions [B, T] | None, mask [B, T, S] | None, cache, n_layers=None,
       collect=None)
      -> (hidden [B, T, D], cache)
  head(hidden [B, T, D]) -> float32 logits [B, T, V]

The cache carries per-row `lengths` (see `specjax.models.cache`): `prefill` leaves
lengths[b] valid entries; `step` writes its T tokens at slots lengths[b] .. + T and
advances lengths by T. `positions` default to the slots (lengths + 0..T-1) and `mask`
(True where a new token may attend a slot; new tokens' own slots included) defaults to
causal by position. A token tree passes both: node i at position length + depth(i),
seeing the prefix and its ancestors. `n_layers` runs only the first blocks (early exit);
`collect` (layer indices) adds a third result, those layers' outputs concatenated
[B, T, L*D], for EAGLE-3 style feature drafts (passed only when a drafter has
`feature_layers`, so a stub may leave it out). `target_pass` is the one place that
decides it: the loop's prefill and chain passes and the tree pass all call it.
`vocab_size` and `cfg` are static. `Decoder` implements this once for every family of
`specjax.models.transformer`; a test can put a stub with the same methods in its place.
"""
from __future__ import annotations

from typing import Any, Optional

import flax.struct
import jax
import jax.numpy as jnp

from specjax.models import transformer
from specjax.models.cache import KVCache
from specjax.models.config import ModelConfig


@flax.struct.dataclass
class Decoder:
  """A transformer decoder (GPT-2 or Llama family) behind the model interface."""
  params: Any
  cfg: ModelConfig = flax.struct.field(pytree_node=False)

  @property
  def vocab_size(self) -> int:
    return self.cfg.vocab_size

  def init_cache(self, batch: int, max_len: int) -> KVCache:
    return KVCache.init(self.cfg, batch, max_len, self.params["embed"].dtype)

  def prefill(self, tokens: jax.Array, lengths: jax.Array, max_len: int,
              collect: Optional[tuple] = None):
    """Right-padded prompts [B, P] -> (hidden [B, P, D], cache holding lengths[b] entries),
    plus the `collect`ed layers' outputs [B, P, L*D] when given (as `step`)."""
    out = transformer.forward_hidden(self.params, self.cfg, tokens,
                                     self.init_cache(tokens.shape[0], max_len), collect=collect)
    return (out[0], out[1].with_lengths(lengths)) + tuple(out[2:])

  def step(self, tokens: jax.Array, positions: Optional[jax.Array], mask: Optional[jax.Array],
           cache: KVCache, n_layers: Optional[int] = None, collect: Optional[tuple] = None):
    """T new tokens per row after the cache's lengths -> (hidden [B, T, D], cache + T), plus
    the outputs of layers `collect` concatenated [B, T, L*D] when given (EAGLE-3 features)."""
    return transformer.forward_hidden(self.params, self.cfg, tokens, cache, n_layers,
                                      positions=positions, mask=mask, collect=collect)

  def head(self, hidden: jax.Array) -> jax.Array:
    return transformer.head(self.params, self.cfg, hidden)


def as_decoder(model) -> Any:
  """A loaded model (anything with .params and .cfg) -> `Decoder`; an object that
  already has the interface (a `Decoder`, a stub) is returned as it is."""
  if all(hasattr(model, m) for m in ("prefill", "step", "head", "init_cache")):
    return model
  return Decoder(params=model.params, cfg=model.cfg)


def target_pass(target, layers: Optional[tuple], tokens: jax.Array,
                cache: Optional[KVCache] = None, positions: Optional[jax.Array] = None,
                mask: Optional[jax.Array] = None, prefill: Optional[tuple] = None):
  """One target pass and the features a drafter reads from it.

  tokens [B, T] -> (last hidden [B, T, D], cache, feats): feats is the last hidden
  itself (layers None), or the outputs of target `layers` concatenated [B, T, L*D]
  (a drafter's `caps.feature_layers`, EAGLE-3 style).
  prefill=(lengths [B], max_len) runs the prefill (no cache given); otherwise a step
  after the cache's lengths with `positions` and `mask` (None: the chain's defaults).
  """
  kw = {} if layers is None else {"collect": tuple(int(i) for i in layers)}
  if prefill is not None:
    out = target.prefill(tokens, *prefill, **kw)
  else:
    out = target.step(tokens, positions, mask, cache, **kw)
  return (out[0], out[1], out[0]) if layers is None else tuple(out[:3])
