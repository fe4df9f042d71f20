"""The Medusa drafter: K heads on the target's last hidden state draft k <= K tokens at once.

Axes: B batch, K heads, k drafted tokens, D target width, V vocab, N1 tree nodes.

Between rounds row b holds n = n_tokens[b] final tokens; the target's hidden state at
position n - 2 (it predicted the last final token x_{n-1}) is kept in the state. Head i
reads it and predicts x_{n+i}: all k drafts come from one batched head call, with no
feeding back. Chain: draft i is head i's argmax (greedy) or a sample from head i's
warped distribution, with q_i = that distribution, which is exact because verification
accepts with min(1, p/q) for any q fixed before the target's pass. Tree (a static
`TreeSpec`): every node of depth d - 1 gets head d's top-ranked tokens as children
(one-hot q: the tree verifier's rule for deterministic children) or i.i.d. samples from
head d (q = head d's distribution); dynamic trees rank the same candidates by cumulative
head log-probability. The verify pass's hidden states (init / commit) renew the state.
"""
from __future__ import annotations

from typing import Any, Optional

import flax.struct
import jax
import jax.numpy as jnp

from specjax import sampling as sampling_lib
from specjax.decoding import tree as tree_lib
from specjax.decoding.drafters.base import Capabilities, DrafterBase
from specjax.models import medusa as medusa_lib


@flax.struct.dataclass
class MedusaState:
  """feature: [B, D] the target's hidden state at position n_tokens - 2.
  start: [B] n_tokens when the last proposal was made (the verify pass's hidden[:, 0]
  sits at position start - 1)."""
  feature: jax.Array
  start: jax.Array


@flax.struct.dataclass
class MedusaDrafter(DrafterBase):
  """Medusa heads (`specjax.models.medusa`) behind the drafter interface.

  params: the heads' weights; kernel: the support projection [D, N] gathered once from
  the target (a reduced head), or None (the target's full projection, read each round).
  """
  params: Any
  kernel: Optional[jax.Array]
  cfg: medusa_lib.MedusaConfig = flax.struct.field(pytree_node=False)
  name: str = flax.struct.field(pytree_node=False, default="medusa")
  caps = Capabilities(tree_kinds=("static", "dynamic"))

  @classmethod
  def for_target(cls, cfg: medusa_lib.MedusaConfig, params: dict, target, name: str = "medusa"):
    """Checks the heads against the target (width, vocabulary) and gathers a reduced
    head's projection columns once."""
    medusa_lib.check_target(cfg, target.cfg, name)
    kernel = None
    if "head_vocab" in params:
      kernel = medusa_lib.support_kernel(params, target.params, target.cfg)
    return cls(params=params, kernel=kernel, cfg=cfg, name=name)

  def validate(self, target_cfg, k: int, tree, limit: int, used: int) -> None:
    del tree, limit, used
    medusa_lib.check_target(self.cfg, target_cfg, self.name)
    if k > self.cfg.n_heads:
      raise ValueError(f"Medusa {self.name!r} has {self.cfg.n_heads} heads, so it drafts at "
                       f"most {self.cfg.n_heads} tokens per round; got k={k}. Use "
                       f"k <= {self.cfg.n_heads}.")

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    del target_params, max_len
    rows = jnp.arange(prompt.shape[0])
    return MedusaState(feature=hidden[rows, prompt_lens - 1], start=prompt_lens + 1)

  def _logits(self, state: MedusaState, ctx) -> jax.Array:
    """[B, K, V] every head's logits from the kept hidden state."""
    return medusa_lib.medusa_logits(self.params, ctx.target.params, ctx.target.cfg,
                                    state.feature, self.kernel)

  def propose(self, state: MedusaState, ctx, key):
    q = sampling_lib.warp(self._logits(state, ctx)[:, :ctx.k], ctx.sampling)  # [B, k, V]
    drafts = sampling_lib.sample(key, q)  # [B, k]: one independent draw per head
    return drafts, q, state.replace(start=ctx.n_tokens), ctx.target_cache

  def propose_tree(self, state: MedusaState, ctx, tree, key):
    logits = self._logits(state, ctx)  # [B, K, V]
    root = jnp.take_along_axis(ctx.tokens, (ctx.n_tokens - 1)[:, None], axis=1)[:, 0]

    def feed(carry, d, tok, nodes, parents, anc):
      del nodes, parents, anc
      # Children of depth-d nodes come from head d, whatever their parent.
      return jnp.broadcast_to(carry[:, d][:, None], tok.shape + carry.shape[-1:]), carry

    draft, _ = tree_lib.expand(tree, root, logits[:, 0], logits, feed, ctx.sampling, key)
    return draft, state.replace(start=ctx.n_tokens), ctx.target_cache

  def commit(self, state: MedusaState, n_tokens, hidden):
    # hidden [B, k+1, D] at positions start - 1 + j; keep the one at n_tokens - 2.
    j = n_tokens - 1 - state.start  # [B]; -1 for a row that gained nothing (finished)
    new = jnp.take_along_axis(hidden, jnp.clip(j, 0, hidden.shape[1] - 1)[:, None, None],
                              axis=1)[:, 0]
    feature = jnp.where((j >= 0)[:, None], new.astype(state.feature.dtype), state.feature)
    return state.replace(feature=feature)

  def passes_per_round(self, k: int) -> int:
    return 1  # one batched call of the heads (no attention, no cache)
