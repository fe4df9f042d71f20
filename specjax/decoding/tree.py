"""Token trees in fixed shapes: specs, ancestor masks, exact verification, the tree round.

Axes: B batch, N draft nodes, N1 = N + 1 tree nodes (node 0 is the root: the row's
last final token), k depth, W nodes of one depth, V vocab, S cache slots, D width.

A tree is a parent array over nodes 0..N in depth order (parents[i] < i, node 0 the
root) and each node's depth. Drafting fills it one depth at a time (one draft pass
per depth, that depth's nodes side by side); the target scores all N + 1 nodes in
one pass, node i written at slot P + i with position P + depth(i) and seeing the
prefix (slots < P) and its ancestors, where P = the row's cache length. The verifier
walks the tree for ONE row (vmapped): at each node it tries the children in order,
accepting child x with probability min(1, p'(x) / q(x)) and otherwise replacing p' by
norm(max(0, p' - q)) (recursive rejection sampling, SpecInfer); when every child
fails the next token is drawn from p'. Children sampled i.i.d. from the draft carry
the draft's q; children picked deterministically (top-k) carry a one-hot q, for
which the same rule removes each rejected child's mass. Either way the output
follows the target's law exactly; with greedy p it follows the target's argmax.
The accepted path is then gathered into contiguous cache slots (`cache.gather_path`),
so rollback by lengths holds as for the chain.

Tree kinds: `TreeSpec.static((4, 2, 2, 1))` (branching per depth; "static:4,2,2,1"),
`TreeSpec.dynamic(n, k)` (EAGLE-2: per depth the `beam` best nodes by cumulative draft
log-probability are expanded with their top `beam` children, and the best n of all
candidates are verified; "dynamic:N"), `TreeSpec.from_parents` for studies.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from specjax import sampling as sampling_lib
from specjax.models.cache import gather_path
from specjax.models.interface import target_pass

CHILDREN = ("topk", "sample")


@dataclasses.dataclass(frozen=True)
class TreeSpec:
  """A tree shape (static and hashable: a jit static argument).

  kind: "static" (the shape below) or "dynamic" (shape chosen per row and round).
  parents, depths: per node 0..N (parents[0] = 0); static trees only.
  n_nodes: N draft nodes; depth: k (draft steps); beam: nodes expanded per depth
  (dynamic trees). children: "topk" (deterministic, q one-hot) or "sample" (i.i.d.
  draws from the draft's q; greedy decoding always uses top-k).
  lookup: L extra nodes, a prompt-lookup chain under the root beside the draft's tree
  (`with_chain`; set by `LookupFirstDrafter`, 0 otherwise). L may exceed the depth: a
  round then accepts up to `reach` = max(depth, L) drafts.
  """
  kind: str
  n_nodes: int
  depth: int
  parents: tuple = ()
  depths: tuple = ()
  beam: int = 0
  children: str = "topk"
  lookup: int = 0

  def __post_init__(self):
    if self.children not in CHILDREN:
      raise ValueError(f"Tree children must be one of {CHILDREN}, got {self.children!r}.")

  @classmethod
  def from_parents(cls, parents, children: str = "topk") -> "TreeSpec":
    """Any tree given by parents[i] for nodes 1..N (0 = the root), in depth order."""
    parents = [0] + [int(x) for x in parents]
    depths = [0]
    for i, a in enumerate(parents[1:], 1):
      if not 0 <= a < i:
        raise ValueError(f"Tree node {i} has parent {a}; a parent must be an earlier node.")
      depths.append(depths[a] + 1)
      if depths[i] < depths[i - 1]:
        raise ValueError("Tree nodes must be listed depth by depth (depths non-decreasing).")
    if len(parents) < 2:
      raise ValueError("A tree needs at least one draft node.")
    return cls("static", len(parents) - 1, max(depths), tuple(parents), tuple(depths),
               children=children)

  @classmethod
  def static(cls, branching, children: str = "topk") -> "TreeSpec":
    """Every node of depth d - 1 gets branching[d - 1] children (top-ranked first)."""
    branching = [int(b) for b in branching]
    if not branching or min(branching) < 1:
      raise ValueError(f"Static tree branching factors must be >= 1, got {branching}.")
    parents, level = [], [0]
    for b in branching:
      nxt = []
      for a in level:
        for _ in range(b):
          parents.append(a)
          nxt.append(len(parents))
      level = nxt
    return cls.from_parents(parents, children)

  @classmethod
  def dynamic(cls, n_nodes: int, depth: int, beam: int = 4) -> "TreeSpec":
    if n_nodes < 1 or beam < 1:
      raise ValueError(f"A dynamic tree needs N >= 1 nodes and beam >= 1 (got {n_nodes}, {beam}).")
    most = beam + (depth - 1) * beam * beam
    if n_nodes > most:
      raise ValueError(f"dynamic:{n_nodes} at depth {depth} with beam {beam} has only {most} "
                       f"candidates; lower N or raise k.")
    return cls("dynamic", int(n_nodes), int(depth), beam=int(beam), children="topk")

  @property
  def slots(self) -> int:
    """Cache slots one round writes after a row's length: the N + 1 verified nodes, or
    (dynamic trees) the drafting layout's root and beams if that is larger."""
    if self.kind == "dynamic":
      return max(self.n_nodes + 1, 1 + (self.depth - 1) * self.beam) + self.lookup
    return self.n_nodes + 1 + self.lookup

  @property
  def reach(self) -> int:
    """The most drafts one round can accept: the tree's depth or the lookup chain's length."""
    return max(self.depth, self.lookup)

  @property
  def verified_nodes(self) -> int:
    """Draft nodes the target scores per round: the tree's and the lookup chain's."""
    return self.n_nodes + self.lookup

  @property
  def max_children(self) -> int:
    """The most children of one node (ranks 0 .. max_children - 1)."""
    extra = 1 if self.lookup else 0  # the lookup chain is one more child of the root
    if self.kind == "dynamic":
      return self.beam + extra
    return max(self.parents[1:].count(a) for a in set(self.parents[1:])) + extra

  # Static trees: per-depth layout for drafting.
  def level(self, d: int):
    """Nodes of depth d as a range, their parents' offsets within depth d - 1, their ranks."""
    nodes = [i for i, x in enumerate(self.depths) if x == d]
    prev = [i for i, x in enumerate(self.depths) if x == d - 1]
    rank, seen = [], {}
    for i in nodes:
      a = self.parents[i]
      rank.append(seen.get(a, 0))
      seen[a] = rank[-1] + 1
    return (nodes[0], nodes[-1] + 1, np.array([prev.index(self.parents[i]) for i in nodes]),
            np.array(rank))

  def branch_ids(self) -> np.ndarray:
    """[N1] a branch number per node, distinct among siblings (the sum of the ranks on
    its path): which of several candidate continuations (n-gram matches) it follows."""
    ids = [0]
    seen = {}
    for i in range(1, self.n_nodes + 1):
      a = self.parents[i]
      rank = seen.get(a, 0)
      seen[a] = rank + 1
      ids.append(ids[a] + rank)
    return np.array(ids)

  def __str__(self) -> str:
    chain = f" + a lookup chain of {self.lookup}" if self.lookup else ""
    if self.kind == "dynamic":
      return f"dynamic:{self.n_nodes} (depth {self.depth}, beam {self.beam}){chain}"
    widths = [self.depths.count(d) for d in range(1, self.depth + 1)]
    return (f"static tree of {self.n_nodes} nodes, widths per depth {widths}, "
            f"{self.children} children{chain}")


def parse_tree(tree: str, k: int) -> TreeSpec:
  """'static:4,2,2,1[:sample]' (one factor per depth: k of them) | 'dynamic:N[:beam]'."""
  kind, _, rest = tree.partition(":")
  parts = rest.split(":")
  try:
    if kind == "static":
      branching = [int(x) for x in parts[0].split(",")]
      if len(branching) != k:
        raise ValueError(f"Tree {tree!r} lists {len(branching)} branching factors but k={k}: "
                         f"give one per draft step (depth), e.g. 'static:{','.join(['2'] * k)}'.")
      return TreeSpec.static(branching, *(parts[1:2] or ["topk"]))
    if kind == "dynamic":
      return TreeSpec.dynamic(int(parts[0]), k, *(int(x) for x in parts[1:2]))
  except ValueError as e:
    if "invalid literal" not in str(e):
      raise
  raise ValueError(f"Cannot read tree {tree!r}: use 'static:4,2,2,1' (k branching factors), "
                   "'dynamic:N' or a TreeSpec.") from None


def resolve_tree(tree: Any, k: int, speculative: bool) -> Optional[TreeSpec]:
  """None | a tree string | a `TreeSpec` -> a TreeSpec of depth k (or None: the chain)."""
  if tree is None:
    return None
  if not speculative:
    raise ValueError("A token tree needs a drafter: pass draft= as well as tree=.")
  spec = parse_tree(tree, k) if isinstance(tree, str) else tree
  if not isinstance(spec, TreeSpec):
    raise TypeError(f"tree must be None, a string or a TreeSpec, got {type(tree).__name__}.")
  if spec.depth != k:
    raise ValueError(f"The tree has depth {spec.depth} but k={k}; k is the tree's depth.")
  return spec


# ------------------------------------------------------------------------- masks


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


# ------------------------------------------------------------------------ drafts


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


# ------------------------------------------------------------------ verification


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
  R = `tree.reach` (k, or a longer lookup chain's length).
  """
  if not hasattr(drafter, "propose_tree"):
    raise ValueError(f"{type(drafter).__name__} does not draft token trees; use tree=None.")
  draft, draft_state, cache = drafter.propose_tree(draft_state, ctx, tree, draft_key)
  prefix = cache.lengths  # [B] P = n_tokens - 1: the root goes to slot P
  anc = ancestors(draft.parents, tree.reach)
  mask = tree_mask(prefix, anc, cache.max_len)  # [B, N1, S]
  hidden, cache, feats = target_pass(target, drafter, draft.tokens, cache.with_lengths(prefix),
                                     prefix[:, None] + draft.depths, mask)  # [B, N1, D or L*D]
  p = sampling_lib.warp(target.head(hidden), ctx.sampling)  # [B, N1, V]
  path, n_acc, nxt = verify_tree(draft, p, verify_key, tree.reach, row_fn)  # path [B, R+1]
  cache = gather_path(cache, prefix, path)
  feats = jnp.take_along_axis(feats, path[:, :, None], axis=1)  # [B, R+1, D or L*D]
  drafts = jnp.take_along_axis(draft.tokens, path[:, 1:], axis=1)  # [B, R]
  ranks = jnp.take_along_axis(sibling_ranks(draft.parents), path[:, 1:], axis=1)  # [B, R]
  return drafts, ranks, n_acc, nxt, feats, draft_state, cache
