"""A separate small causal LM with the target's vocabulary as the drafter.

Axes: B batch, T0 first-step tokens, k drafts, V vocab, S cache slots.
"""
from __future__ import annotations

from typing import Any, Optional

import flax.struct
import jax
import jax.numpy as jnp

from specjax.decoding import tree as tree_lib
from specjax.decoding.drafters.base import (Capabilities, DraftContext, DrafterBase, last_token,
                                            rows_slice, sample_chain)
from specjax.models import KVCache, ModelConfig
from specjax.models.interface import Decoder


def draft_autoregressive(model, cache: KVCache, first: jax.Array, first_idx: jax.Array,
                         n_tokens: jax.Array, ctx: DraftContext, key: jax.Array,
                         n_layers: Optional[int] = None
                         ) -> tuple[jax.Array, jax.Array, KVCache]:
  """k draft steps of a causal LM `model` (the model interface); the first step feeds
  `first` [B, T0] tokens.

  first_idx [B] picks which of the T0 first-step positions predicts the next token
  (a draft cache can lag the target by one token after a fully accepted round).
  Returns drafts [B, k], q [B, k, V] and the cache holding n_tokens + k - 1 entries.
  """
  hidden, cache = model.step(first, None, None, cache, n_layers)  # [B, T0, D]
  hidden = jnp.take_along_axis(hidden, first_idx[:, None, None], axis=1)  # [B, 1, D]
  logits = model.head(hidden)[:, 0]  # [B, V]

  def step(cache, x):
    hidden, cache = model.step(x[:, None], None, None, cache, n_layers)
    return model.head(hidden)[:, 0], cache

  return sample_chain(logits, cache.with_lengths(n_tokens), step, ctx, key)


def lm_feed(model, prefix: jax.Array, n_layers: Optional[int] = None):
  """A tree's per-depth draft pass for a causal LM (the model interface): the W nodes
  of depth d at slots prefix + nodes, positions prefix + d, seeing prefix and ancestors."""
  def feed(cache, d, tok, nodes, parents, anc):
    del parents
    pos = jnp.broadcast_to(prefix[:, None] + d, tok.shape)
    mask = tree_lib.tree_mask(prefix, anc, cache.max_len)
    hidden, cache = model.step(tok, pos, mask, cache.with_lengths(prefix + nodes[0]), n_layers)
    return model.head(hidden), cache
  return feed


@flax.struct.dataclass
class ModelDrafter(DrafterBase):
  """A separate small causal LM with the target's vocabulary; state is its own cache."""
  params: Any
  cfg: ModelConfig = flax.struct.field(pytree_node=False)
  name: str = flax.struct.field(pytree_node=False, default="draft")
  caps = Capabilities(tree_kinds=("static", "dynamic"), mesh_split=True)

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    del target_params, hidden
    return self.model.prefill(prompt, prompt_lens, max_len)[1]

  @property
  def model(self) -> Decoder:
    return Decoder(params=self.params, cfg=self.cfg)

  def propose(self, state: KVCache, ctx: DraftContext, key):
    # The draft cache lags by one or two tokens; refeed two from its length on.
    start = state.lengths
    first = rows_slice(ctx.tokens, start, 2)  # [B, 2]
    first_idx = ctx.n_tokens - 1 - start  # 0 or 1
    drafts, q, state = draft_autoregressive(self.model, state, first, first_idx, ctx.n_tokens,
                                            ctx, key)
    return drafts, q, state, ctx.target_cache

  def propose_tree(self, state: KVCache, ctx: DraftContext, tree, key):
    # The draft cache lags by 1 to k + 1 tokens after a tree round; refeed k + 1.
    start = state.lengths
    hidden, cache = self.model.step(rows_slice(ctx.tokens, start, ctx.k + 1), None, None, state)
    hidden = jnp.take_along_axis(hidden, (ctx.n_tokens - 1 - start)[:, None, None], axis=1)
    draft, cache = tree_lib.expand(tree, last_token(ctx), self.model.head(hidden)[:, 0], cache,
                                   lm_feed(self.model, ctx.n_tokens - 1), ctx.sampling, key)
    # Only the root's entry is in order; the accepted path is refed next round.
    return draft, cache.with_lengths(ctx.n_tokens), ctx.target_cache

  def commit(self, state: KVCache, n_tokens, hidden):
    return state.with_lengths(jnp.minimum(state.lengths, n_tokens - 1))

  def passes_per_round(self, k: int) -> int:
    return k
