"""Distillation trainer: losses vs numpy, toy distillation raises alpha, resume ==
uninterrupted, 1 vs 4 fake devices, checkpoint errors, HF export, the distill script (the
recipe knobs: test_recipe.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.training import losses, toy
from specjax.training import data as data_lib
from specjax.training import teacher as teacher_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # configs/ is importable from the repository root


def _tiny_config(**over):
  from configs.distill import get_config
  c = get_config("tiny")
  c.eval.engine = False
  c.eval.every = 0
  for k, v in over.items():
    node, *rest = k.split(".")
    if rest:
      setattr(getattr(c, node), rest[0], v)
    else:
      setattr(c, k, v)
  return c


def _toy(c):
  t = toy.toy_target(seed=c.seed, **c.toy)
  return (t, toy.toy_prompts(c.prompts.num_train, c.seed + 1, t.cfg.vocab_size),
          toy.toy_prompts(c.prompts.num_heldout, c.seed + 2, t.cfg.vocab_size))


# ------------------------------------------------------------------ losses vs numpy

def _np_losses(p, q, beta):
  def kl(a, b):
    m = a > 0
    with np.errstate(divide="ignore"):
      return float(np.sum(a[m] * (np.log(a[m]) - np.log(b[m]))))
  m = beta * p + (1 - beta) * q
  return {"fkl": kl(p, q), "rkl": kl(q, p), "jsd": beta * kl(p, m) + (1 - beta) * kl(q, m),
          "tvd": 0.5 * float(np.abs(p - q).sum())}


def test_losses_match_formulas_on_hand_made_distributions():
  pairs = [
      (np.array([0.5, 0.25, 0.25, 0.0]), np.array([0.1, 0.2, 0.3, 0.4])),
      (np.array([0.7, 0.1, 0.1, 0.1]), np.array([0.25, 0.25, 0.25, 0.25])),
      (np.array([1.0, 0.0, 0.0, 0.0]), np.array([0.6, 0.0, 0.2, 0.2])),  # zeros on both sides
  ]
  for p, q in pairs:
    for beta in (0.1, 0.5, 0.9):
      ref = _np_losses(p, q, beta)
      with np.errstate(divide="ignore"):
        lp, lq = jnp.log(jnp.asarray(p, jnp.float32)), jnp.log(jnp.asarray(q, jnp.float32))
      for name in losses.LOSSES:
        got = float(losses.divergence(name, lp, lq, beta))
        assert got == pytest.approx(ref[name], rel=1e-5, abs=1e-6), (name, p, q, beta)
  # Identical distributions: every divergence is 0; masked mean ignores masked positions.
  lp = jnp.log(jnp.asarray([[[0.2, 0.8], [0.5, 0.5]]]))
  lq = jnp.log(jnp.asarray([[[0.2, 0.8], [0.9, 0.1]]]))
  for name in losses.LOSSES:
    assert float(losses.distill_loss(name, lp, lq, jnp.array([[1.0, 0.0]]))) == pytest.approx(0, abs=1e-6)
  with pytest.raises(ValueError, match="beta"):
    losses.jsd(lp, lq, beta=1.0)
  with pytest.raises(ValueError, match="Unknown loss"):
    losses.divergence("kl", lp, lq)


def test_sparse_teacher_densifies_on_the_support():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 10)).astype(np.float32) * 2
  support = jnp.asarray([0, 2, 3, 5, 7, 9], jnp.int32)
  index = teacher_lib.support_index(support, 10)
  # K = V: the dense teacher is exactly the target renormalised on the support.
  ids, lp = teacher_lib.topk_logp(jnp.asarray(logits), 10)
  dense = teacher_lib.dense_teacher_logp(ids, lp, index, 6)
  ref = jax.nn.log_softmax(jnp.asarray(logits)[..., np.asarray(support)], -1)
  np.testing.assert_allclose(np.exp(dense), np.exp(ref), atol=1e-5)
  # K < V: top-K kept in proportion, the rest spread uniformly, total mass 1.
  ids, lp = teacher_lib.topk_logp(jnp.asarray(logits), 3)
  p = np.exp(np.asarray(teacher_lib.dense_teacher_logp(ids, lp, index, 6)))
  np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)
  assert (p > 0).all()


def test_batch_order_is_a_pure_function_of_seed_and_step():
  a = [data_lib.batch_indices(3, s, 10, 4) for s in range(5)]
  b = [data_lib.batch_indices(3, s, 10, 4) for s in range(5)]
  assert all((x == y).all() for x, y in zip(a, b))
  flat = np.concatenate(a)[:20]
  assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:20]) == list(range(10))
  assert not (data_lib.batch_indices(4, 0, 10, 4) == a[0]).all()


def test_prompt_set_has_categories_and_a_disjoint_heldout_split():
  train, held = data_lib.load_prompts("train"), data_lib.load_prompts("heldout")
  extra = data_lib.load_prompts("train_extra")
  assert len(train) >= 300 and len(held) >= 40 and len(extra) >= 300
  assert {r["category"] for r in held} == set(data_lib.CATEGORIES)
  texts = lambda rows: {r["text"] for r in rows}
  assert len(texts(extra)) == len(extra)
  assert not texts(train) & texts(held) and not texts(extra) & (texts(train) | texts(held))


def test_each_prompt_set_gets_its_own_cached_pools(tmp_path):
  from specjax.training.train import prepare_draft
  c = _tiny_config(**{"data.greedy_pool": True})
  t, tp, _ = _toy(c)
  _, _, alone = prepare_draft(c, str(tmp_path / "a"), t, tp, log=lambda *_: None)
  _, _, both = prepare_draft(c, str(tmp_path / "b"), t, {"train": tp, "more": tp[:8]},
                             log=lambda *_: None)
  files = sorted(os.listdir(tmp_path / "b" / "data"))
  assert files == ["target_pool.npz", "target_pool_greedy.npz", "target_pool_greedy_more.npz",
                   "target_pool_more.npz"]
  n = 2 * len(tp)  # one temperature-1 and one greedy continuation per prompt
  assert both["tokens"].shape[0] == n + 16
  # Adding a set leaves the "train" set's pools as they were; the new set samples its own.
  np.testing.assert_array_equal(both["tokens"][:n], alone["tokens"])
  greedy_more = both["tokens"][n + 8:]
  np.testing.assert_array_equal(greedy_more, alone["tokens"][len(tp):len(tp) + 8])
  assert not np.array_equal(both["tokens"][n:n + 8], alone["tokens"][:8])  # fresh T = 1 draws


# ------------------------------------------------------------------ end to end on a toy

def test_toy_distillation_lowers_loss_and_raises_alpha(tmp_path):
  from specjax.training import read_metrics, train
  c = _tiny_config(num_steps=60)
  c.eval.engine, c.eval.every = True, 60
  t, tp, hp = _toy(c)
  summary = train(c, str(tmp_path), t, tp, hp, progress=False)
  rows = read_metrics(str(tmp_path))
  loss = [r["loss"] for r in rows if "loss" in r]
  evals = [r for r in rows if "alpha" in r]
  assert np.mean(loss[-10:]) < 0.5 * np.mean(loss[:5])
  assert evals[0]["step"] == 0 and evals[-1]["step"] == 60
  assert evals[-1]["alpha"] >= evals[0]["alpha"] + 0.2, evals
  assert evals[-1]["tokens_per_pass"] > evals[0]["tokens_per_pass"]
  assert summary["best_step"] == 60
  assert os.listdir(tmp_path / "tb")  # TensorBoard events written


def test_resume_equals_uninterrupted(tmp_path):
  """Killed at step 7 (last checkpoint 4), rerun: losses equal the uninterrupted run's.
  Mixed target/draft data with the draft pool resampled every 5 steps, stored teacher."""
  from specjax.training import read_metrics, train
  c = _tiny_config(num_steps=12, ckpt_every=4, **{"data.source": "mix", "data.refresh_every": 5,
                                                  "data.teacher": "topk"})
  t, tp, hp = _toy(c)
  train(c, str(tmp_path / "a"), t, tp, hp, progress=False)
  train(c, str(tmp_path / "b"), t, tp, hp, progress=False, stop_at=7)
  assert sorted(os.listdir(tmp_path / "b" / "checkpoints"))[-1] == "4"
  train(c, str(tmp_path / "b"), t, tp, hp, progress=False)
  la = {r["step"]: r["loss"] for r in read_metrics(str(tmp_path / "a")) if "loss" in r}
  lb = {r["step"]: r["loss"] for r in read_metrics(str(tmp_path / "b")) if "loss" in r}
  assert sorted(la) == sorted(lb) == list(range(1, 13))
  np.testing.assert_allclose([lb[s] for s in range(1, 13)], [la[s] for s in range(1, 13)],
                             rtol=1e-6)


def test_out_of_time_saves_and_resumes(tmp_path):
  """max_seconds=0: the first step is past the budget, so the call evaluates, saves
  (latest and best) and returns; a rerun resumes there and ends with the losses of an
  uninterrupted run."""
  from specjax.training import read_metrics, train
  c = _tiny_config(num_steps=6, ckpt_every=100, **{"eval.every": 100})
  t, tp, hp = _toy(c)
  train(c, str(tmp_path / "a"), t, tp, hp, progress=False)
  train(c, str(tmp_path / "b"), t, tp, hp, progress=False, max_seconds=0.0)
  assert os.listdir(tmp_path / "b" / "checkpoints") == ["1"]
  evals = [r["step"] for r in read_metrics(str(tmp_path / "b")) if "alpha" in r
           or "heldout_top1_agree" in r]
  assert evals == [0, 1]
  train(c, str(tmp_path / "b"), t, tp, hp, progress=False)
  la = {r["step"]: r["loss"] for r in read_metrics(str(tmp_path / "a")) if "loss" in r}
  lb = {r["step"]: r["loss"] for r in read_metrics(str(tmp_path / "b")) if "loss" in r}
  assert sorted(lb) == list(range(1, 7))
  np.testing.assert_allclose([lb[s] for s in range(1, 7)], [la[s] for s in range(1, 7)],
                             rtol=1e-6)


_DEVICE_SCRIPT = r"""
import json, sys
sys.path.insert(0, {root!r})
import jax
from tests.training.test_training import _tiny_config, _toy
from specjax.training import read_metrics, train
c = _tiny_config(num_steps=6, batch_size=8, ckpt_every=100)
t, tp, hp = _toy(c)
train(c, {workdir!r}, t, tp, hp, progress=False)
print(json.dumps({{"devices": jax.device_count(),
                  "loss": [r["loss"] for r in read_metrics({workdir!r}) if "loss" in r]}}))
"""


def _run_devices(n, workdir):
  from tiny_models import fake_devices_env  # not at the top: a subprocess imports this file
  env = fake_devices_env(n)
  out = subprocess.run([sys.executable, "-c", _DEVICE_SCRIPT.format(root=ROOT, workdir=workdir)],
                       env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_four_fake_devices_match_one(tmp_path):
  """Data parallel over 4 fake CPU devices: losses equal the 1-device run's within
  rtol 1e-4 (only the reduction order of the sharded batch differs)."""
  one = _run_devices(1, str(tmp_path / "one"))
  four = _run_devices(4, str(tmp_path / "four"))
  assert one["devices"] == 1 and four["devices"] == 4
  assert len(one["loss"]) == len(four["loss"]) == 6
  np.testing.assert_allclose(four["loss"], one["loss"], rtol=1e-4)


def test_missing_and_corrupt_checkpoints_are_clear_errors(tmp_path):
  from specjax.training import CheckpointError, Checkpointer, train
  with pytest.raises(CheckpointError, match="No latest checkpoint"):
    Checkpointer(str(tmp_path / "empty")).restore({"x": jnp.zeros(2)})
  c = _tiny_config(num_steps=4, ckpt_every=2)
  t, tp, hp = _toy(c)
  work = tmp_path / "run"
  train(c, str(work), t, tp, hp, progress=False)
  step_dir = work / "checkpoints" / "4"
  corrupted = []
  for root, _, files in os.walk(step_dir):
    for f in files:
      if not f.startswith("_"):  # keep orbax's markers so the step still looks complete
        with open(os.path.join(root, f), "wb") as fh:
          fh.write(b"not a checkpoint")
        corrupted.append(os.path.join(root, f))
  assert corrupted
  c.num_steps = 6
  with pytest.raises(CheckpointError, match=r"checkpoints/4.*corrupt"):
    train(c, str(work), t, tp, hp, progress=False)
  assert all(os.path.exists(p) for p in corrupted)  # nothing was deleted
  assert (work / "checkpoints" / "2").exists()
  # A resumed run replaying an evaluated step offers it to the best manager again: kept as is.
  best = Checkpointer(str(tmp_path / "best_twice"))
  best.save_best(3, {"x": jnp.ones(2)}, 0.5)
  best.save_best(3, {"x": jnp.zeros(2)}, 0.9)
  assert best.best_step() == 3 and float(best.restore({"x": jnp.zeros(2)}, best=True)["x"][0]) == 1.0
  best.close()


# ------------------------------------------------------------------ export

def test_export_hf_roundtrip_with_transformers(tmp_path):
  torch = pytest.importorskip("torch")
  from transformers import LlamaForCausalLM
  from specjax.loading import load_model
  from specjax.models import forward
  from specjax.training import draft as draft_lib, export
  t = toy.toy_target(std=0.1)
  cfg, params = draft_lib.build_draft(t.cfg, t.params, n_layers=1, init="random",
                                      key=jax.random.PRNGKey(1), init_std=0.1)
  out = export.export_hf(cfg, params, str(tmp_path / "hf"), eos_ids=t.eos_ids)
  tokens = np.array([[3, 7, 11, 2, 5, 9]])
  ref = np.asarray(forward(params, cfg, jnp.asarray(tokens))[0])
  hf_model = LlamaForCausalLM.from_pretrained(out).eval()
  with torch.no_grad():
    got = hf_model(torch.tensor(tokens)).logits.numpy()
  np.testing.assert_allclose(got, ref, atol=2e-4)
  loaded = load_model(out)
  np.testing.assert_allclose(np.asarray(loaded.logits(tokens)), ref, atol=1e-5)
  # The shipped (asset) form: fp16 own tensors + the target's embeddings, head_vocab kept.
  params["head_vocab"] = jnp.arange(0, 64, 2, dtype=jnp.int32)
  export.save_asset(cfg, params, str(tmp_path / "asset"), target="toy")
  back = export.load_asset(str(tmp_path / "asset"), target=t)
  assert (np.asarray(back.params["head_vocab"]) == np.arange(0, 64, 2)).all()
  np.testing.assert_allclose(np.asarray(forward(back.params, back.cfg, jnp.asarray(tokens))[0])[..., ::2],
                             np.asarray(forward(params, cfg, jnp.asarray(tokens))[0])[..., ::2],
                             atol=5e-2)


# ------------------------------------------------------------------ script, real model

@pytest.mark.slow
def test_distill_script_runs_end_to_end(tmp_path):
  work = tmp_path / "w"
  cmd = [sys.executable, "scripts/distill.py", "--config=configs/distill.py:tiny",
         f"--workdir={work}", "--config.num_steps=6", "--config.eval.every=6",
         "--config.ckpt_every=3"]
  out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert out.returncode == 0, out.stderr[-3000:]
  assert json.loads(out.stdout.strip().splitlines()[-1])["latest_step"] == 6
  for name in ("config.json", "metrics.jsonl", "summary.json", "tb", "checkpoints", "best"):
    assert (work / name).exists(), name
  # The acceptance curve over training, drawn from the run's metrics.
  plot = subprocess.run([sys.executable, "scripts/plot_distill.py", f"--workdir={work}"],
                        capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert plot.returncode == 0, plot.stderr[-3000:]
  png = work / "training.png"
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
