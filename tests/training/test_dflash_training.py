"""DFlash in the one trainer (configs/distill.py:dflash_tiny on the toy target): the loss
falls and the engine's greedy alpha rises from ~0; a run stopped at a checkpoint and
resumed ends with the uninterrupted run's params; the workdir exports in speculators'
dflash format, which loads back and drafts as the trained draft does; greedy decoding with
it is the target alone, with drafts both accepted and rejected."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.api.draft_spec import resolve_drafter
from specjax.decoding.drafters import DFlashDrafter
from specjax.loading import draft_formats, load_model
from specjax.models import dflash as dflash_lib
from specjax.training.dflash import published, train_dflash
from specjax.training.evaluate import read_metrics
from specjax.training import toy
from specjax.training.peagle import teacher
from online_runs import (STEPS, check_decodes_like_the_target, check_resume, config, pool_rows,
                         toy_run, with_stored_teacher)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """The uninterrupted run: (config, target, train prompts, held-out prompts, workdir, summary)."""
  return toy_run("dflash_tiny", train_dflash, str(tmp_path_factory.mktemp("dflash") / "wd"))


def test_loss_falls_and_alpha_rises(run):
  _, _, _, _, workdir, summary = run
  rows = read_metrics(workdir)
  losses = [r["loss"] for r in rows if "loss" in r]
  evals = [r for r in rows if "alpha" in r]
  assert len(losses) == STEPS and [r["step"] for r in evals] == [0, STEPS]
  assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5]), losses
  first, last = evals
  assert first["alpha"] < 0.15 and last["alpha"] > 0.35, evals  # greedy chain, k = 3
  for s in (1, 3):  # the first draft and the last mask slot both learn
    assert last[f"heldout_acc_s{s}"] > first[f"heldout_acc_s{s}"] + 0.1, evals
  assert summary["latest_step"] == summary["best_step"] == STEPS


def test_resume_equals_uninterrupted_run(run, tmp_path):
  check_resume(run, train_dflash, str(tmp_path / "wd"))


def test_export_reloads_and_decodes_like_the_target(run, tmp_path):
  c, t, train, held, workdir, summary = run
  draft = published(c, workdir, t, train)
  out = draft_formats.save(draft, "speculators", str(tmp_path / "spec"), verifier="toy")
  loaded = load_model(out, target=t)
  drafter = resolve_drafter(loaded, t)
  assert isinstance(drafter, DFlashDrafter) and drafter.cfg == summary["cfg"]
  for key in ("draft_ids", "embed"):  # the draft vocabulary travels; the embeddings are the target's
    np.testing.assert_array_equal(np.asarray(drafter.params[key]), summary["params"][key])
  trained = DFlashDrafter(params=summary["params"], cfg=summary["cfg"])
  # drafts agree token by token: the argmax of every anchor's block of a held-out sequence
  seq = jnp.asarray([held[0] + held[1]], jnp.int32)  # [1, T]
  feats, _ = teacher(t.params, t.cfg, drafter.cfg, seq)
  anchors = jnp.arange(seq.shape[1] - drafter.cfg.block_size)
  ids = [np.asarray(dflash_lib.anchored_logits(d.params, d.cfg, feats, seq, anchors,
                                               target_vocab=True)).argmax(-1)
         for d in (trained, drafter)]
  np.testing.assert_array_equal(*ids)
  check_decodes_like_the_target(t, held, trained, drafter)


def test_loss_is_speculators_on_the_pool_mask():
  """dflash_loss on a pool batch equals speculators' compute_metrics (loss and per-slot
  accuracy) fed the targets and aligned loss mask its `_backbone_forward` builds for the same
  anchors: target logits at a + i - 1, the token mask at a + i, anchor slots zeroed. Controls:
  the mask shifted by one position, and the weight-normalised mean, both differ."""
  import torch
  from speculators.losses.eager import kl_div_loss
  from speculators.models.dflash.metrics import compute_metrics
  from specjax.training.dflash import anchors_of, batch_loss, init_draft
  c = config("dflash_tiny")
  t = toy.toy_target(seed=c.seed, **c.toy)
  cfg, params = init_draft(c, t, np.arange(t.cfg.vocab_size))  # random draft, 48 of 64 ids
  b, n, g = 2, cfg.block_size, float(c.dflash.gamma)
  tokens = np.random.default_rng(0).integers(1, 63, (b, 14)).astype(np.int32)
  mask = np.zeros(tokens.shape, np.float32)  # token p + 1 is a continuation: prompts of 3, 6
  mask[0, 2:12], mask[1, 5:13] = 1, 1
  batch = {"tokens": jnp.asarray(tokens), "mask": jnp.asarray(mask)}
  loss, m = batch_loss(params, cfg, t.params, t.cfg, batch, g)
  # speculators' side: its targets and aligned mask, built from its own rules
  feats, tl = teacher(t.params, t.cfg, cfg, batch["tokens"])
  anchors, valid = anchors_of(cfg, jnp.full((b,), tokens.shape[1]), tokens.shape[1])
  logits = np.asarray(dflash_lib.anchored_logits(params, cfg, feats, batch["tokens"], anchors))
  tl = np.asarray(tl)[..., np.asarray(params["draft_ids"])]  # [B, T, Vd]
  t_len = tokens.shape[1]
  blocks = np.asarray(anchors)[:, None] + np.arange(n)[None]  # [A, N] anchored block indices
  targets = tl[:, (blocks - 1) % t_len]  # [B, A, N, Vd]: roll by one, then gather
  token_mask = np.concatenate([np.zeros((b, 1)), mask[:, :-1]], 1)  # token p counts
  aligned = token_mask[:, np.minimum(blocks, t_len - 1)] * np.asarray(valid)[:, :, None]
  aligned[:, :, 0] = 0  # the anchor slot
  flat = lambda x: torch.tensor(np.asarray(x, np.float32).reshape(1, b * len(anchors) * n,
                                                                 *x.shape[3:]))
  ref, ref_m = compute_metrics(flat(logits), flat(targets), flat(aligned), block_size=n, gamma=g,
                               loss_config={"kl_div": (kl_div_loss, 1.0)})
  np.testing.assert_allclose(float(loss), float(ref), rtol=1e-5)
  for i in range(1, n):
    acc = float(ref_m[f"position_{i}_acc_sum"] / ref_m[f"position_{i}_acc_total"])
    np.testing.assert_allclose(float(m["acc"][i]), acc, rtol=1e-5)
  shifted = dict(batch, mask=jnp.asarray(np.roll(mask, 1, axis=1)))
  assert abs(float(batch_loss(params, cfg, t.params, t.cfg, shifted, g)[0]) - float(ref)) > 1e-3
  w = np.exp(-np.maximum(np.arange(n) - 1, 0) / g) * (np.arange(n) > 0) * aligned
  assert abs(float(ref) * aligned.sum() / w.sum() - float(ref)) > 1e-3


def test_stored_teacher_and_sampled_anchors_give_the_online_loss():
  """The pool's stored teacher (top-K of the whole vocabulary in float16, features at the
  draft's layers) gives the online teacher's loss; anchors sampled per row
  (`sample_anchors`, as many as count) give the every-anchor loss, and fewer draw only
  anchors that count, the same for the same step. Control: the stored teacher one position
  late differs."""
  from specjax.training.dflash import batch_loss, init_draft, sample_anchors
  c = config("dflash_tiny")
  t = toy.toy_target(seed=c.seed, **c.toy)
  cfg, params = init_draft(c, t, np.arange(t.cfg.vocab_size))
  g = float(c.dflash.gamma)
  batch = pool_rows()
  online, _ = batch_loss(params, cfg, t.params, t.cfg, batch, g)
  stored, late = with_stored_teacher(t, batch, teacher(t.params, t.cfg, cfg, batch["tokens"])[0])
  mask = np.asarray(batch["mask"])
  np.testing.assert_allclose(float(batch_loss(params, cfg, None, t.cfg, stored, g)[0]),
                             float(online), rtol=2e-3)
  assert abs(float(batch_loss(params, cfg, None, t.cfg, late, g)[0]) - float(online)) > 0.02
  anchors, valid = sample_anchors(cfg, mask, 16, np.random.default_rng(0))
  # anchor a counts when mask[a .. a + 2] names a token (slots 1-3) and a + 3 < 16: 0-12, 4-12
  assert [np.flatnonzero(v).size for v in valid] == [13, 9]
  assert anchors[0, :13].tolist() == list(range(13)) and anchors[1, :9].tolist() == list(range(4, 13))
  every = dict(batch, anchors=jnp.asarray(anchors), anchor_valid=jnp.asarray(valid))
  np.testing.assert_allclose(float(batch_loss(params, cfg, t.params, t.cfg, every, g)[0]),
                             float(online), rtol=1e-5)
  few, ok = sample_anchors(cfg, mask, 4, np.random.default_rng(3))
  assert ok.all() and set(few[0]) <= set(anchors[0]) and set(few[1]) <= set(anchors[1])
  np.testing.assert_array_equal(few, sample_anchors(cfg, mask, 4, np.random.default_rng(3))[0])


def test_a_teacher_the_draft_cannot_read_is_one_line_before_any_work():
  """config.data.teacher: "topk" for a kind without a stored teacher, or an unknown name, is
  a ValueError naming what that kind takes (raised before any pool is sampled)."""
  import dataclasses
  from specjax.training import online
  from specjax.training.dflash import KIND
  c = config("dflash_tiny")
  assert online.stored_top_k(KIND, c) == 0  # online by default
  c.data.teacher, c.data.teacher_top_k = "topk", 8
  assert online.stored_top_k(KIND, c) == 8
  without = dataclasses.replace(KIND, name="plain", stored_teacher=False)
  with pytest.raises(ValueError, match="plain drafts train with 'online'; set"):
    online.stored_top_k(without, c)
  c.data.teacher = "stored"
  with pytest.raises(ValueError, match="teacher='stored': dflash drafts train with 'online' or topk"):
    online.stored_top_k(KIND, c)


@pytest.mark.real_model
def test_smollm2_variant_builds_and_its_first_step_is_consistent():
  """configs/distill.py:dflash (not run here): the draft initialises for SmolLM2-135M and
  one training step, traced abstractly on a batch of the config's shape, returns params and
  optimizer state of the shapes it was given, with one agreement per draft slot."""
  from specjax.training import loop
  from specjax.training.dflash import frozen_keys, init_draft, make_train_step
  from configs.distill import get_config
  c = get_config("dflash")
  target = load_model(c.target)
  counts = np.random.default_rng(0).integers(0, 100, target.cfg.vocab_size)
  cfg, params = init_draft(c, target, counts)
  assert (cfg.mask_token_id, cfg.block_size, cfg.n_drafts, cfg.draft_vocab_size) == (3, 9, 8, 4096)
  assert cfg.aux_layer_ids == (2, 15, 27) and cfg.feature_layers == (1, 14, 26)
  assert params["fc"]["kernel"].shape == (3 * target.cfg.d_model, target.cfg.d_model)
  assert params["lm_head"]["kernel"].shape == (target.cfg.d_model, 4096)
  state, frozen, tx, schedule = loop.init_state(
      params, tuple(k for k in params if k not in frozen_keys(params)), c)
  step = make_train_step(cfg, target.cfg, tx, schedule, c.dflash.gamma)
  shape = (c.batch_size, c.data.seq_len)
  batch = {"tokens": jax.ShapeDtypeStruct(shape, jnp.int32),
           "mask": jax.ShapeDtypeStruct(shape, jnp.float32)}
  new, metrics = jax.eval_shape(step, state, frozen, target.params, batch)
  sd = lambda tree: jax.tree.map(lambda a: (a.shape, str(a.dtype)), tree)
  assert sd(new.params) == sd(state.params) and sd(new.opt_state) == sd(state.opt_state)
  assert sorted(k for k in metrics if k.startswith("acc_s")) == [f"acc_s{i}" for i in range(1, 9)]
