"""Token trees against the stub target (`stub_model.py`): static and dynamic trees, by
drafters that expand them (early exit, a separate stub draft, prompt lookup).

A tree round verifies several candidates per depth in one target pass (tree mask,
positions by depth, the accepted path gathered into contiguous cache slots); greedy
output must still be the target's own, and where the top-ranked child is rejected a
sibling may be accepted instead, which a chain cannot do.
"""
import pytest

import specjax
from specjax.decoding.drafters import EarlyExitDrafter, NgramDrafter
from specjax.decoding.tree import TreeSpec, parse_tree
from spec_reference import assert_counts, model_children
from stub_checks import check_counters, partial_rounds, rows_cut_inside_drafts
from stub_model import (EXIT_PHASE, ragged_prompts, reference_greedy, reference_logits, stub,
                        stub_draft)

pytestmark = pytest.mark.stub

K = 3
N_NEW = 20
PROMPTS = ragged_prompts(4, seed=0)
TARGET = stub()
WANT = [reference_greedy(p, N_NEW) for p in PROMPTS]

DRAFT_PHASE = 2
EARLY_EXIT = EarlyExitDrafter(n_layers=1)
# Static top-k trees of a draft model: node children are the draft's top tokens.
CHILDREN = {"early_exit": model_children(lambda ids: reference_logits(ids, EXIT_PHASE)),
            "stub_draft": model_children(lambda ids: reference_logits(ids, DRAFT_PHASE))}
CASES = [  # (id, drafter, tree, draft passes per round)
    ("early_exit-static", EARLY_EXIT, "static:2,2,1", K),
    ("early_exit-dynamic", EARLY_EXIT, "dynamic:6", K),
    ("stub_draft-static", stub_draft(DRAFT_PHASE), "static:3,1,1", K),
    ("stub_draft-dynamic", stub_draft(DRAFT_PHASE), "dynamic:6", K),
    ("ngram-static", NgramDrafter(n=3), "static:3,1,1", 0),
]


def _branching(tree: str) -> list:
  return [int(b) for b in tree.partition(":")[2].split(",")]


@pytest.mark.parametrize("drafter, tree, per_round", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_tree_matches_target_alone(drafter, tree, per_round):
  """Every tree gives the target's tokens; a static tree of a draft model accepts in
  each round exactly the path its top-ranked children match (`spec_reference`)."""
  out = specjax.generate(TARGET, PROMPTS, N_NEW, draft=drafter, k=K, tree=tree)
  assert out.tokens == WANT
  check_counters(out, per_round)
  rounds = partial_rounds(out)
  assert rounds["none"] > 0 and rounds["all"] > 0, rounds
  assert out.stats.tree == str(parse_tree(tree, K))
  if tree.startswith("static") and not isinstance(drafter, NgramDrafter):
    children = CHILDREN["early_exit" if drafter is EARLY_EXIT else "stub_draft"]
    assert_counts(out, PROMPTS, _branching(tree), children)


@pytest.mark.parametrize("drafter", [EARLY_EXIT, stub_draft(DRAFT_PHASE)],
                         ids=["early_exit", "stub_draft"])
def test_static_tree_accepts_a_sibling(drafter):
  """Some round accepts a child that is not its parent's top-ranked one, so the tree
  keeps drafts that the draft's own chain (rank 0 everywhere) would have lost."""
  out = specjax.generate(TARGET, PROMPTS, N_NEW, draft=drafter, k=K, tree="static:3,1,1")
  assert out.tokens == WANT
  assert out.stats.rank_hits[:, :, 1:].sum() > 0
  assert partial_rounds(out)["some"] > 0


def test_tree_spec_object_equals_its_string():
  """A `TreeSpec` given directly runs the tree its string names."""
  spec = TreeSpec.static((2, 2, 1))
  assert spec == parse_tree("static:2,2,1", K)
  out = specjax.generate(TARGET, PROMPTS, N_NEW, draft=EARLY_EXIT, k=K, tree=spec)
  assert out.tokens == WANT


@pytest.mark.parametrize("tree", ["static:2,2,1", "dynamic:6"])
def test_tree_cut_by_eos_and_max_new(tree):
  """EOS and max_new_tokens cut a tree round's accepted path as they cut a chain's."""
  drafter = EARLY_EXIT
  row = WANT[0]
  eos = next(t for t in row[2:] if t not in row[:2])
  expected = [reference_greedy(p, N_NEW, (eos,)) for p in PROMPTS]
  assert len({len(t) for t in expected}) > 1
  out = specjax.generate(TARGET, PROMPTS, N_NEW, draft=drafter, k=K, tree=tree, eos_ids=[eos])
  assert out.tokens == expected
  check_counters(out, K)
  assert rows_cut_inside_drafts(out) > 0
  if tree.startswith("static"):
    assert_counts(out, PROMPTS, _branching(tree), CHILDREN["early_exit"])
  for max_new in (2, 7):
    out = specjax.generate(TARGET, PROMPTS, max_new, draft=drafter, k=K, tree=tree)
    assert out.tokens == [t[:max_new] for t in WANT]
    check_counters(out, K)
    assert rows_cut_inside_drafts(out) > 0 or max_new != 2
    if tree.startswith("static"):
      assert_counts(out, PROMPTS, _branching(tree), CHILDREN["early_exit"])
