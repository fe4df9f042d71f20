"""Early exit: the target's first n layers with its final norm and head as the drafter."""
from __future__ import annotations

import flax.struct
import jax.numpy as jnp

from specjax.decoding import tree as tree_lib
from specjax.decoding.drafters.base import (Capabilities, DraftContext, DrafterBase, SpecError,
                                            last_token, rows_slice)
from specjax.decoding.drafters.model import draft_autoregressive, lm_feed


@flax.struct.dataclass
class EarlyExitDrafter(DrafterBase):
  """The target's first `n_layers` blocks with its final norm and head.

  Shares the target's weights and the first n_layers of its cache: drafting writes
  those layers' entries, and the verify pass then rewrites them with the same values.
  """
  n_layers: int = flax.struct.field(pytree_node=False)
  caps = Capabilities(tree_kinds=("static", "dynamic"), follows_verified=True)

  @property
  def name(self) -> str:
    return f"early_exit:{self.n_layers}"

  @classmethod
  def from_spec(cls, arg: str, target_cfg) -> "EarlyExitDrafter":
    """'N' (of 'early_exit:N'), 1 <= N < the target's layers."""
    if not arg.isdigit() or not 1 <= int(arg) < target_cfg.n_layers:
      raise SpecError("give the number of target layers to keep, between 1 and "
                       f"{target_cfg.n_layers - 1}, e.g. 'early_exit:8'")
    return cls(n_layers=int(arg))

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    return ()

  def propose(self, state, ctx: DraftContext, key):
    lengths = ctx.target_cache.lengths
    view = ctx.target_cache.first_layers(self.n_layers)
    first = rows_slice(ctx.tokens, ctx.n_tokens - 1, 1)  # [B, 1]: the last final token
    drafts, q, view = draft_autoregressive(ctx.target, view, first, jnp.zeros_like(lengths),
                                           ctx.n_tokens, ctx, key, n_layers=self.n_layers)
    cache = ctx.target_cache.merge_first_layers(view).with_lengths(lengths)
    return drafts, q, state, cache

  def propose_tree(self, state, ctx: DraftContext, tree, key):
    lengths = ctx.target_cache.lengths  # P: the root goes to slot P
    view = ctx.target_cache.first_layers(self.n_layers)
    hidden, view = ctx.target.step(last_token(ctx)[:, None], None, None, view, self.n_layers)
    draft, view = tree_lib.expand(tree, last_token(ctx), ctx.target.head(hidden)[:, 0], view,
                                  lm_feed(ctx.target, lengths, self.n_layers), ctx.sampling, key)
    # The verify pass rewrites these layers' tree slots with the same values.
    return draft, state, ctx.target_cache.merge_first_layers(view).with_lengths(lengths)

  def commit(self, state, n_tokens, hidden):
    return state

  def passes_per_round(self, k: int) -> int:
    return k
