"""The round kinds behind one call: a chain, a token tree, or a drafter's own pass.

Axes: B batch, k drafts, R reach (the most drafts a round accepts), V vocab, D width.

Every kind returns the same tuple, `round_step`'s: (drafts [B, R] along the accepted
path, their sibling ranks [B, R] (valid below n_acc), n_acc [B], next token [B], the
target's features along the path [B, R+1, D], the draft state, the target cache).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax import sampling as sampling_lib
from specjax.decoding import tree as tree_lib
from specjax.decoding.verify import verify_batch, verify_row
from specjax.models.interface import target_pass


def greedy_verify(drafts: jax.Array, logits: jax.Array):
  """drafts [B, k], logits [B, k+1, V] -> (n_accepted [B], next [B]): what `verify_row`
  gives with greedy (one-hot) p, from the argmaxes alone."""
  best = sampling_lib.argmax(logits)  # [B, k+1]
  n = jnp.sum(jnp.cumprod((drafts == best[:, :-1]).astype(jnp.int32), axis=1), axis=1)
  return n.astype(jnp.int32), jnp.take_along_axis(best, n[:, None], axis=1)[:, 0]


def chain_round(target, drafter, draft_state, ctx, draft_key, verify_key, verifier=verify_row):
  """The drafter proposes k tokens; the target scores [last, d_1..d_k] in one pass."""
  drafts, q, draft_state, cache = drafter.propose(draft_state, ctx, draft_key)  # [B,k], [B,k,V]
  last = jnp.take_along_axis(ctx.tokens, (ctx.n_tokens - 1)[:, None], axis=1)  # [B, 1]
  hidden, cache, feats = target_pass(target, drafter.caps.feature_layers,
                                     jnp.concatenate([last, drafts], 1), cache)  # [B, k+1, D]
  logits = target.head(hidden)
  if ctx.sampling.greedy and verifier is verify_row:  # exact match: argmaxes, no one-hots
    n_acc, nxt = greedy_verify(drafts, logits)
  else:
    p = sampling_lib.warp(logits, ctx.sampling)  # [B, k+1, V]
    n_acc, nxt = verify_batch(drafts, q, p, verify_key, verifier)
  return drafts, jnp.zeros_like(drafts), n_acc, nxt, feats, draft_state, cache


def round_step(target, drafter, draft_state, ctx, tree, draft_key, verify_key,
               verifier=verify_row):
  """One round of the kind the drafter's `caps` and `tree` select."""
  if drafter.caps.owns_pass:  # e.g. lookahead: drafts and verifies in its own pass
    return drafter.round(target, draft_state, ctx, draft_key, verify_key)
  if tree is None:
    return chain_round(target, drafter, draft_state, ctx, draft_key, verify_key, verifier)
  tree_rule = None if verifier is verify_row else verifier
  return tree_lib.tree_round(target, drafter, draft_state, ctx, tree, draft_key, verify_key,
                             tree_rule)
