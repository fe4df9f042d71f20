"""Merged and selected run statistics (`specjax.apps.common`) keep the tree statistics.

Runs of one tiny target with a perturbed draft: merging two generate calls must give
the counters of one call over all their rows (tree statistics included), selecting rows
of the merge must give back each call's own counters, and runs of different trees or k
must be refused.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import specjax
from specjax.apps import common

from tiny_models import perturbed, random_prompts, tiny

TARGET = tiny(seed=0)
DRAFT = perturbed(TARGET, 0.05)
PROMPTS = random_prompts(5, TARGET.cfg.vocab_size, seed=3)
TREE = "static:2,2,1"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(prompts, tree=TREE, k=3):
  return specjax.generate(TARGET, prompts, 12, draft=DRAFT, k=k, tree=tree).stats


def test_merge_and_select_keep_tree_statistics():
  a, b = _run(PROMPTS[:2]), _run(PROMPTS[2:])
  whole = _run(PROMPTS)  # rows are independent: one call over all rows gives the same counters
  merged = common.merge_stats([a, b])
  assert merged.tree == whole.tree and merged.nodes_per_round == whole.nodes_per_round == 2 + 4 + 4
  for f in common.PER_ROW + common.TREE_PER_ROW:
    np.testing.assert_array_equal(getattr(merged, f), getattr(whole, f), err_msg=f)
  assert merged.path_lengths.shape == (5, 4) and merged.rank_hits.shape == (5, 3, 2)
  np.testing.assert_array_equal(merged.path_lengths.sum(1), merged.rounds)
  d, w = merged.to_dict(), whole.to_dict()
  for key in ("path_lengths", "per_rank_acceptance", "per_position_acceptance", "tree",
              "nodes_per_round", "tokens_per_pass"):
    assert d[key] == w[key], key
  assert sum(d["path_lengths"]) == d["verify_passes"]
  # each run times its prefill apart, inside its wall time; a merge sums both
  assert all(0 < s.prefill_time_s < s.wall_time_s for s in (a, b, whole))
  assert merged.prefill_time_s == pytest.approx(a.prefill_time_s + b.prefill_time_s)
  assert d["prefill_time_s"] == merged.prefill_time_s
  # programs built are counted per call and summed (a built the program, b reused it)
  assert merged.compiled_programs == a.compiled_programs + b.compiled_programs > 0
  assert merged.programs_from_disk == a.programs_from_disk + b.programs_from_disk
  back = common.select_rows(merged, [2, 3, 4])
  assert back.tree == b.tree and back.nodes_per_round == b.nodes_per_round
  for f in common.PER_ROW + common.TREE_PER_ROW:
    np.testing.assert_array_equal(getattr(back, f), getattr(b, f), err_msg=f)
  assert back.to_dict()["per_rank_acceptance"] == b.to_dict()["per_rank_acceptance"]


def test_merge_refuses_different_trees_or_k():
  tree, chain = _run(PROMPTS[:1]), _run(PROMPTS[1:2], tree=None)
  with pytest.raises(ValueError, match="different settings.*merge each setting"):
    common.merge_stats([tree, chain])
  with pytest.raises(ValueError, match="different settings"):
    common.merge_stats([tree, _run(PROMPTS[1:2], tree="static:3,1,1")])
  with pytest.raises(ValueError, match="k=3.*k=2"):
    common.merge_stats([chain, _run(PROMPTS[1:2], tree=None, k=2)])
  bare = common.select_rows(chain, [0])
  bare.path_lengths = bare.rank_hits = None  # hand-made stats without tree counters
  with pytest.raises(ValueError, match="only some carry path_lengths"):
    common.merge_stats([chain, bare])
  assert common.merge_stats([bare, bare]).path_lengths is None


def test_parse_trees():
  assert common.parse_trees("", [1, 2]) == {}
  assert common.parse_trees(" static:2,1 ; dynamic:6 ", [1, 2, 3]) == {
      "static:2,1": [2], "dynamic:6": [2, 3]}  # dynamic:6 has only 4 candidates at k = 1
  assert common.parse_trees("static:2,2:sample;dynamic:3:2", [2]) == {
      "static:2,2:sample": [2], "dynamic:3:2": [2]}
  for text, match in [
      ("static:2,1,dynamic:6", "several trees: separate trees with ';'"),
      ("static:2,1,1", "depth 3 .* k runs over \\[1, 2\\]; add 3 to k"),
      ("static:2,x", "Cannot read tree"),
      ("dynamic:99", "dynamic:99 at depth 2 .* has only 20 candidates"),
      ("auto", "list the static tree it prints"),
      ("chain", "cannot read tree 'chain'")]:
    with pytest.raises(ValueError, match=match):
      common.parse_trees(text, [1, 2])


def test_tree_note_names_the_settings_a_drafter_cannot_run():
  assert common.tree_note("ngram:2", TARGET, "ngram:2", "static:2,1") is None
  assert common.tree_note("early_exit:1", TARGET, "early_exit:1", "dynamic:6") is None
  assert common.tree_note(DRAFT, TARGET, "draft", "dynamic:6") is None
  assert "does not expand dynamic trees" in common.tree_note("ngram:2", TARGET, "ngram:2",
                                                             "dynamic:6")
  assert "does not draft token trees" in common.tree_note("lookahead:3,3", TARGET, "la",
                                                          "static:2,1")


@pytest.mark.parametrize("script,extra", [
    ("scripts/benchmark.py", ["--config=configs/benchmark.py:tiny", "--config.k=2"]),
    ("scripts/acceptance_curves.py", ["--config=configs/curves.py:tiny", "--config.ks=1,2"]),
])
def test_scripts_reject_a_bad_tree_list_in_one_line(tmp_path, script, extra):
  env = dict(os.environ, JAX_PLATFORMS="cpu", HF_HUB_OFFLINE="1")
  proc = subprocess.run([sys.executable, script, *extra, f"--workdir={tmp_path / 'w'}",
                         "--config.target=/nonexistent", "--config.trees=static:2,1,1"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: config.trees: tree 'static:2,1,1' has depth 3"), proc.stderr
