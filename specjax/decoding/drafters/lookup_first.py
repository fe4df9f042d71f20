"""Prompt lookup first, a draft elsewhere: `LookupFirstDrafter` and its own tree.

Axes: B batch, k drafts, L lookup chain nodes, V vocab.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from specjax.decoding import tree as tree_lib
from specjax.decoding.drafters.base import Capabilities, DraftContext, DrafterBase
from specjax.decoding.drafters.ngram import best_match


def chain_needs_tree(name: str, k: int) -> str:
  return (f"The drafter {name!r} sets a lookup chain length (':L'), which only a given tree "
          f"uses: pass k and tree= (e.g. k={k}, tree='static:" + ",".join(["1"] * k)
          + "' for the draft's chain beside it), or drop ':L'.")


@dataclasses.dataclass(frozen=True)
class LookupTree:
  """The tree a `LookupFirstDrafter` round verifies: the draft's `base` tree plus a
  prompt-lookup chain of `chain` nodes under the root (`tree_lib.with_chain`). A chain
  longer than the tree's depth lets a round accept up to `reach` = max(depth, chain)
  drafts. It answers what the loop asks of a `TreeSpec`."""
  base: tree_lib.TreeSpec
  chain: int

  @property
  def kind(self) -> str:
    return self.base.kind

  @property
  def depth(self) -> int:
    return self.base.depth

  @property
  def n_nodes(self) -> int:
    return self.base.n_nodes

  @property
  def slots(self) -> int:
    return self.base.slots + self.chain

  @property
  def reach(self) -> int:
    return max(self.base.depth, self.chain)

  @property
  def verified_nodes(self) -> int:
    return self.base.n_nodes + self.chain

  @property
  def max_children(self) -> int:
    return self.base.max_children + 1  # the chain is one more child of the root

  def __str__(self) -> str:
    return f"{self.base} + a lookup chain of {self.chain}"


@flax.struct.dataclass
class LookupFirstDrafter(DrafterBase):
  """Prompt lookup where the text repeats itself, a model drafter elsewhere.

  Each round and row: when the last `min_match` or more tokens occur earlier in the row
  (the longest suffix of up to n tokens, latest match: `NgramDrafter`'s rule), draft
  their continuation (q one-hot); otherwise `base`'s proposal. The choice depends on
  the final tokens only, so verification stays exact. `base` proposes every round; its
  state must follow the verified tokens whatever was drafted (`caps.follows_verified`:
  a feature draft, rebuilt from the target's features, and early exit, the target's own
  cache). With a tree, the lookup's continuation is a chain of `chain` nodes beside it
  (0: as deep as the tree; `LookupTree`). Spec: "<draft>+ngram:N" or "<draft>+ngram:N:L".
  """
  base: Any
  n: int = flax.struct.field(pytree_node=False, default=3)
  min_match: int = flax.struct.field(pytree_node=False, default=2)
  chain: int = flax.struct.field(pytree_node=False, default=0)

  @property
  def name(self) -> str:
    length = f":{self.chain}" if self.chain else ""
    return f"{self.base.name}+ngram:{self.n}{length}"

  @property
  def caps(self) -> Capabilities:
    return dataclasses.replace(self.base.caps, follows_verified=False,
                               needs_tree=bool(self.chain))

  def validate(self, target_cfg, k: int, tree, limit: int, used: int) -> None:
    if not self.base.caps.follows_verified:
      raise ValueError(f"the base is {self.base.name!r}; prompt lookup combines with a feature "
                       "draft or early_exit:N, whose state follows the verified tokens")
    if self.chain and tree is None:
      raise ValueError(chain_needs_tree(self.name, k))
    self.base.validate(target_cfg, k, tree, limit, used)

  def round_tree(self, tree):
    """The user's tree plus a lookup chain of `chain` nodes (0: as deep as the tree)."""
    return LookupTree(base=tree, chain=self.chain or tree.depth)

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    return self.base.init(target_params, prompt, prompt_lens, max_len, hidden)

  def propose(self, state, ctx: DraftContext, key):
    drafts, q, state, cache = self.base.propose(state, ctx, key)
    looked, size = best_match(ctx.tokens, ctx.n_tokens, self.n, ctx.k)  # [B, k], [B]
    use = size >= self.min_match  # [B]
    drafts = jnp.where(use[:, None], looked, drafts)
    q = jnp.where(use[:, None, None], jax.nn.one_hot(looked, q.shape[-1], dtype=q.dtype), q)
    return drafts, q, state, cache

  def propose_tree(self, state, ctx: DraftContext, tree: LookupTree, key):
    """`base`'s tree plus the lookup's continuation as a chain under the root, tried
    first where the match is at least `min_match` tokens long (`tree_lib.with_chain`)."""
    draft, state, cache = self.base.propose_tree(state, ctx, tree.base, key)
    looked, size = best_match(ctx.tokens, ctx.n_tokens, self.n, tree.chain)  # [B, L], [B]
    return tree_lib.with_chain(draft, looked, size >= self.min_match), state, cache

  def commit(self, state, n_tokens, hidden):
    return self.base.commit(state, n_tokens, hidden)

  def passes_per_round(self, k: int) -> int:
    return self.base.passes_per_round(k)
