"""An EAGLE-style feature draft (`specjax.models.feature_draft`) as the drafter.

Axes: B batch, S cache slots, k drafts, D width (L*D with several feature layers), V vocab.
"""
from __future__ import annotations

from typing import Any, Optional

import flax.struct
import jax
import jax.numpy as jnp

from specjax.decoding import tree as tree_lib
from specjax.decoding.drafters.base import (Capabilities, DraftContext, DrafterBase, last_token,
                                            rows_slice, sample_chain)
from specjax.models import KVCache, ModelConfig, feature_forward
from specjax.models.feature_draft import (SPECJAX_STYLE, FeatureStyle, draft_head,
                                          feature_layers_of, target_features)


@flax.struct.dataclass
class FeatureDraftState:
  """cache: the draft's own cache; its entries below `lengths` were built from target
  features only (entries from the draft's predicted features are redone next round).
  features: [B, S, D] the target's features by position (valid below n_tokens - 1)."""
  cache: KVCache
  features: jax.Array


@flax.struct.dataclass
class FeatureDrafter(DrafterBase):
  """An EAGLE-style draft over the target's features.

  Each round: one pass over the positions whose target features arrived with the last
  verify (up to k + 1 of them, fixed shape) yields d_1; k - 1 passes feeding back the
  draft's own predicted features yield d_2..d_k.
  """
  params: Any
  cfg: ModelConfig = flax.struct.field(pytree_node=False)
  name: str = flax.struct.field(pytree_node=False, default="feature draft")
  # Target layers whose outputs the loop hands over as `hidden` (concatenated, EAGLE-3
  # style); None: the last layer only.
  feature_layers: Optional[tuple] = flax.struct.field(pytree_node=False, default=None)
  # How fc reads its inputs (`feature_draft.FeatureStyle`): specjax's, or EAGLE-1's.
  style: FeatureStyle = flax.struct.field(pytree_node=False, default=SPECJAX_STYLE)

  @property
  def caps(self) -> Capabilities:
    return Capabilities(tree_kinds=("static", "dynamic"), feature_layers=self.feature_layers,
                        follows_verified=True, mesh_split=True)

  @classmethod
  def of(cls, params, cfg: ModelConfig, name: str = "feature draft") -> "FeatureDrafter":
    """The drafter of a feature draft's params (its feature layers read from them)."""
    return cls(params=params, cfg=cfg, name=name, feature_layers=feature_layers_of(params))

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    del target_params
    want = None if self.feature_layers is None else len(self.feature_layers) * self.cfg.d_model
    if want is not None and hidden.shape[-1] != want:  # else it would skip fc_layers silently
      raise ValueError(f"The feature draft {self.name!r} reads target layers "
                       f"{self.feature_layers} (width {want}) but got features of width "
                       f"{hidden.shape[-1]}: run the target through "
                       "specjax.models.interface.target_pass with this drafter's feature layers.")
    hidden = target_features(self.params, self.style, hidden)
    b, p = prompt.shape
    features = jnp.zeros((b, max_len, hidden.shape[-1]), hidden.dtype).at[:, :p].set(hidden)
    nxt = jnp.concatenate([prompt[:, 1:], jnp.zeros_like(prompt[:, :1])], axis=1)  # token j + 1
    cache = KVCache.init(self.cfg, b, max_len, self.params["embed"].dtype)
    _, cache = self._forward(hidden, nxt, cache)
    # Position plen - 1 waits for the first generated token: the first round does it.
    return FeatureDraftState(cache=cache.with_lengths(prompt_lens - 1), features=features)

  def _forward(self, features, next_tokens, cache, **kw):
    return feature_forward(self.params, self.cfg, features, next_tokens, cache, style=self.style,
                           **kw)

  def _head(self, f):
    return draft_head(self.params, self.cfg, f)

  def _catch_up(self, state: FeatureDraftState, ctx: DraftContext):
    """The draft over the positions whose target features arrived last round -> (the
    predicted feature [B, 1, D] after the last final token, the cache)."""
    k, start = ctx.k, state.cache.lengths  # start = n_tokens - 1 - (accepted last round + 1)
    feats = rows_slice(state.features, start, k + 1)  # [B, k+1, D]
    nxt = rows_slice(ctx.tokens, start + 1, k + 1)  # [B, k+1]
    pred, cache = self._forward(feats, nxt, state.cache)
    f = jnp.take_along_axis(pred, (ctx.n_tokens - 2 - start)[:, None, None], axis=1)  # [B, 1, D]
    return f, cache

  def propose(self, state: FeatureDraftState, ctx: DraftContext, key):
    f, cache = self._catch_up(state, ctx)
    logits = self._head(f)[:, 0]  # [B, V]

    def step(carry, x):
      cache, f = carry
      f, cache = self._forward(f, x[:, None], cache)
      return self._head(f)[:, 0], (cache, f)

    drafts, q, (cache, _) = sample_chain(logits, (cache.with_lengths(ctx.n_tokens - 1), f), step,
                                         ctx, key)
    # Keep only entries built from target features; the verify pass brings the rest.
    state = FeatureDraftState(cache=cache.with_lengths(ctx.n_tokens - 1), features=state.features)
    return drafts, q, state, ctx.target_cache

  def propose_tree(self, state: FeatureDraftState, ctx: DraftContext, tree, key):
    f, cache = self._catch_up(state, ctx)
    # Node i of depth d reads its parent's predicted feature at position P + d, where
    # P = n_tokens - 2 is the root's own entry (a tree node at slot P + i).
    prefix = ctx.n_tokens - 2
    fbuf = jnp.zeros((f.shape[0], tree.slots, f.shape[-1]), f.dtype).at[:, 0].set(f[:, 0])

    def feed(carry, d, tok, nodes, parents, anc):
      cache, fbuf = carry
      fin = jnp.take_along_axis(fbuf, parents[:, :, None], axis=1)  # [B, W, D]
      pos = jnp.broadcast_to(prefix[:, None] + d, tok.shape)
      out, cache = self._forward(fin, tok, cache.with_lengths(prefix + nodes[0]), positions=pos,
                                 mask=tree_lib.tree_mask(prefix, anc, cache.max_len))
      return self._head(out), (cache, fbuf.at[:, nodes].set(out))

    draft, (cache, _) = tree_lib.expand(tree, last_token(ctx), self._head(f)[:, 0],
                                        (cache, fbuf), feed, ctx.sampling, key)
    state = FeatureDraftState(cache=cache.with_lengths(ctx.n_tokens - 1), features=state.features)
    return draft, state, ctx.target_cache

  def commit(self, state: FeatureDraftState, n_tokens, hidden):
    # hidden [B, k+1, D]: the verify pass's features at positions start .. start + k.
    hidden = target_features(self.params, self.style, hidden)
    features = jax.vmap(lambda f, h, i: jax.lax.dynamic_update_slice_in_dim(f, h, i, 0))(
        state.features, hidden.astype(state.features.dtype), state.cache.lengths)
    return state.replace(features=features)

  def passes_per_round(self, k: int) -> int:
    return k
