"""Exact verification of a drafted tree for ONE row (vmapped), and the tree round.

Axes: B batch, N1 tree nodes (node 0 the root), V vocab, R reach, D width.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax import sampling as sampling_lib
from specjax.decoding.tree.draft import TreeDraft, ancestors, sibling_ranks, tree_mask
from specjax.models.cache import gather_path
from specjax.models.interface import target_pass

def verify_tree_row(tokens: jax.Array, parents: jax.Array, q: jax.Array, p: jax.Array,
                    key: jax.Array, depth: int, residual_update: bool = True,
                    draw_from_residual: bool = True):
  """One row: tokens, parents [N1], q [N1, V], p [N1, V] (the target at every node), key
  -> (path [depth + 1] node ids (root first; unused entries 0), n_accepted, next token).

  residual_update=False (siblings tried against p, not the residual) and
  draw_from_residual=False (the next token drawn from p after every child failed) are
  deliberately wrong rules: the negative controls of the tests.
  """
  n1 = tokens.shape[0]
  key_accept, key_next = jax.random.split(key)
  u = jax.random.uniform(key_accept, (n1 - 1,))  # one per draft node, as the chain

  def visit(state, j):
    cur, n, residual, path = state
    x = tokens[j]
    tried = parents[j] == cur  # a child of the current node
    accept = tried & (u[j - 1] * q[j, x] < residual[x])
    rest = jnp.maximum(residual - q[j], 0.0)
    mass = rest.sum()
    # Zero mass means residual == q, rejected with probability 0: keep it.
    rest = jnp.where(mass > 0, rest / jnp.where(mass > 0, mass, 1.0), residual)
    if not residual_update:
      rest = residual
    residual = jnp.where(accept, p[j], jnp.where(tried, rest, residual))
    path = jnp.where(accept, path.at[n + 1].set(j), path)
    return (jnp.where(accept, j, cur), n + accept, residual, path), None

  init = (jnp.int32(0), jnp.int32(0), p[0], jnp.zeros((depth + 1,), jnp.int32))
  (cur, n, residual, path), _ = jax.lax.scan(visit, init, jnp.arange(1, n1))
  if not draw_from_residual:
    residual = p[cur]
  return path, n, sampling_lib.sample(key_next, residual)


def verify_tree(draft: TreeDraft, p: jax.Array, key: jax.Array, depth: int, row_fn=None):
  """verify_tree_row vmapped over the batch -> (path [B, depth+1], n_acc [B], next [B])."""
  row_fn = row_fn or verify_tree_row
  keys = jax.random.split(key, draft.tokens.shape[0])
  return jax.vmap(lambda t, a, q, pp, kk: row_fn(t, a, q, pp, kk, depth))(
      draft.tokens, draft.parents, draft.q, p, keys)


def tree_round(target, drafter, draft_state, ctx, tree: TreeSpec, draft_key, verify_key,
               row_fn=None):
  """Draft a tree, score it in one target pass, verify it, gather the accepted path.

  Returns (path tokens [B, R] and their ranks among their siblings [B, R] (valid below
  n_acc), n_acc [B], next [B], the target's features along the path [B, R+1, D] (or the
  drafter's `feature_layers` concatenated), draft state, target cache) for the loop, where
  R = `tree.reach` (k, or further in a drafter's own tree: a longer lookup chain).
  """
  draft, draft_state, cache = drafter.propose_tree(draft_state, ctx, tree, draft_key)
  prefix = cache.lengths  # [B] P = n_tokens - 1: the root goes to slot P
  anc = ancestors(draft.parents, tree.reach)
  mask = tree_mask(prefix, anc, cache.max_len)  # [B, N1, S]
  hidden, cache, feats = target_pass(target, drafter.caps.feature_layers, draft.tokens, cache.with_lengths(prefix),
                                     prefix[:, None] + draft.depths, mask)  # [B, N1, D or L*D]
  p = sampling_lib.warp(target.head(hidden), ctx.sampling)  # [B, N1, V]
  path, n_acc, nxt = verify_tree(draft, p, verify_key, tree.reach, row_fn)  # path [B, R+1]
  cache = gather_path(cache, prefix, path)
  feats = jnp.take_along_axis(feats, path[:, :, None], axis=1)  # [B, R+1, D or L*D]
  drafts = jnp.take_along_axis(draft.tokens, path[:, 1:], axis=1)  # [B, R]
  ranks = jnp.take_along_axis(sibling_ranks(draft.parents), path[:, 1:], axis=1)  # [B, R]
  return drafts, ranks, n_acc, nxt, feats, draft_state, cache
