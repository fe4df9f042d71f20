"""The P-EAGLE drafter (`specjax.models.peagle`): EAGLE-3 features and mask inputs, all
k drafts from one draft pass.

Axes: B batch, S cache slots, k drafts, A aux layers, Dt target width, D draft width, V vocab.

State as the EAGLE-3 drafter's (`Eagle3State`: the draft cache, whose entries below
lengths = n - 1 were built from target states, and the fused target states by
position). A round is one pass over the k + 1 positions whose target states arrived
last round (depth 0, the last final one at n - 2 predicting d_1) and k - 1 mask elements
(depths 1 .. k - 1 predicting d_2 .. d_k); then lengths go back to n - 1. Every q_i is a
function of the context alone, so chains and trees over these parallel drafts verify
exactly (the argument is in `decoding/drafters/dflash.py`; tests/decoding/drafters/
test_peagle_drafter.py checks the law against enumeration).
"""
from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from specjax import sampling as sampling_lib
from specjax.decoding import tree as tree_lib
from specjax.decoding.drafters.base import (Capabilities, DraftContext, DrafterBase, last_token,
                                            rows_slice)
from specjax.decoding.drafters.eagle3 import Eagle3State
from specjax.models import eagle3
from specjax.models import peagle as peagle_lib


@flax.struct.dataclass
class PEagleDrafter(DrafterBase):
  """A P-EAGLE draft: one draft pass a round, k <= its n_depths."""
  params: Any
  cfg: peagle_lib.PEagleConfig = flax.struct.field(pytree_node=False)
  name: str = flax.struct.field(pytree_node=False, default="peagle")

  @property
  def caps(self) -> Capabilities:
    return Capabilities(tree_kinds=("static", "dynamic"), feature_layers=self.cfg.feature_layers,
                        follows_verified=True)

  @classmethod
  def for_target(cls, cfg: peagle_lib.PEagleConfig, params: dict, target,
                 name: str = "peagle") -> "PEagleDrafter":
    peagle_lib.check_target(cfg, target.cfg, name)
    return cls(params=params, cfg=cfg, name=name)

  def validate(self, target_cfg, k: int, tree, limit: int, used: int) -> None:
    del limit, used
    peagle_lib.check_target(self.cfg, target_cfg, self.name)
    k = k if tree is None else max(k, getattr(tree, "reach", k))  # a lookup chain reaches deeper
    if k > self.cfg.n_depths:
      raise ValueError(f"The P-EAGLE draft {self.name!r} was trained for {self.cfg.n_depths} "
                       f"parallel drafts; got k={k}. Use k <= {self.cfg.n_depths}.")

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    del target_params
    e = self.cfg.eagle3
    want = len(e.aux_layers) * e.target_d_model
    if hidden.shape[-1] != want:
      raise ValueError(f"The P-EAGLE draft {self.name!r} reads aux layers {e.aux_layers} (width "
                       f"{want}) but got target states of width {hidden.shape[-1]}: run the "
                       "target with this drafter's caps.feature_layers.")
    b, p = prompt.shape
    g = eagle3.fuse(self.params, e, hidden)  # [B, P, D]
    fused = jnp.zeros((b, max_len, g.shape[-1]), g.dtype).at[:, :p].set(g)
    nxt = jnp.concatenate([prompt[:, 1:], jnp.zeros_like(prompt[:, :1])], axis=1)  # token j + 1
    # A pass writes 2k entries from the cache's length: room for them past max_len.
    cache = eagle3.init_cache(self.params, e, b, max_len + 2 * self.cfg.n_depths)
    _, cache = eagle3.forward(self.params, e, g, nxt, cache)
    return Eagle3State(cache=cache.with_lengths(prompt_lens - 1), fused=fused)

  def _logits(self, state: Eagle3State, ctx: DraftContext) -> tuple:
    """([B, k, V] logits of d_1..d_k from one pass, the cache)."""
    k, start = ctx.k, state.cache.lengths
    g = rows_slice(state.fused, start, k + 1)  # [B, k+1, D]
    nxt = rows_slice(ctx.tokens, start + 1, k + 1)  # [B, k+1]
    logits, cache = peagle_lib.parallel_pass(self.params, self.cfg, state.cache, g, nxt,
                                             ctx.n_tokens - 2, k)
    return logits, cache.with_lengths(ctx.n_tokens - 1)

  def propose(self, state: Eagle3State, ctx: DraftContext, key):
    logits, cache = self._logits(state, ctx)
    q = sampling_lib.warp(logits, ctx.sampling)  # [B, k, V]
    return sampling_lib.sample(key, q), q, state.replace(cache=cache), ctx.target_cache

  def propose_tree(self, state: Eagle3State, ctx: DraftContext, tree, key):
    logits, cache = self._logits(state, ctx)

    def feed(carry, d, tok, nodes, parents, anc):
      del nodes, parents, anc
      return jnp.broadcast_to(logits[:, d][:, None], tok.shape + logits.shape[-1:]), carry

    draft, _ = tree_lib.expand(tree, last_token(ctx), logits[:, 0], None, feed, ctx.sampling, key)
    return draft, state.replace(cache=cache), ctx.target_cache

  def commit(self, state: Eagle3State, n_tokens, hidden):
    # hidden [B, k+1, A*Dt]: the verify pass's aux states at positions start .. start + k.
    g = eagle3.fuse(self.params, self.cfg.eagle3, hidden).astype(state.fused.dtype)
    fused = jax.vmap(lambda f, x, i: jax.lax.dynamic_update_slice_in_dim(f, x, i, 0))(
        state.fused, g, state.cache.lengths)
    return state.replace(fused=fused)

  def passes_per_round(self, k: int) -> int:
    return 1
