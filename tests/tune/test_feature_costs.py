"""The cost paths (`specjax.tune.costs`, k="auto", tree="auto") time a multi-layer
(EAGLE-3 style) feature draft on the inputs the loop gives it: the timed proposal equals
the loop's cache-free reference drafts, and k="auto" / tree="auto" run with a 3-layer
feature draft and yield the tokens of the fixed k / tree they chose."""
from __future__ import annotations

import dataclasses
import re
import types

import numpy as np
import pytest

import specjax
from specjax.tune import costs
from specjax.decoding.drafters import FeatureDrafter
from test_feature_draft import ML_LAYERS, TARGET, _ml_draft, _ml_reference_drafts


def _first_drafts(drafter, context, k=3):
  propose, args = costs.draft_call(TARGET, drafter, k, context, 128)
  return np.asarray(propose(*args)[0])[0].tolist()  # [k]


def test_timed_proposal_reads_the_feature_layers():
  cfg, params = _ml_draft()
  drafter = FeatureDrafter.of(params, cfg)
  assert drafter.feature_layers == ML_LAYERS
  for seed in range(3):
    context = np.random.default_rng(seed).integers(0, TARGET.cfg.vocab_size, 9).astype(np.int32)
    assert _first_drafts(drafter, context) == _ml_reference_drafts(params, context, 3), seed
  # Negative control: the same draft handed the last hidden state only (what the cost
  # path did before) skips fc_layers and proposes other drafts.
  last_only = dataclasses.replace(drafter, feature_layers=None)
  assert any(_first_drafts(last_only, c) != _ml_reference_drafts(params, c, 3)
             for c in np.random.default_rng(0).integers(0, TARGET.cfg.vocab_size, (3, 9)))


def _auto_setup(tmp_path, monkeypatch):
  """SPECJAX_CACHE in tmp_path; target pass costs from a linear model instead of timed
  (what is tested here is the draft's path: calibration, timed draft, final run)."""
  monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path))
  monkeypatch.setattr(costs, "target_costs", lambda target, context_len, max_len, ks, **kw: {
      "step": 1e-3, "verify": {int(k): 1e-3 * (1 + 0.05 * int(k)) for k in ks}})
  cfg, params = _ml_draft()
  return types.SimpleNamespace(name="ml3", cfg=cfg, params=params)


PROMPTS = [[5, 17, 3, 40, 22, 9], [33, 2, 8, 51]]
SAMPLED = dict(temperature=1.0, seed=3)


def test_auto_k_with_a_three_layer_feature_draft(tmp_path, monkeypatch):
  """k="auto" times the loop with the 3-layer draft at k = 2 (its costs and acceptance
  measured and stored) and yields the tokens of what it chose: k = 2, or the target alone."""
  from specjax.tune import loop_costs
  draft = _auto_setup(tmp_path, monkeypatch)
  monkeypatch.setattr(loop_costs, "K_PROBES", (2,))
  monkeypatch.setattr(loop_costs, "REPEATS", 1)
  out = specjax.generate(TARGET, PROMPTS, 12, draft=draft, k="auto", **SAMPLED)
  k = out.k_choice["k"]
  assert out.stats.k == k and k in (0, 2) and out.k_choice["costs"]["2"]["round_s"] > 0
  fixed = dict(draft=draft, k=k) if k else {}
  assert out.tokens == specjax.generate(TARGET, PROMPTS, 12, **fixed, **SAMPLED).tokens


def test_auto_tree_with_a_three_layer_feature_draft(tmp_path, monkeypatch, capsys):
  draft = _auto_setup(tmp_path, monkeypatch)
  out = specjax.generate(TARGET, PROMPTS, 12, draft=draft, tree="auto", k=2, **SAMPLED)
  chosen = re.search(r"tree='auto': (static:[0-9,]+)", capsys.readouterr().out).group(1)
  branching = [int(b) for b in chosen.split(":")[1].split(",")]  # depth at most k = 2
  chain = max(branching) == 1  # then it runs as the chain
  fixed = specjax.generate(TARGET, PROMPTS, 12, draft=draft, k=len(branching),
                           tree=None if chain else chosen, **SAMPLED)
  assert out.stats.tree == fixed.stats.tree and out.tokens == fixed.tokens
  assert len(branching) <= 2 and out.stats.k == len(branching)
  # The choice is kept for the process: a second call with the same draft (generate
  # wraps it in a new drafter object) does not calibrate again.
  again = specjax.generate(TARGET, PROMPTS, 12, draft=draft, tree="auto", k=2, **SAMPLED)
  assert "tree='auto'" not in capsys.readouterr().out and again.tokens == out.tokens


def test_auto_tree_reads_the_cached_cost_table(tmp_path, monkeypatch, capsys):
  """tree="auto" takes c(T) and the draft cost from k="auto"'s cost tables: in a new
  process (the per-process choice cleared) no pass cost is timed again, and the model
  shortlists the same trees."""
  from specjax.tune import tree as tree_auto
  draft = _auto_setup(tmp_path, monkeypatch)
  specjax.generate(TARGET, PROMPTS, 12, draft=draft, tree="auto", k=2, **SAMPLED)
  finalists = lambda out: re.findall(r"(static:[0-9,]+) [0-9.]+", out.split("finalists")[1])
  first = finalists(capsys.readouterr().out)
  assert len(first) >= 2
  assert list(tmp_path.rglob("target-*.json")) and list(tmp_path.rglob("draft-*.json"))
  monkeypatch.setattr(tree_auto, "_CHOSEN", {})
  monkeypatch.setattr(tree_auto, "_ACCEPTANCE", {})

  def timed(*a, **kw):
    raise AssertionError("timed again instead of reading the cost table")
  monkeypatch.setattr(costs, "target_costs", timed)
  monkeypatch.setattr(costs, "draft_cost", timed)
  specjax.generate(TARGET, PROMPTS, 12, draft=draft, tree="auto", k=2, **SAMPLED)
  # The model's shortlist is the same (the timed finalists may rank otherwise by noise).
  assert finalists(capsys.readouterr().out) == first
