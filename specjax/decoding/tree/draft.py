"""Drafting a token tree in fixed shapes: ancestor masks, `TreeDraft`, expansion.

Axes: B batch, N1 tree nodes (node 0 the root), W nodes of one depth, V vocab, S cache
slots, L chain nodes.
"""
from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from specjax import sampling as sampling_lib
from specjax.decoding.tree.spec import TreeSpec

def ancestors(parents: jax.Array, depth: int) -> jax.Array:
  """parents [..., N1] -> anc [..., N1, N1]: anc[i, j] = j is i or an ancestor of i."""
  n1 = parents.shape[-1]
  cur = jnp.broadcast_to(jnp.arange(n1), parents.shape)
  anc = jnp.zeros(parents.shape + (n1,), bool)
  for _ in range(depth + 1):
    anc = anc | jax.nn.one_hot(cur, n1, dtype=bool)
    cur = jnp.take_along_axis(parents, cur, axis=-1)
  return anc


def sibling_ranks(parents: jax.Array) -> jax.Array:
  """parents [B, N1] -> [B, N1]: how many earlier nodes share each node's parent."""
  n1 = parents.shape[-1]
  same = parents[:, :, None] == parents[:, None, :]  # [B, N1, N1]
  earlier = (jnp.arange(n1)[None, :] < jnp.arange(n1)[:, None]) & (jnp.arange(n1) > 0)[None]
  return jnp.sum(same & earlier, axis=-1).astype(jnp.int32)


def tree_mask(prefix: jax.Array, anc: jax.Array, n_slots: int) -> jax.Array:
  """prefix [B] (P), anc [B, T, N1] rows of the fed nodes -> mask [B, T, S]: the prefix
  slots and the slots P + j of the node's ancestors j (itself included)."""
  s = jnp.arange(n_slots)[None]  # [1, S]
  rel = s - prefix[:, None]  # [B, S]
  n1 = anc.shape[-1]
  idx = jnp.broadcast_to(jnp.clip(rel, 0, n1 - 1)[:, None], anc.shape[:2] + (n_slots,))
  in_tree = ((rel >= 0) & (rel < n1))[:, None]
  return (rel < 0)[:, None] | (in_tree & jnp.take_along_axis(anc, idx, axis=2))




@flax.struct.dataclass
class TreeDraft:
  """A drafted tree per row: node 0 is the root (the last final token).

  tokens [B, N1], parents [B, N1] (parents[:, 0] = 0), depths [B, N1], q [B, N1, V]:
  the distribution node i was drawn from as its parent's child (one-hot for top-k
  children; row 0 unused)."""
  tokens: jax.Array
  parents: jax.Array
  depths: jax.Array
  q: jax.Array


def expand(tree: TreeSpec, root: jax.Array, root_logits: jax.Array, carry, feed, sampling,
           key: jax.Array) -> tuple:
  """Drafts a tree from the draft's root distribution, one depth at a time.

  root [B], root_logits [B, V]. feed(carry, d, tokens [B, W], nodes [W] (their slot
  offsets), parents [B, W], anc [B, W, N1]) -> (logits [B, W, V], carry) runs the
  draft over the W nodes of depth d (k - 1 calls). Returns (TreeDraft, carry).
  """
  if tree.kind == "dynamic":
    return _expand_dynamic(tree, root, root_logits, carry, feed, key)
  b, v = root_logits.shape
  n1 = tree.n_nodes + 1
  parents = jnp.broadcast_to(jnp.asarray(tree.parents, jnp.int32), (b, n1))
  anc = ancestors(parents, tree.depth)
  tokens = jnp.zeros((b, n1), jnp.int32).at[:, 0].set(root)
  q = jnp.zeros((b, n1, v), jnp.float32)
  logits = root_logits[:, None]  # [B, W_{d-1}, V]
  keys = jax.random.split(key, tree.depth)
  sample_children = tree.children == "sample" and not sampling.greedy
  for d in range(1, tree.depth + 1):
    lo, hi, par, rank = tree.level(d)
    if sample_children:
      qd = sampling_lib.warp(logits, sampling)[:, par]  # [B, W, V]: i.i.d. siblings
      tok = sampling_lib.sample(keys[d - 1], qd)  # [B, W]
    else:
      top = jax.lax.top_k(logits, int(rank.max()) + 1)[1]  # [B, W_{d-1}, R]
      tok = top[:, par, rank].astype(jnp.int32)  # [B, W]
      qd = jax.nn.one_hot(tok, v, dtype=jnp.float32)
    tokens = tokens.at[:, lo:hi].set(tok)
    q = q.at[:, lo:hi].set(qd)
    if d < tree.depth:
      logits, carry = feed(carry, d, tok, np.arange(lo, hi), parents[:, lo:hi], anc[:, lo:hi])
  depths = jnp.broadcast_to(jnp.asarray(tree.depths, jnp.int32), (b, n1))
  return TreeDraft(tokens=tokens, parents=parents, depths=depths, q=q), carry


def _expand_dynamic(tree: TreeSpec, root, root_logits, carry, feed, key):
  """EAGLE-2: per depth expand the `beam` best nodes by cumulative log-probability with
  their top `beam` children; keep the best N of all candidates (ancestor-closed)."""
  del key
  b, v = root_logits.shape
  m, k = tree.beam, tree.depth
  # Drafting layout: slot 0 the root, then the beam of depths 1 .. k - 1 (m each).
  n_feed = 1 + (k - 1) * m
  logp = jax.nn.log_softmax(root_logits.astype(jnp.float32))  # [B, V]
  top_lp, top_tok = jax.lax.top_k(logp, m)  # [B, m]
  cand_tok, cand_score, cand_par = [top_tok], [top_lp], [jnp.zeros((b, m), jnp.int32)]
  cand_depth = [1]
  # Candidate ids: 0 the root, then depth by depth; beam_ids: candidate id of each fed slot.
  beam_tok, beam_score = top_tok, top_lp
  beam_cand = 1 + jnp.broadcast_to(jnp.arange(m), (b, m))  # candidate ids of the beam
  feed_parents = jnp.zeros((b, n_feed), jnp.int32)  # in feed slots
  beam_slot_par = jnp.zeros((b, m), jnp.int32)  # the beam's parents' feed slots
  next_id = 1 + m
  eps = 1e-4  # a child never ties its parent: the kept set is closed under ancestors
  for d in range(1, k):
    lo = 1 + (d - 1) * m
    slots = np.arange(lo, lo + m)
    feed_parents = feed_parents.at[:, lo:lo + m].set(beam_slot_par)
    anc = ancestors(feed_parents, k)[:, lo:lo + m]  # [B, m, n_feed]
    logits, carry = feed(carry, d, beam_tok, slots, beam_slot_par, anc)  # [B, m, V]
    lp = jax.nn.log_softmax(logits.astype(jnp.float32))
    c_lp, c_tok = jax.lax.top_k(lp, m)  # [B, m, m]
    c_score = (beam_score[:, :, None] + c_lp - eps).reshape(b, m * m)
    c_tok = c_tok.reshape(b, m * m)
    c_par = jnp.repeat(beam_cand, m, axis=1)  # [B, m*m] candidate id of each parent
    cand_tok.append(c_tok)
    cand_score.append(c_score)
    cand_par.append(c_par)
    cand_depth.append(d + 1)
    if d < k - 1:  # the next beam: the best m of these children
      best = jax.lax.top_k(c_score, m)[1]  # [B, m]
      beam_tok = jnp.take_along_axis(c_tok, best, 1)
      beam_score = jnp.take_along_axis(c_score, best, 1)
      beam_cand = next_id + best
      beam_slot_par = (lo + best // m).astype(jnp.int32)
    next_id += m * m
  toks = jnp.concatenate([root[:, None]] + cand_tok, 1)  # [B, C]
  score = jnp.concatenate([jnp.zeros((b, 1))] + cand_score, 1)
  par = jnp.concatenate([jnp.zeros((b, 1), jnp.int32)] + cand_par, 1)
  dep = np.concatenate([[0]] + [np.full(x.shape[1], dd) for x, dd in zip(cand_tok, cand_depth)])
  # The best N candidates plus the root, kept in candidate order (parents first).
  score = score.at[:, 0].set(jnp.inf)
  keep = jnp.sort(jax.lax.top_k(score, tree.n_nodes + 1)[1], axis=1)  # [B, N1]
  new_id = jnp.zeros(toks.shape, jnp.int32)
  new_id = jax.vmap(lambda z, kk: z.at[kk].set(jnp.arange(kk.shape[0], dtype=jnp.int32)))(
      new_id, keep)
  parents = jnp.take_along_axis(new_id, jnp.take_along_axis(par, keep, 1), 1)
  tokens = jnp.take_along_axis(toks, keep, 1)
  depths = jnp.asarray(dep, jnp.int32)[keep]
  q = jax.nn.one_hot(tokens, v, dtype=jnp.float32).at[:, 0].set(0.0)
  return TreeDraft(tokens=tokens, parents=parents, depths=depths, q=q), carry


def with_chain(draft: TreeDraft, chain: jax.Array, first: jax.Array) -> TreeDraft:
  """Adds a chain of L tokens under the root (q one-hot: a prompt-lookup continuation).

  draft: N1 nodes; chain [B, L]; first [B] bool: per row, the chain's nodes come right
  after the root (tried before the draft's children: where the lookup matched) or after
  the tree (tried when no draft child at depth 1 was accepted). Either layout is a tree
  in which parents come first, so verification stays exact; the choice may depend on
  the final tokens only. Returns a TreeDraft of N1 + L nodes.
  """
  b, n1 = draft.tokens.shape
  L = chain.shape[1]
  v = draft.q.shape[-1]
  chain = chain.astype(jnp.int32)
  steps = jnp.arange(1, L + 1, dtype=jnp.int32)  # the chain's depths
  q_chain = jax.nn.one_hot(chain, v, dtype=draft.q.dtype)
  # After: nodes N1 .. N1 + L - 1, the first a child of the root.
  after = TreeDraft(
      tokens=jnp.concatenate([draft.tokens, chain], 1),
      parents=jnp.concatenate([draft.parents, jnp.broadcast_to(
          jnp.where(steps == 1, 0, n1 + steps - 2), (b, L))], 1),
      depths=jnp.concatenate([draft.depths, jnp.broadcast_to(steps, (b, L))], 1),
      q=jnp.concatenate([draft.q, q_chain], 1))
  # First: nodes 1 .. L, the tree's nodes shifted by L (the root's children keep parent 0).
  shifted = jnp.where(draft.parents[:, 1:] == 0, 0, draft.parents[:, 1:] + L)
  before = TreeDraft(
      tokens=jnp.concatenate([draft.tokens[:, :1], chain, draft.tokens[:, 1:]], 1),
      parents=jnp.concatenate([draft.parents[:, :1], jnp.broadcast_to(steps - 1, (b, L)),
                               shifted], 1),
      depths=jnp.concatenate([draft.depths[:, :1], jnp.broadcast_to(steps, (b, L)),
                              draft.depths[:, 1:]], 1),
      q=jnp.concatenate([draft.q[:, :1], q_chain, draft.q[:, 1:]], 1))
  pick = lambda x, y: jnp.where(first.reshape((b,) + (1,) * (x.ndim - 1)), x, y)
  return jax.tree.map(pick, before, after)
