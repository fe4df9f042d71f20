"""An EAGLE-3 draft (`specjax.models.eagle3`, a published checkpoint) as the drafter.

Axes: B batch, S cache slots, k drafts, A aux layers, Dt target width, D draft width, V vocab.

The loop hands over the outputs of target layers `caps.feature_layers` (EAGLE-3's aux
layer ids minus one: the *inputs* of those layers, as vLLM and speculators take them),
concatenated [B, T, A*Dt]; the drafter keeps them fused (fc, [B, S, D]) by position.
At position j the draft pairs token j + 1 with the aux states of position j. Each
round: one pass over the positions whose target states arrived with the last verify
(k + 1 of them, fixed shape) yields d_1; k - 1 passes feeding back the draft's own
hidden state (the midlayer's output before the final norm; after it with norm_output)
yield d_2..d_k. Its head scores the draft vocabulary only; other ids get q = 0.
"""
from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from specjax.decoding import tree as tree_lib
from specjax.decoding.drafters.base import (Capabilities, DraftContext, DrafterBase, last_token,
                                            rows_slice, sample_chain)
from specjax.models import KVCache
from specjax.models import eagle3 as model
from specjax.models.eagle3 import Eagle3Config


@flax.struct.dataclass
class Eagle3State:
  """cache: the draft's own cache; its entries below `lengths` were built from target
  states only (entries from its own hidden states are redone next round).
  fused: [B, S, D] fc of the target's aux states by position (valid below n_tokens - 1)."""
  cache: KVCache
  fused: jax.Array


@flax.struct.dataclass
class Eagle3Drafter(DrafterBase):
  """An EAGLE-3 draft over the target's aux hidden states (chains and trees)."""
  params: Any
  cfg: Eagle3Config = flax.struct.field(pytree_node=False)
  name: str = flax.struct.field(pytree_node=False, default="eagle3")

  @property
  def caps(self) -> Capabilities:
    return Capabilities(tree_kinds=("static", "dynamic"), feature_layers=self.cfg.feature_layers,
                        follows_verified=True)

  def validate(self, target_cfg, k: int, tree, limit: int, used: int) -> None:
    del k, tree, limit, used
    cfg = self.cfg
    if target_cfg.vocab_size != cfg.vocab_size or target_cfg.d_model != cfg.target_d_model:
      raise ValueError(f"The EAGLE-3 draft {self.name!r} was made for a target of vocabulary "
                       f"{cfg.vocab_size} and width {cfg.target_d_model}; this target has "
                       f"{target_cfg.vocab_size} and {target_cfg.d_model}. Use its own target.")
    if max(cfg.aux_layers) > target_cfg.n_layers:
      raise ValueError(f"The EAGLE-3 draft {self.name!r} reads aux layers {cfg.aux_layers}, "
                       f"beyond this target's {target_cfg.n_layers} layers. Use its own target.")

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    del target_params
    want = len(self.cfg.aux_layers) * self.cfg.target_d_model
    if hidden.shape[-1] != want:
      raise ValueError(f"The EAGLE-3 draft {self.name!r} reads aux layers {self.cfg.aux_layers} "
                       f"(width {want}) but got target states of width {hidden.shape[-1]}: run "
                       "the target through specjax.models.interface.target_pass with this "
                       "drafter's caps.feature_layers.")
    b, p = prompt.shape
    g = model.fuse(self.params, self.cfg, hidden)  # [B, P, D]
    fused = jnp.zeros((b, max_len, g.shape[-1]), g.dtype).at[:, :p].set(g)
    nxt = jnp.concatenate([prompt[:, 1:], jnp.zeros_like(prompt[:, :1])], axis=1)  # token j + 1
    cache = model.init_cache(self.params, self.cfg, b, max_len)
    _, cache = model.forward(self.params, self.cfg, g, nxt, cache)
    # Position plen - 1 waits for the first generated token: the first round does it.
    return Eagle3State(cache=cache.with_lengths(prompt_lens - 1), fused=fused)

  def _catch_up(self, state: Eagle3State, ctx: DraftContext):
    """The draft over the positions whose target states arrived last round -> (its
    hidden state [B, 1, D] after the last final token, the cache)."""
    k, start = ctx.k, state.cache.lengths  # start = n_tokens - 1 - (accepted last round + 1)
    g = rows_slice(state.fused, start, k + 1)  # [B, k+1, D]
    nxt = rows_slice(ctx.tokens, start + 1, k + 1)  # [B, k+1]
    h, cache = model.forward(self.params, self.cfg, g, nxt, state.cache)
    h = jnp.take_along_axis(h, (ctx.n_tokens - 2 - start)[:, None, None], axis=1)  # [B, 1, D]
    return h, cache

  def propose(self, state: Eagle3State, ctx: DraftContext, key):
    h, cache = self._catch_up(state, ctx)
    first = model.logits(self.params, self.cfg, h)[:, 0]  # [B, V]

    def step(carry, x):
      cache, h = carry
      h, cache = model.forward(self.params, self.cfg, model.feedback(self.params, self.cfg, h),
                               x[:, None], cache)
      return model.logits(self.params, self.cfg, h)[:, 0], (cache, h)

    drafts, q, _ = sample_chain(first, (cache.with_lengths(ctx.n_tokens - 1), h), step, ctx, key)
    # Keep only entries built from target states; the verify pass brings the rest.
    return drafts, q, state.replace(cache=cache.with_lengths(ctx.n_tokens - 1)), ctx.target_cache

  def propose_tree(self, state: Eagle3State, ctx: DraftContext, tree, key):
    h, cache = self._catch_up(state, ctx)
    # Node i of depth d reads its parent's hidden state at position P + d, where
    # P = n_tokens - 2 is the root's own entry (a tree node at slot P + i).
    prefix = ctx.n_tokens - 2
    hbuf = jnp.zeros((h.shape[0], tree.slots, h.shape[-1]), h.dtype).at[:, 0].set(h[:, 0])

    def feed(carry, d, tok, nodes, parents, anc):
      cache, hbuf = carry
      hin = model.feedback(self.params, self.cfg,
                           jnp.take_along_axis(hbuf, parents[:, :, None], axis=1))  # [B, W, D]
      pos = jnp.broadcast_to(prefix[:, None] + d, tok.shape)
      out, cache = model.forward(self.params, self.cfg, hin, tok,
                                 cache.with_lengths(prefix + nodes[0]), positions=pos,
                                 mask=tree_lib.tree_mask(prefix, anc, cache.max_len))
      return model.logits(self.params, self.cfg, out), (cache, hbuf.at[:, nodes].set(out))

    draft, (cache, _) = tree_lib.expand(tree, last_token(ctx),
                                        model.logits(self.params, self.cfg, h)[:, 0],
                                        (cache, hbuf), feed, ctx.sampling, key)
    return draft, state.replace(cache=cache.with_lengths(ctx.n_tokens - 1)), ctx.target_cache

  def commit(self, state: Eagle3State, n_tokens, hidden):
    # hidden [B, k+1, A*Dt]: the verify pass's aux states at positions start .. start + k.
    g = model.fuse(self.params, self.cfg, hidden).astype(state.fused.dtype)
    fused = jax.vmap(lambda f, x, i: jax.lax.dynamic_update_slice_in_dim(f, x, i, 0))(
        state.fused, g, state.cache.lengths)
    return state.replace(fused=fused)

  def passes_per_round(self, k: int) -> int:
    return k
