"""The DFlash drafter (`specjax.models.dflash`): a whole block of drafts from one pass.

Axes: B batch, S cache slots, N block size, k drafts, V vocab, L*D aux features.

Between rounds row b holds n = n_tokens[b] final tokens, and the draft's cache holds the
context entries (the target's aux features through the draft's fc and each layer's k/v
projections) of positions 0 .. n - 2, lengths = n - 1. A round runs the block
[x_{n-1}, mask, ..., mask] at positions n - 1 .. n + N - 2 over that context once: slot
`first_slot` + i gives the distribution q_i of draft i (the token at position n + i). The
block's own entries are not kept; the verify pass's features at the accepted positions
become the next context (`commit`).

Why a chain of parallel drafts is exact. Every q_i comes from the same pass, so it is a
function of the context x_{<n} alone, and d_i ~ q_i is drawn with its own key: the d_i are
independent given the context. Verification accepts d_i with min(1, p_i(d_i) / q_i(d_i)),
where p_i = p(. | x_{<n}, d_1..d_{i-1}), and on rejection draws from
norm(max(0, p_i - q_i)). Whether position i is reached depends on d_{<i} and earlier
uniforms only, which are independent of d_i, so conditional on reaching i (and on
d_{<i}), d_i is still distributed q_i, and the usual argument gives
P(emit x) = min(q_i(x), p_i(x)) + (1 - sum_y min(q_i(y), p_i(y))) norm(max(0, p_i - q_i))(x)
= p_i(x). What matters is that q_i is the distribution d_i was sampled from: ids outside
a draft vocabulary have q = 0 (never drawn, never "accepted"), and a q conditioned on
anything else (an earlier draft that may be rejected, the unmapped logits) breaks it
(tests/decoding/drafters/test_dflash_drafter.py checks the law against exact enumeration, with
such a control). Trees: the children of a depth-d node are the top tokens of q_{d+1}
(one-hot q, the rejected mass removed) or i.i.d. draws from q_{d+1}, which does not
depend on the parent; either way the tree rule (`decoding/tree/verify.py`) stays exact.
"""
from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from specjax import sampling as sampling_lib
from specjax.decoding import tree as tree_lib
from specjax.decoding.drafters.base import Capabilities, DraftContext, DrafterBase, last_token
from specjax.models import KVCache
from specjax.models import dflash as dflash_lib


@flax.struct.dataclass
class DFlashState:
  """cache: the context entries of every draft layer; slots < lengths (= n_tokens - 1)
  hold positions 0 .. n_tokens - 2 (the block's are written past them and dropped)."""
  cache: KVCache


@flax.struct.dataclass
class DFlashDrafter(DrafterBase):
  """A DFlash draft behind the drafter interface: one draft pass a round, k <= its
  n_drafts (block_size - 1, or block_size with sample_from_anchor)."""
  params: Any
  cfg: dflash_lib.DFlashConfig = flax.struct.field(pytree_node=False)
  name: str = flax.struct.field(pytree_node=False, default="dflash")

  @property
  def caps(self) -> Capabilities:
    return Capabilities(tree_kinds=("static", "dynamic"), feature_layers=self.cfg.feature_layers,
                        follows_verified=True)

  @classmethod
  def for_target(cls, cfg: dflash_lib.DFlashConfig, params: dict, target,
                 name: str = "dflash") -> "DFlashDrafter":
    dflash_lib.check_target(cfg, target.cfg, name)
    return cls(params=params, cfg=cfg, name=name)

  def validate(self, target_cfg, k: int, tree, limit: int, used: int) -> None:
    dflash_lib.check_target(self.cfg, target_cfg, self.name)
    n = self.cfg.n_drafts
    k = k if tree is None else max(k, getattr(tree, "reach", k))  # a lookup chain reaches deeper
    if k > n:
      raise ValueError(f"The DFlash draft {self.name!r} predicts {n} tokens per pass (block_size "
                       f"{self.cfg.block_size}); got k={k}. Use k <= {n}.")
    if used + self.cfg.block_size > limit:
      raise ValueError(f"The DFlash draft {self.name!r} runs a block of {self.cfg.block_size} "
                       f"positions after up to {used} tokens, past the cache limit of {limit} "
                       "positions: shorten the prompt or max_new_tokens, or raise max_cache_len.")

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    del target_params
    want = len(self.cfg.aux_layer_ids) * self.cfg.layers.d_model
    if hidden.shape[-1] != want:
      raise ValueError(f"The DFlash draft {self.name!r} reads target layers "
                       f"{self.cfg.feature_layers} (width {want}) but got features of width "
                       f"{hidden.shape[-1]}: run the target with this drafter's feature_layers.")
    b = prompt.shape[0]
    # The block needs block_size slots after the last context entry.
    cache = KVCache.init(self.cfg.layers, b, max_len + self.cfg.block_size,
                         self.params["fc"]["kernel"].dtype)
    cache = dflash_lib.write_context(self.params, self.cfg, cache, hidden,
                                     jnp.zeros((b,), jnp.int32))
    return DFlashState(cache=cache.with_lengths(prompt_lens))  # context: the whole prompt

  def block(self, state: DFlashState, ctx: DraftContext) -> jax.Array:
    """[B, k, V] the logits of drafts 1..k from one pass of the block."""
    logits = dflash_lib.block_logits(self.params, self.cfg, state.cache, last_token(ctx))
    first = self.cfg.first_slot
    return logits[:, first:first + ctx.k]

  def propose(self, state: DFlashState, ctx: DraftContext, key):
    q = sampling_lib.warp(self.block(state, ctx), ctx.sampling)  # [B, k, V]
    drafts = sampling_lib.sample(key, q)  # [B, k]: independent draws, one uniform each
    return drafts, q, state, ctx.target_cache

  def propose_tree(self, state: DFlashState, ctx: DraftContext, tree, key):
    logits = self.block(state, ctx)  # [B, k, V]: depth d + 1's distribution is logits[:, d]

    def feed(carry, d, tok, nodes, parents, anc):
      del nodes, parents, anc
      return jnp.broadcast_to(logits[:, d][:, None], tok.shape + logits.shape[-1:]), carry

    draft, _ = tree_lib.expand(tree, last_token(ctx), logits[:, 0], None, feed, ctx.sampling, key)
    return draft, state, ctx.target_cache

  def commit(self, state: DFlashState, n_tokens, hidden):
    # hidden [B, R+1, L*D]: the verify pass's features at positions lengths .. + R (the
    # anchor and the drafts along the accepted path); those below n_tokens - 1 are final.
    cache = dflash_lib.write_context(self.params, self.cfg, state.cache, hidden,
                                     state.cache.lengths)
    return DFlashState(cache=cache.with_lengths(n_tokens - 1))

  def passes_per_round(self, k: int) -> int:
    return 1
