"""P-EAGLE in the one trainer (configs/distill.py:peagle_tiny on the toy target): the loss
falls and the engine's greedy chain alpha rises from ~0; a run stopped at a checkpoint and
resumed ends with the uninterrupted run's params; the workdir exports in speculators'
peagle format, which loads back and drafts as the trained draft does; greedy decoding with
it is the target alone, with drafts both accepted and rejected."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.api.draft_spec import resolve_drafter
from specjax.decoding.drafters import PEagleDrafter
from specjax.loading import draft_formats, load_model
from specjax.models import peagle as peagle_lib
from specjax.training.evaluate import read_metrics
from specjax.training.peagle import elements, published, teacher, train_peagle
from online_runs import (STEPS, check_decodes_like_the_target, check_resume, config, pool_rows,
                         toy_run, with_stored_teacher)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """The uninterrupted run: (config, target, train prompts, held-out prompts, workdir, summary)."""
  return toy_run("peagle_tiny", train_peagle, str(tmp_path_factory.mktemp("peagle") / "wd"))


def test_loss_falls_and_alpha_rises(run):
  _, _, _, _, workdir, summary = run
  rows = read_metrics(workdir)
  losses = [r["loss"] for r in rows if "loss" in r]
  evals = [r for r in rows if "alpha" in r]
  assert len(losses) == STEPS and [r["step"] for r in evals] == [0, STEPS]
  assert np.mean(losses[-5:]) < 0.85 * np.mean(losses[:5]), losses
  first, last = evals
  assert first["alpha"] < 0.1 and last["alpha"] > 0.3, evals  # greedy chain, k = 3
  assert last["heldout_agree_d1"] > first["heldout_agree_d1"] + 0.1, evals  # a mask depth learns
  assert summary["latest_step"] == summary["best_step"] == STEPS


def test_resume_equals_uninterrupted_run(run, tmp_path):
  check_resume(run, train_peagle, str(tmp_path / "wd"))


def test_export_reloads_and_decodes_like_the_target(run, tmp_path):
  c, t, train, held, workdir, summary = run
  draft = published(c, workdir, t, train)
  out = draft_formats.save(draft, "speculators", str(tmp_path / "spec"), verifier="toy")
  loaded = load_model(out, target=t)
  drafter = resolve_drafter(loaded, t)
  assert isinstance(drafter, PEagleDrafter) and drafter.cfg == summary["cfg"]
  # the trained embeddings and mask travel with the export
  for key in ("embed", "mask_hidden", "draft_ids"):
    np.testing.assert_array_equal(np.asarray(drafter.params[key]), summary["params"][key])
  trained = PEagleDrafter(params=summary["params"], cfg=summary["cfg"])
  # drafts agree token by token: the argmax of every COD element of a held-out sequence
  seq = jnp.asarray([held[0] + held[1]], jnp.int32)  # [1, T]
  aux, _ = teacher(t.params, t.cfg, drafter.cfg, seq)
  anchor, depth = elements(seq.shape[1] - 3, 3)
  ids = [np.asarray(peagle_lib.cod_logits(d.params, d.cfg, aux, seq, anchor, depth)).argmax(-1)
         for d in (trained, drafter)]
  np.testing.assert_array_equal(*ids)
  check_decodes_like_the_target(t, held, trained, drafter)


def test_loss_is_speculators_on_its_cod_sample():
  """peagle_loss over the elements speculators' COD sampling draws (generate_cod_sample_indices,
  its default ratios) equals speculators' compute_metrics (loss and per-depth accuracy) fed
  the same logits, the target logits at each element's position + 1 and the pool mask
  shifted by one (the element at shifted position s imitates the target at s + 1). Controls:
  the unshifted mask, and a plain mean over every sampled element, both differ."""
  import torch
  from speculators.losses.eager import kl_div_loss
  from speculators.models.peagle.data import generate_cod_sample_indices
  from speculators.models.peagle.metrics import compute_metrics
  from specjax.training import toy
  from specjax.training.peagle import init_draft, peagle_loss
  c = config("peagle_tiny")
  t = toy.toy_target(seed=c.seed, **c.toy)
  cfg, params = init_draft(c, t, np.arange(t.cfg.vocab_size))  # random draft, 48 of 64 ids
  k, n = cfg.n_depths, 20
  seqs = jnp.asarray(np.random.default_rng(2).integers(1, 63, (1, n)), jnp.int32)
  mask = np.zeros((1, n), np.float32)
  mask[0, 4:17] = 1  # token p + 1 is a continuation for p in 4 .. 16
  aux, tl = teacher(t.params, t.cfg, cfg, seqs)
  shifted = torch.tensor(mask[:, 1:])  # speculators' loss_mask over the shifted sequence
  torch.manual_seed(0)
  anchor, depth = (jnp.asarray(x.numpy(), jnp.int32) for x in generate_cod_sample_indices(
      n - 1, shifted, num_depths=k))
  assert int(depth.max()) == k - 1 and len(anchor) < (n - 1) * k  # deeper depths subsampled
  loss, acc = peagle_loss(params, cfg, aux, seqs, tl, jnp.asarray([n]), k, jnp.asarray(mask),
                          chosen=(anchor, depth))
  logits = peagle_lib.cod_logits(params, cfg, aux[:, :-1], seqs[:, 1:], anchor, depth)  # [1, M, Vd]
  targets = np.asarray(tl)[:, np.asarray(anchor + depth + 1)][..., np.asarray(params["draft_ids"])]
  ref, m = compute_metrics(torch.tensor(np.asarray(logits)), torch.tensor(targets), shifted,
                           torch.tensor(np.asarray(anchor)), torch.tensor(np.asarray(depth)), k,
                           loss_config={"kl_div": (kl_div_loss, 1.0)})
  np.testing.assert_allclose(float(loss), float(ref), rtol=1e-5)
  for d in range(k):
    want = float(m[f"position_{d}_acc_sum"] / max(float(m[f"position_{d}_acc_total"]), 1.0))
    np.testing.assert_allclose(float(acc[d]), want, rtol=1e-5, atol=1e-7)
  unshifted, _ = compute_metrics(torch.tensor(np.asarray(logits)), torch.tensor(targets),
                                 torch.tensor(mask[:, :-1]), torch.tensor(np.asarray(anchor)),
                                 torch.tensor(np.asarray(depth)), k,
                                 loss_config={"kl_div": (kl_div_loss, 1.0)})
  assert abs(float(unshifted) - float(loss)) > 1e-3
  log_p = torch.log_softmax(torch.tensor(targets), -1)
  kl = (log_p.exp() * (log_p - torch.log_softmax(torch.tensor(np.asarray(logits)), -1))).sum(-1)
  assert abs(float(kl.mean()) - float(loss)) > 1e-3


def test_stored_teacher_and_sampled_elements_give_the_online_loss():
  """The pool's stored teacher (top-K of the whole vocabulary in float16, aux states at the
  draft's layers) gives the online teacher's loss; elements sampled per row
  (`sample_elements`: every anchor at depth 0, whole rollouts of anchors whose depth-1
  prediction counts) give, batched, what the one-row path (the one checked against
  speculators above) gives row by row, weighted by elements that count; the same step
  draws the same. Control: the stored teacher one position late differs."""
  from specjax.training import toy
  from specjax.training.peagle import batch_loss, init_draft, peagle_loss, sample_elements
  c = config("peagle_tiny")
  t = toy.toy_target(seed=c.seed, **c.toy)
  cfg, params = init_draft(c, t, np.arange(t.cfg.vocab_size))
  k, n = cfg.n_depths, 16
  batch = pool_rows()
  online, _ = batch_loss(params, cfg, t.params, t.cfg, batch, k)
  aux, logits = teacher(t.params, t.cfg, cfg, batch["tokens"])
  stored, late = with_stored_teacher(t, batch, aux)
  mask = np.asarray(batch["mask"])
  np.testing.assert_allclose(float(batch_loss(params, cfg, None, t.cfg, stored, k)[0]),
                             float(online), rtol=2e-3)
  assert abs(float(batch_loss(params, cfg, None, t.cfg, late, k)[0]) - float(online)) > 0.02
  anchor, depth, valid = sample_elements(mask, k, 4, np.random.default_rng(3))
  assert anchor.shape == (2, n - 1 + 4 * (k - 1)) and valid.all()
  assert (anchor[:, :n - 1] == np.arange(n - 1)).all() and (depth[:, :n - 1] == 0).all()
  for r, lo, hi in ((0, 0, 10), (1, 4, 12)):  # depth 1 of anchor j imitates position j + 2
    deep = anchor[r, n - 1:].reshape(k - 1, 4)
    assert (deep == deep[0]).all() and lo <= deep.min() and deep.max() <= hi  # whole rollouts
  np.testing.assert_array_equal(anchor, sample_elements(mask, k, 4, np.random.default_rng(3))[0])
  sampled = dict(batch, anchor=anchor, depth=depth, element_valid=valid)
  loss, agree = batch_loss(params, cfg, t.params, t.cfg, sampled, k)
  rows, counts = [], []
  for r in range(2):
    one = dict(tokens=batch["tokens"][r:r + 1], mask=batch["mask"][r:r + 1])
    rows.append(peagle_loss(params, cfg, aux[r:r + 1], one["tokens"], logits[r:r + 1],
                            jnp.asarray([n]), k, one["mask"], chosen=(anchor[r], depth[r]))[0])
    idx = np.minimum(anchor[r] + depth[r] + 1, n - 1)
    counts.append(((anchor[r] + depth[r] <= n - 2) & (mask[r, idx] > 0)).sum())
  np.testing.assert_allclose(float(loss), float(np.dot(rows, counts) / np.sum(counts)), rtol=1e-5)
  assert abs(float(loss) - float(online)) > 1e-3  # fewer elements: another mean


@pytest.mark.real_model
def test_smollm2_variant_builds_and_its_first_step_is_consistent():
  """configs/distill.py:peagle (not run here): the draft initialises for SmolLM2-135M and
  one training step, traced abstractly on a batch of the config's shape, returns params and
  optimizer state of the shapes it was given, with one agreement per depth."""
  from specjax.training import loop
  from specjax.training.peagle import frozen_keys, init_draft, make_train_step
  from configs.distill import get_config
  c = get_config("peagle")
  target = load_model(c.target)
  counts = np.random.default_rng(0).integers(0, 100, target.cfg.vocab_size)
  cfg, params = init_draft(c, target, counts)
  assert (cfg.mask_token_id, cfg.n_depths, cfg.eagle3.draft_vocab_size) == (3, 8, 4096)
  assert params["mask_hidden"].shape == (3 * target.cfg.d_model,)
  state, frozen, tx, schedule = loop.init_state(
      params, tuple(k for k in params if k not in frozen_keys(c)), c)
  step = make_train_step(cfg, target.cfg, tx, schedule)
  shape = (c.batch_size, c.data.seq_len)
  batch = {"tokens": jax.ShapeDtypeStruct(shape, jnp.int32),
           "mask": jax.ShapeDtypeStruct(shape, jnp.float32)}
  new, metrics = jax.eval_shape(step, state, frozen, target.params, batch)
  sd = lambda tree: jax.tree.map(lambda a: (a.shape, str(a.dtype)), tree)
  assert sd(new.params) == sd(state.params) and sd(new.opt_state) == sd(state.opt_state)
  assert sorted(k for k in metrics if k.startswith("agree_d")) == [f"agree_d{d}" for d in range(8)]
