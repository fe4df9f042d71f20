"""Token trees in fixed shapes: specs (`spec`), drafting (`draft`), exact verification and
the tree round (`verify`).

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
from specjax.decoding.tree.draft import (TreeDraft, ancestors, expand, sibling_ranks, tree_mask,
                                         with_chain)
from specjax.decoding.tree.spec import CHILDREN, TreeSpec, parse_tree, resolve_tree
from specjax.decoding.tree.verify import tree_round, verify_tree, verify_tree_row

__all__ = ["TreeDraft", "ancestors", "expand", "sibling_ranks", "tree_mask", "with_chain",
           "CHILDREN", "TreeSpec", "parse_tree", "resolve_tree", "tree_round", "verify_tree",
           "verify_tree_row"]
