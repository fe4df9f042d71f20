"""The tree-speed report (specjax/apps/tree_speed.py, used by experiments/trees/speed.py): the
best chain is chosen on one half of the timing rounds and measured on the other, so a chain
that only won by noise does not count against tree="auto"."""
import pytest

from specjax.apps import tree_speed as speed


def _row(setting, walls, new_tokens=10):
  return {"setting": setting, "tokens_per_s": new_tokens / sum(min(w) for w in walls),
          "wall_s": 1.0, "new_tokens": new_tokens, "tokens_per_pass": 1.0,
          "same_tokens_as_target": True, "walls": walls}


def test_best_chain_is_chosen_on_the_other_half():
  # Rounds 0..3 of one prompt. chain k=2 is fast only in round 0 (noise), chain k=3 is
  # steadily 1 s, auto steadily 1.1 s; k=5 is the fastest but deeper than auto may go.
  rows = [_row("target", [[2.0, 2.0, 2.0, 2.0]]),
          _row("chain k=2", [[0.5, 1.5, 1.5, 1.5]]),
          _row("chain k=3", [[1.0, 1.0, 1.0, 1.0]]),
          _row("chain k=5", [[0.2, 0.2, 0.2, 0.2]]),
          _row("tree=auto k<=4", [[1.1, 1.1, 1.1, 1.1]])]
  rec, md = speed.report({"rows": rows, "k": 4, "auto_tree": "the chain at k=3",
                          "calibration_s": 1.0, "prompts": 1, "prompt_source": "eval",
                          "max_new": 10, "draft": "d"})
  # On all rounds at once k=2 looks best (0.5 s): auto is 0.45x of it.
  assert rec["best_chain_within_k"] == "chain k=2"
  assert rec["auto_over_best_chain_within_k"] == pytest.approx(0.5 / 1.1)
  cv = rec["cross_validated"]
  # Even rounds (0, 2) pick k=2, measured on odd rounds (1, 3): 1.5 / 1.1; odd rounds pick
  # k=3, measured on even: 1.0 / 1.1.
  assert [f["chain"] for f in cv["folds"]] == ["chain k=2", "chain k=3"]
  assert cv["folds"][0]["auto_over_chain"] == pytest.approx(1.5 / 1.1)
  assert cv["folds"][1]["auto_over_chain"] == pytest.approx(1.0 / 1.1)
  assert cv["mean"] == pytest.approx((1.5 / 1.1 + 1.0 / 1.1) / 2)
  assert cv["half_to_half"]["chain k=2"] == pytest.approx(1.5 / 0.5)
  assert cv["max_half_to_half_deviation"] == pytest.approx(2.0)
  assert "Cross-validated" in md


def test_records_without_rounds_keep_the_old_report():
  rows = [{k: v for k, v in _row(s, [[1.0, 1.0]]).items() if k != "walls"}
          for s in ("target", "chain k=2", "tree=auto k<=4")]
  rec, md = speed.report({"rows": rows, "k": 4, "auto_tree": "x", "calibration_s": 1.0,
                          "prompts": 1, "prompt_source": "eval", "max_new": 10, "draft": "d"})
  assert "cross_validated" not in rec and "Cross-validated" not in md


def test_report_before_auto_is_timed():
  # --auto_last writes the chains and trees before tree="auto" calibrates: a record cut
  # there still reports them, and says that auto was not measured.
  rows = [_row("target", [[2.0, 2.0]]), _row("chain k=2", [[1.0, 1.0]]),
          _row("chain k=3", [[0.8, 0.9]]), _row("dynamic:8 k=3", [[0.7, 0.7]])]
  rec, md = speed.report({"rows": rows, "k": 3, "auto_tree": None, "calibration_s": None,
                          "prompts": 1, "prompt_source": "eval", "max_new": 10, "draft": "d"})
  assert rec["best_chain"] == "chain k=3" and "auto_over_best_chain" not in rec
  assert "cross_validated" not in rec
  assert "not measured" in md and "| dynamic:8 k=3 | 14.3 | 2.86 |" in md
