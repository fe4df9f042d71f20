"""Medusa heads: greedy exactness (chain and trees), exact sampling, training, assets, errors."""
import dataclasses
import json
import os

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import specjax
from specjax.decoding.drafters import MedusaDrafter
from specjax.models import medusa as medusa_lib
from tiny_models import random_prompts, tiny

from test_exact_sampling import (N_CALLS, PROMPT, ROWS, TARGET, V, accept_everything,
                                 chi_square_fails, exact_joint)


def heads_for(target, n_heads=3, std=0.5, seed=1, head_vocab=None):
  cfg = medusa_lib.MedusaConfig(n_heads=n_heads, d_model=target.cfg.d_model,
                                vocab_size=target.cfg.vocab_size)
  params = medusa_lib.init_medusa(cfg, head_vocab, std=std, key=jax.random.PRNGKey(seed))
  return MedusaDrafter.for_target(cfg, params, target)


# ------------------------------------------------------------------------ greedy

SMALL = tiny("llama", vocab=11, layers=2, seed=0, std=0.5)  # small vocab: heads agree often
PROMPTS = random_prompts(5, 11, lo=1, hi=9, seed=2)  # ragged rows


@pytest.mark.parametrize("kw", [dict(k=3), dict(k=2, tree="static:3,2"),
                                dict(k=3, tree="static:2,2,1:sample"), dict(k=3, tree="dynamic:6")])
def test_greedy_identical_to_target(kw):
  base = specjax.generate(SMALL, PROMPTS, 20)
  out = specjax.generate(SMALL, PROMPTS, 20, draft=heads_for(SMALL), **kw)
  assert out.tokens == base.tokens
  assert out.stats.accepted.sum() >= 8  # drafts are accepted often enough to matter


def test_greedy_identical_reduced_head_and_gpt2():
  gpt2 = tiny("gpt2", vocab=13, layers=2, seed=3, std=0.5)
  prompts = random_prompts(4, 13, seed=4)
  base = specjax.generate(gpt2, prompts, 16)
  for tree in (None, "static:2,2"):
    d = heads_for(gpt2, n_heads=2, head_vocab=[0, 2, 3, 5, 7, 11])
    out = specjax.generate(gpt2, prompts, 16, draft=d, k=2, tree=tree)
    assert out.tokens == base.tokens


# ---------------------------------------------------------------------- sampling


def medusa_joint(drafter, k, tree=None, verifier=None) -> np.ndarray:
  counts = np.zeros((V, V, V))
  for seed in range(N_CALLS):
    out = specjax.generate(TARGET, [PROMPT] * ROWS, 3, draft=drafter, k=k, seed=seed,
                           temperature=1.0, tree=tree, verifier=verifier)
    for toks in out.tokens:
      counts[tuple(toks[:3])] += 1
  return counts


@pytest.mark.parametrize("k,tree", [(2, None), (2, "static:2,2:sample")])
def test_sampling_is_exact(k, tree):
  """Chain (each head sampled, q = its distribution) and a tree whose children are
  samples from each head: the first three tokens follow the target's joint law.
  (Top-k children are deterministic: the tree rule for them is tested in test_tree_sampling.)"""
  fails, stat, df = chi_square_fails(medusa_joint(heads_for(TARGET), k, tree),
                                     exact_joint(specjax.SamplingParams(1.0), 3))
  assert not fails, f"chi2={stat:.1f} with df={df}"


@flax.struct.dataclass
class WrongQ(MedusaDrafter):
  """Samples from the heads but reports a uniform q: a wrong rule that must be caught."""

  def propose(self, state, ctx, key):
    drafts, q, state, cache = super().propose(state, ctx, key)
    return drafts, jnp.full_like(q, 1.0 / q.shape[-1]), state, cache


@pytest.mark.parametrize("kind", ["accept_everything", "wrong_q"])
def test_negative_controls_fail(kind):
  d = heads_for(TARGET)
  if kind == "wrong_q":
    d = WrongQ(params=d.params, kernel=d.kernel, cfg=d.cfg)
  counts = medusa_joint(d, 2, verifier=accept_everything if kind == "accept_everything" else None)
  fails, stat, df = chi_square_fails(counts, exact_joint(specjax.SamplingParams(1.0), 3))
  assert fails, f"the wrong rule passed: chi2={stat:.1f} with df={df}"


def test_subclass_gets_its_own_compiled_loop():
  """A drafter subclass with its parent's fields (WrongQ) flattens to a treedef that
  compares equal to the parent's; the compile cache must still tell them apart, or the
  negative control above would sometimes run the parent's (exact) program: it did, in a
  test run of 2026-12-03, when the two hashes met in the cache's table."""
  from specjax.decoding.compiled import signature
  d = heads_for(TARGET)
  w = WrongQ(params=d.params, kernel=d.kernel, cfg=d.cfg)
  assert jax.tree.flatten(d)[1] == jax.tree.flatten(w)[1]  # why the classes are keyed apart
  statics = dict(k=2)
  assert signature((TARGET.params, d), statics) != signature((TARGET.params, w), statics)
  assert signature((TARGET.params, d), statics) == signature((TARGET.params, heads_for(TARGET)),
                                                             statics)


# ---------------------------------------------------------------------- training


def tiny_config(**overrides):
  from configs import distill
  c = distill.get_config("medusa_tiny")
  for key, v in overrides.items():
    node, *rest = key.split(".")
    if rest:
      c[node][rest[0]] = v
    else:
      c[key] = v
  return c


def _run(config, workdir, **kw):
  from specjax.training.medusa import train_medusa
  from specjax.training.setup import setup_target
  target, train, held = setup_target(config)
  return train_medusa(config, str(workdir), target, train, held, log=lambda *_: None, **kw)


def _metrics(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


def test_training_on_toy_target_lowers_loss_and_raises_alpha(tmp_path):
  config = tiny_config(num_steps=40, **{"eval.every": 40})
  summary = _run(config, tmp_path)
  rows = _metrics(tmp_path)
  evals = [r for r in rows if "alpha" in r]
  losses = [r["loss"] for r in rows if "loss" in r]
  assert evals[0]["step"] == 0 and evals[-1]["step"] == 40
  assert evals[-1]["alpha"] > evals[0]["alpha"] + 0.3, evals
  assert np.mean(losses[-2:]) < 0.7 * np.mean(losses[:2]), losses
  assert evals[-1]["heldout_acc_h0"] > evals[0]["heldout_acc_h0"] + 0.3
  assert summary["best_step"] == 40


def test_resume_equals_uninterrupted_run(tmp_path):
  config = tiny_config(num_steps=12, ckpt_every=4, log_every=1, **{"eval.every": 0})
  a = _run(config, tmp_path / "a")
  _run(config, tmp_path / "b", stop_at=6)  # "killed" after step 6 (checkpoint at 4)
  b = _run(config, tmp_path / "b")
  for x, y in zip(jax.tree.leaves(a["params"]), jax.tree.leaves(b["params"])):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  la = {r["step"]: r["loss"] for r in _metrics(tmp_path / "a")}
  lb = {r["step"]: r["loss"] for r in _metrics(tmp_path / "b")}  # steps 5, 6 logged twice
  assert la == lb


def test_asset_round_trip_and_source_string(tmp_path):
  d = heads_for(SMALL, head_vocab=[0, 1, 2, 4, 6, 9])
  medusa_lib.save_medusa(d.cfg, d.params, str(tmp_path / "heads"), target="tiny")
  cfg, params, meta = medusa_lib.load_medusa(str(tmp_path / "heads"))
  assert cfg == d.cfg and meta["target"] == "tiny"
  np.testing.assert_allclose(params["w"], np.asarray(d.params["w"], np.float16), rtol=0, atol=0)
  a = specjax.generate(SMALL, PROMPTS, 12, draft=f"medusa:{tmp_path / 'heads'}", k=3)
  b = specjax.generate(SMALL, PROMPTS, 12, draft=str(tmp_path / "heads"), k=3)
  assert a.tokens == b.tokens == specjax.generate(SMALL, PROMPTS, 12).tokens
  assert a.stats.accepted.sum() == b.stats.accepted.sum()


# ------------------------------------------------------------------- bad input


def test_heads_for_another_target_are_a_clear_error(tmp_path):
  d = heads_for(SMALL)
  wide = tiny("llama", vocab=11, layers=1, seed=5)  # d_model 32 too, so change it
  wide = dataclasses.replace(wide, cfg=dataclasses.replace(wide.cfg, d_model=48))
  with pytest.raises(ValueError, match="hidden size 32 .* hidden size 48"):
    MedusaDrafter.for_target(d.cfg, d.params, wide)
  other_vocab = tiny("llama", vocab=17, layers=1, seed=5)
  with pytest.raises(ValueError, match="11 tokens, but this target has .* 17 tokens"):
    specjax.generate(other_vocab, [[1, 2]], 4, draft=d, k=2)  # an object built for SMALL
  medusa_lib.save_medusa(d.cfg, d.params, str(tmp_path / "h"))
  with pytest.raises(ValueError, match="17 tokens"):
    specjax.generate(other_vocab, [[1, 2]], 4, draft=f"medusa:{tmp_path / 'h'}", k=2)
  with pytest.raises(ValueError, match="holds no Medusa heads"):
    specjax.generate(SMALL, [[1, 2]], 4, draft=f"medusa:{tmp_path}", k=2)


def test_more_drafts_than_heads_is_a_clear_error():
  with pytest.raises(ValueError, match="has 3 heads.*k=4"):
    specjax.generate(SMALL, [[1, 2]], 4, draft=heads_for(SMALL), k=4)


# -------------------------------------------------------------------- real model
