"""`SpecStats.to_dict()` agrees with itself (`specjax.decoding.stats` defines each field):
on a chain, a dynamic tree, lookahead, and runs cut by max_new_tokens and by EOS."""
from __future__ import annotations

import pytest

import specjax
from stub_model import ragged_prompts, stub, stub_draft

pytestmark = pytest.mark.stub

SETTINGS = [  # (draft, k, tree)
    ("early_exit:1", 4, None),
    ("ngram:2", 3, None),
    ("early_exit:1", 3, "dynamic:6"),
    ("lookahead:3,3", 2, None),
]


def check_identities(d: dict, k: int) -> None:
  hist = d["path_lengths"]
  assert d["accepted"] == sum(n * c for n, c in enumerate(hist))
  assert sum(hist) == d["verify_passes"]
  assert d["drafted"] == d["nodes_per_round"] * d["verify_passes"]
  for i, (pos, ranks) in enumerate(zip(d["per_position_acceptance"], d["per_rank_acceptance"])):
    if pos is None:  # never reached: None, not 0
      assert ranks[0] is None
    if d["tree"] is None:  # a chain: rank 0 is the position
      assert ranks[0] == pos


@pytest.mark.parametrize("draft,k,tree", SETTINGS)
@pytest.mark.parametrize("max_new,eos", [(24, ()), (5, ()), (24, (3,))])
def test_stats_fields_agree(draft, k, tree, max_new, eos):
  target = stub(eos_ids=eos)
  prompts = ragged_prompts(3, seed=1)
  out = specjax.generate(target, prompts, max_new, draft=draft, k=k, tree=tree)
  d = out.stats.to_dict()
  check_identities(d, k)
  assert d["verify_passes"] > 0 and d["drafted"] > 0
  if tree is not None:  # nodes drafted, not k per round
    assert d["nodes_per_round"] == 6


def test_target_alone_has_no_verify_passes():
  d = specjax.generate(stub(), ragged_prompts(2, seed=2), 10).stats.to_dict()
  assert d["verify_passes"] == 0 and d["drafted"] == 0 and d["target_passes"] > 1


def test_never_reached_position_is_none():
  out = specjax.generate(stub(), ragged_prompts(2, seed=3), 3, draft=stub_draft(), k=6)
  d = out.stats.to_dict()
  assert None in d["per_position_acceptance"]  # 3 tokens cannot reach draft position 6
  check_identities(d, 6)
