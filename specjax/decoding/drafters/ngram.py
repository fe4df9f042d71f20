"""Prompt lookup: the continuation of an earlier match of the row's last tokens.

Axes: S token slots, k drafts, m candidate matches, B batch, N1 tree nodes.

`ngram_matches` is the one n-gram kernel: the m best earlier matches of the longest
suffix of up to max_n tokens (longest first, then latest; one per continuation start).
`NgramDrafter` drafts its best match as a chain, or several matches as a static tree's
branches; `LookupFirstDrafter` (`lookup_first.py`) uses the best match beside a draft.
"""
from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding import tree as tree_lib
from specjax.decoding.drafters.base import (Capabilities, DraftContext, DrafterBase, SpecError,
                                            last_token)


def ngram_matches(row: jax.Array, n_tokens: jax.Array, max_n: int, k: int,
                  m: int = 1) -> tuple[jax.Array, jax.Array]:
  """row [S], n_tokens scalar -> (continuations [m, k], matched suffix lengths [m], 0 for
  none). Where the continuation runs into the end of the text it repeats with the match's
  period; where there is no match it repeats the last token."""
  s = row.shape[0]
  starts = jnp.arange(s)
  score = jnp.full((s,), -1, jnp.int32)
  size_at = jnp.zeros((s,), jnp.int32)
  for size in range(max_n, 0, -1):
    tail = jax.lax.dynamic_slice_in_dim(row, jnp.maximum(n_tokens - size, 0), size)  # [size]
    windows = jnp.stack([jnp.roll(row, -t) for t in range(size)], axis=1)  # [S, size]
    ok = jnp.all(windows == tail[None, :], axis=1) & (starts + size < n_tokens) \
        & (n_tokens >= size)
    sc = jnp.where(ok, size * s + starts, -1)
    better = sc > score
    score, size_at = jnp.where(better, sc, score), jnp.where(better, size, size_at)
  # Matches continuing from the same place propose the same tokens: keep the best one.
  conts = jnp.clip(starts + size_at, 0, s - 1)
  best = jnp.full((s,), -1, jnp.int32).at[conts].max(score)
  score = jnp.where(best[conts] == score, score, -1)
  top, j = jax.lax.top_k(score, m)  # [m]
  cont = j + size_at[j]
  period = jnp.maximum(n_tokens - cont, 1)
  src = cont[:, None] + jnp.arange(k)[None] % period[:, None]  # [m, k]
  fallback = row[jnp.maximum(n_tokens - 1, 0)]
  found = top >= 0
  tokens = jnp.where(found[:, None], row[jnp.clip(src, 0, s - 1)], fallback).astype(jnp.int32)
  return tokens, jnp.where(found, size_at[j], 0).astype(jnp.int32)


def best_match(tokens: jax.Array, n_tokens: jax.Array, max_n: int,
               k: int) -> tuple[jax.Array, jax.Array]:
  """tokens [B, S], n_tokens [B] -> (k drafts [B, k], matched suffix length [B])."""
  conts, sizes = jax.vmap(lambda row, n: ngram_matches(row, n, max_n, k))(tokens, n_tokens)
  return conts[:, 0], sizes[:, 0]


@flax.struct.dataclass
class NgramDrafter(DrafterBase):
  """Prompt lookup of the last n..1 tokens: no model, no state; q is one-hot."""
  n: int = flax.struct.field(pytree_node=False, default=3)
  caps = Capabilities(tree_kinds=("static",))

  @property
  def name(self) -> str:
    return f"ngram:{self.n}"

  @classmethod
  def from_spec(cls, arg) -> "NgramDrafter":
    """None (plain 'ngram': n = 3) or 'N' (of 'ngram:N')."""
    if arg is not None and not arg.strip().isdigit():
      raise SpecError(f"the n-gram size {arg!r} is not a positive integer")
    n = 3 if arg is None else int(arg)
    if n < 1:
      raise SpecError("the n-gram size must be >= 1")
    return cls(n=n)

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    return ()

  def propose(self, state, ctx: DraftContext, key):
    del key
    drafts, _ = best_match(ctx.tokens, ctx.n_tokens, self.n, ctx.k)
    q = jax.nn.one_hot(drafts, ctx.target.vocab_size, dtype=jnp.float32)
    return drafts, q, state, ctx.target_cache

  def propose_tree(self, state, ctx: DraftContext, tree, key):
    """Several earlier matches as branches: node i follows match `branch_ids[i]`."""
    del key
    branch, depths = tree.branch_ids(), np.asarray(tree.depths)
    conts = jax.vmap(lambda row, n: ngram_matches(row, n, self.n, ctx.k, int(branch.max()) + 1)[0])(
        ctx.tokens, ctx.n_tokens)  # [B, M, k]
    tokens = jnp.concatenate([last_token(ctx)[:, None], conts[:, branch[1:], depths[1:] - 1]], axis=1)
    b, n1 = tokens.shape
    draft = tree_lib.TreeDraft(
        tokens=tokens, parents=jnp.broadcast_to(jnp.asarray(tree.parents, jnp.int32), (b, n1)),
        depths=jnp.broadcast_to(jnp.asarray(depths, jnp.int32), (b, n1)),
        q=jax.nn.one_hot(tokens, ctx.target.vocab_size, dtype=jnp.float32).at[:, 0].set(0.0))
    return draft, state, ctx.target_cache

  def commit(self, state, n_tokens, hidden):
    return state

  def passes_per_round(self, k: int) -> int:
    return 0
