"""Tree shapes: `TreeSpec` (static and hashable) and the tree-spec grammar.

Axes: N draft nodes, N1 = N + 1 tree nodes (node 0 the root), k depth.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

CHILDREN = ("topk", "sample")


@dataclasses.dataclass(frozen=True)
class TreeSpec:
  """A tree shape (static and hashable: a jit static argument).

  kind: "static" (the shape below) or "dynamic" (shape chosen per row and round).
  parents, depths: per node 0..N (parents[0] = 0); static trees only.
  n_nodes: N draft nodes; depth: k (draft steps); beam: nodes expanded per depth
  (dynamic trees). children: "topk" (deterministic, q one-hot) or "sample" (i.i.d.
  draws from the draft's q; greedy decoding always uses top-k).
  """
  kind: str
  n_nodes: int
  depth: int
  parents: tuple = ()
  depths: tuple = ()
  beam: int = 0
  children: str = "topk"

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
      return max(self.n_nodes + 1, 1 + (self.depth - 1) * self.beam)
    return self.n_nodes + 1

  @property
  def reach(self) -> int:
    """The most drafts one round can accept: the tree's depth (a drafter's own tree, such
    as a longer prompt-lookup chain beside it, may reach further)."""
    return self.depth

  @property
  def verified_nodes(self) -> int:
    """Draft nodes the target scores per round."""
    return self.n_nodes

  @property
  def max_children(self) -> int:
    """The most children of one node (ranks 0 .. max_children - 1)."""
    if self.kind == "dynamic":
      return self.beam
    return max(self.parents[1:].count(a) for a in set(self.parents[1:]))

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
    if self.kind == "dynamic":
      return f"dynamic:{self.n_nodes} (depth {self.depth}, beam {self.beam})"
    widths = [self.depths.count(d) for d in range(1, self.depth + 1)]
    return f"static tree of {self.n_nodes} nodes, widths per depth {widths}, {self.children} children"


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
