"""EAGLE-3 in the one trainer: configs/distill.py:eagle3_tiny on the toy target raises the
engine's alpha from ~0; the workdir exports in speculators' format, which loads back and
drafts with greedy output equal to the target alone."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import specjax
from specjax.api.draft_spec import resolve_drafter
from specjax.decoding.drafters import Eagle3Drafter
from specjax.loading import draft_formats, load_model
from specjax.training import toy
from specjax.training.eagle3 import published, train_eagle3
from specjax.training.evaluate import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # configs/ is importable from the repository root


@pytest.mark.slow
def test_eagle3_tiny_trains_and_exports(tmp_path):
  from configs.distill import get_config
  c = get_config("eagle3_tiny")
  c.num_steps, c.eval.every = 40, 40
  t = toy.toy_target(seed=c.seed, **c.toy)
  train = toy.toy_prompts(c.prompts.num_train, c.seed + 1, t.cfg.vocab_size)
  held = toy.toy_prompts(c.prompts.num_heldout, c.seed + 2, t.cfg.vocab_size)
  workdir = str(tmp_path / "wd")
  summary = train_eagle3(c, workdir, t, train, held, log=lambda *_: None)
  evals = [m for m in read_metrics(workdir) if "alpha" in m]
  assert evals[0]["alpha"] < 0.1 and summary["metrics"]["alpha"] > 0.3, evals
  draft = published(c, workdir, t, train)
  assert draft.cfg.draft_vocab_size == 48 and draft.params["draft_ids"].shape == (48,)
  out = draft_formats.save(draft, "speculators", str(tmp_path / "spec"), verifier="toy")
  loaded = load_model(out, target=t)
  drafter = resolve_drafter(loaded, t)
  assert isinstance(drafter, Eagle3Drafter)
  base = specjax.generate(t, held, 16)
  res = specjax.generate(t, held, 16, draft=drafter, k=3)
  assert res.tokens == base.tokens
  assert res.stats.acceptance_rate > 0.3
  np.testing.assert_array_equal(np.asarray(loaded.params["fc"]["kernel"]),
                                np.asarray(draft.params["fc"]["kernel"]))


def test_stored_teacher_gives_the_online_loss():
  """The pool's stored teacher (top-K of the whole vocabulary in float16, aux states at the
  draft's layers over the whole sequence) gives the online teacher's training-time-test
  loss and agreement. Control: the stored teacher one position late differs."""
  import jax.numpy as jnp
  from configs.distill import get_config
  from specjax.training.eagle3 import init_draft, pool_loss, teacher
  from online_runs import pool_rows, with_stored_teacher
  c = get_config("eagle3_tiny")
  t = toy.toy_target(seed=c.seed, **c.toy)
  cfg, params = init_draft(c, t, np.arange(t.cfg.vocab_size))
  f = pool_loss(c, cfg, t.cfg)
  batch = pool_rows()
  online, agree = f(params, t.params, batch)
  aux, _ = teacher(t.params, t.cfg, cfg, jnp.pad(batch["tokens"], ((0, 0), (0, 1))))
  stored, late = with_stored_teacher(t, batch, aux)
  loss, stored_agree = f(params, None, stored)
  np.testing.assert_allclose(float(loss), float(online), rtol=2e-3)
  np.testing.assert_array_equal(np.asarray(stored_agree), np.asarray(agree))
  assert abs(float(f(params, None, late)[0]) - float(online)) > 0.02
