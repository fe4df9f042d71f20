"""Distillation trainer: losses vs numpy, toy distillation raises alpha, resume ==
uninterrupted, 1 vs 4 fake devices, checkpoint errors, HF export, the shipped draft."""
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


# ------------------------------------------------------------------ the recipe knobs

def _feature_step_inputs(c, rows=4, length=16):
  """A toy feature draft, its frozen/trainable split and a batch whose rows share one mask
  (so every micro-batch counts the same positions)."""
  from specjax.training import draft as draft_lib, teacher
  t = toy.toy_target(seed=c.seed, **c.toy)
  cfg, params = draft_lib.init_draft(c, t)
  trainable, frozen = draft_lib.split_params(params, draft_lib.trainable_keys(c.draft))
  toks = np.random.default_rng(3).integers(1, t.cfg.vocab_size - 1, (rows, length)).astype(np.int32)
  mask = np.zeros((rows, length), np.float32)
  mask[:, 4:-1] = 1.0
  pool = {"tokens": toks, "mask": mask}
  feats = teacher.target_features(pool, t.params, t.cfg,
                                  layers=draft_lib.feature_layers(c.draft, t.cfg.n_layers))
  return t, cfg, trainable, frozen, dict(pool, features=feats.astype(np.float32))


def _one_step(c, t, cfg, trainable, frozen, batch, hlo=False, **kw):
  from specjax.training.step import TrainState, make_optimizer, make_train_step
  tx, schedule = make_optimizer(c.optim, 10)
  fn = make_train_step(cfg, t.cfg, tx, schedule, "fkl", 0.5, feature=True, feature_noise=0.0,
                       unroll_steps=2, **kw)
  state = TrainState(step=jnp.zeros((), jnp.int32), params=jax.tree.map(jnp.array, trainable),
                     opt_state=tx.init(trainable), rng=jax.random.PRNGKey(0))
  args = (frozen, t.params, {k: jnp.asarray(v) for k, v in batch.items()})
  if hlo:  # the step's StableHLO, lowered before the call donates the state
    return fn.lower(state, *args).as_text()
  state, metrics = fn(state, *args)
  return state, jax.device_get(metrics)


def _bf16_dots(text: str) -> int:
  """Matrix products in a StableHLO text whose operands are bfloat16."""
  return sum(1 for line in text.splitlines() if "dot_general" in line and "bf16" in line)


def test_gradient_accumulation_equals_the_full_batch():
  """accum = 2 and 4 micro-batches give the full batch's loss, gradient norm and update;
  a batch with different rows (same shape) gives a different update (the test can fail)."""
  c = _tiny_config()
  c.draft.kind = "feature"
  t, cfg, trainable, frozen, batch = _feature_step_inputs(c)
  ref, m1 = _one_step(c, t, cfg, trainable, frozen, batch)
  for accum in (2, 4):
    got, m = _one_step(c, t, cfg, trainable, frozen, batch, accum=accum)
    for key in ("loss", "grad_norm", "train_top1_agree", "tokens", "distill_loss_s2"):
      assert m[key] == pytest.approx(m1[key], rel=1e-4), (accum, key)
    for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(ref.params)):
      np.testing.assert_allclose(a, b, atol=1e-5)
  other = dict(batch, tokens=batch["tokens"].copy())
  other["tokens"][0, 6] = other["tokens"][0, 6] % 60 + 1
  _, m_other = _one_step(c, t, cfg, trainable, frozen, other, accum=2)
  assert abs(m_other["loss"] - m1["loss"]) > 1e-4


def test_bfloat16_step_keeps_float32_masters_and_online_features_match_cached():
  """The bfloat16 step multiplies in bfloat16 (checked on the compiled program: XLA:CPU may
  keep excess precision, and on a CPU with AMX the loss came out bit-identical to
  float32's), keeps float32 masters, and its loss stays close to the float32 step's."""
  c = _tiny_config()
  c.draft.kind, c.draft.feature_layers = "feature", "last"
  t, cfg, trainable, frozen, batch = _feature_step_inputs(c)
  ref, m32 = _one_step(c, t, cfg, trainable, frozen, batch)
  got, m16 = _one_step(c, t, cfg, trainable, frozen, batch, precision="bfloat16")
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(got.params))
  assert m16["loss"] == pytest.approx(m32["loss"], rel=3e-2)
  assert _bf16_dots(_one_step(c, t, cfg, trainable, frozen, batch, hlo=True,
                              precision="bfloat16")) > 0
  assert _bf16_dots(_one_step(c, t, cfg, trainable, frozen, batch, hlo=True)) == 0
  # Without batch["features"] the step computes them from the target (data.features="online").
  _, online = _one_step(c, t, cfg, trainable, frozen, {k: v for k, v in batch.items()
                                                       if k != "features"})
  assert online["loss"] == pytest.approx(m32["loss"], rel=1e-2)  # cached ones are float16
  with pytest.raises(ValueError, match="precision"):
    _one_step(c, t, cfg, trainable, frozen, batch, precision="fp8")


def test_lr_schedules_and_bfloat16_accumulated_toy_run(tmp_path):
  from specjax.training import read_metrics, train
  from specjax.training.step import make_optimizer
  optim = _tiny_config().optim
  for kind in ("cosine", "linear", "constant"):
    optim.schedule = kind
    _, sched = make_optimizer(optim, 100)
    assert float(sched(0)) == 0.0 and float(sched(5)) == pytest.approx(optim.lr)
    end = float(sched(100))
    assert end == pytest.approx(optim.lr if kind == "constant" else optim.lr * optim.end_lr_fraction,
                                rel=1e-3), kind
  optim.schedule = "step"
  with pytest.raises(ValueError, match="schedule"):
    make_optimizer(optim, 100)
  c = _tiny_config(num_steps=40, precision="bfloat16", grad_accum=2)
  t, tp, hp = _toy(c)
  train(c, str(tmp_path), t, tp, hp, progress=False)
  loss = [r["loss"] for r in read_metrics(str(tmp_path)) if "loss" in r]
  assert np.mean(loss[-5:]) < 0.5 * np.mean(loss[:5])
  bad = _tiny_config(batch_size=8, grad_accum=3)
  with pytest.raises(ValueError, match="grad_accum"):
    train(bad, str(tmp_path / "bad"), t, tp, hp, progress=False)


def test_selection_split_and_generated_pairs(tmp_path, monkeypatch):
  """eval.select = "train": the selection prompts leave the training pools (and generated
  pairs with those prompts are dropped); selection runs on them, never on the held-out
  prompts. Generated pairs (selfgen.load_pairs) join the pool, frozen at first use."""
  from specjax.training import pools as pools_lib
  c = _tiny_config(**{"data.greedy_pool": True})
  c.eval.select, c.eval.select_prompts = "train", 6
  c.data.generated_dir = str(tmp_path / "gen")
  t, tp, hp = _toy(c)
  split = pools_lib.selection_split(c, tp)["train"]
  chosen = [tp[i] for i in split]
  rng = np.random.default_rng(0)
  fake = [{"prompt_ids": rng.integers(1, 60, 5).tolist(), "response_ids": rng.integers(1, 60, 9).tolist(),
           "category": "chat"} for _ in range(5)]
  fake.append({"prompt_ids": chosen[0], "response_ids": [3, 4, 5], "category": "chat"})
  calls = []
  monkeypatch.setattr(pools_lib, "_load_pairs", lambda d: calls.append(d) or list(fake))
  work = str(tmp_path / "w")
  _, _, pool = pools_lib.prepare_draft(c, work, t, tp, log=lambda *_: None)
  n_set = 2 * (len(tp) - len(split))  # T = 1 and greedy rows of the kept prompts
  assert pool["tokens"].shape[0] == n_set + 5 and calls == [c.data.generated_dir]
  starts = {tuple(r[:3]) for r in pool["tokens"][:n_set]}
  assert not starts & {tuple(p[:3]) for p in chosen}
  gen = pool["tokens"][n_set:]
  np.testing.assert_array_equal(gen[0, :14], fake[0]["prompt_ids"] + fake[0]["response_ids"])
  assert pool["mask"][n_set, 4:13].all() and pool["mask"][n_set].sum() == 9
  ev_pool, ev_prompts = pools_lib.eval_pool(c, work, t, tp, hp, log=lambda *_: None)
  assert sorted(map(tuple, ev_prompts)) == sorted(map(tuple, chosen))
  assert os.path.exists(os.path.join(work, "data", "select_pool.npz"))
  assert not os.path.exists(os.path.join(work, "data", "heldout_pool.npz"))
  # The generated pool is frozen: more pairs later do not change a run's data.
  fake.extend(fake[:2])
  _, _, again = pools_lib.prepare_draft(c, work, t, tp, log=lambda *_: None)
  assert again["tokens"].shape == pool["tokens"].shape and len(calls) == 1
  monkeypatch.setattr(pools_lib, "_load_pairs", lambda d: [])
  with pytest.raises(ValueError, match="no usable pairs"):
    pools_lib.prepare_draft(c, str(tmp_path / "w2"), t, tp, log=lambda *_: None)
  c.eval.select_prompts = len(tp)
  with pytest.raises(ValueError, match="select_prompts"):
    pools_lib.selection_split(c, tp)


def test_cached_features_of_another_config_are_a_clear_error(tmp_path):
  from specjax.training.pools import prepare_draft
  c = _tiny_config(**{"data.teacher": "topk"})
  c.draft.kind = "feature"
  t, tp, _ = _toy(c)
  work = str(tmp_path)
  prepare_draft(c, work, t, tp, log=lambda *_: None)
  path = os.path.join(work, "data", "target_features.npz")
  with np.load(path) as f:
    np.savez(path, features=f["features"][:3])
  with pytest.raises(ValueError, match="another config"):
    prepare_draft(c, work, t, tp, log=lambda *_: None)


def test_warm_start_from_an_asset_and_selection_on_generated_prompts(tmp_path, monkeypatch):
  """draft.init_from: a run starts from a shipped draft (its layers, fc and head ids), and
  a mismatching asset is one clear error; eval.select = "generated" selects checkpoints
  on the self-generated data's own selection split."""
  from specjax.loading.asset import load_asset, save_asset
  from specjax.training import pools as pools_lib
  from specjax.training import selfgen, train
  c = _tiny_config(num_steps=6, **{"data.teacher": "topk"})
  c.draft.kind, c.draft.head_vocab_size = "feature", 40
  t, tp, hp = _toy(c)
  summary = train(c, str(tmp_path / "a"), t, tp, hp, progress=False)
  asset = save_asset(summary["draft_cfg"], summary["draft_params"], str(tmp_path / "asset"),
                     target="toy")
  shipped = load_asset(asset, t).params
  # Another seed: a fresh start would draw other layers and could pick other head ids.
  c2 = _tiny_config(seed=3, **{"data.teacher": "topk"})
  c2.draft.kind, c2.draft.head_vocab_size = "feature", 40
  c2.draft.init_from = asset
  _, fresh = pools_lib.prepare_draft(_tiny_config(seed=3, **{"data.teacher": "topk", "draft.kind": "feature"}),
                                     str(tmp_path / "f"), t, tp, log=lambda *_: None)[:2]
  _, params, _ = pools_lib.prepare_draft(c2, str(tmp_path / "b"), t, tp, log=lambda *_: None)
  for k in ("layers", "fc"):
    jax.tree.map(np.testing.assert_array_equal, params[k], shipped[k])
  np.testing.assert_array_equal(params["head_vocab"], shipped["head_vocab"])
  assert not np.allclose(fresh["fc"]["kernel"], params["fc"]["kernel"])
  # A deeper config grows the draft: the asset's block first, then an identity block, so
  # the grown draft predicts exactly what the asset does until training moves it.
  from specjax.models.feature_draft import feature_forward
  deep = _tiny_config(seed=3, **{"data.teacher": "topk"})
  deep.draft.kind, deep.draft.head_vocab_size, deep.draft.init_from = "feature", 40, asset
  deep.draft.n_layers = summary["draft_cfg"].n_layers + 1
  deep_cfg, grown, _ = pools_lib.prepare_draft(deep, str(tmp_path / "deep"), t, tp, log=lambda *_: None)
  assert len(grown["layers"]) == deep_cfg.n_layers == len(shipped["layers"]) + 1
  jax.tree.map(np.testing.assert_array_equal, grown["layers"][:-1], shipped["layers"])
  assert not np.any(grown["layers"][-1]["mlp"]["down"]["kernel"])
  assert np.any(grown["layers"][-1]["mlp"]["up"]["kernel"])
  d = summary["draft_cfg"].d_model
  feats = jax.random.normal(jax.random.PRNGKey(0), (2, 5, d))
  toks = jax.random.randint(jax.random.PRNGKey(1), (2, 5), 1, 60)
  want, _ = feature_forward(shipped, summary["draft_cfg"], feats, toks)
  got, _ = feature_forward(grown, deep_cfg, feats, toks)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # A last-layer asset grows to EAGLE-3 features: fc_layers reads the last layer alone at
  # first, so the grown draft predicts what the asset does from any earlier layers' values.
  wide = _tiny_config(seed=3, **{"data.teacher": "topk"})
  wide.draft.kind, wide.draft.head_vocab_size, wide.draft.init_from = "feature", 40, asset
  wide.draft.feature_layers = (0, -1)
  t2 = toy.toy_target(seed=c.seed, **{**c.toy, "n_layers": 2})  # a target with two layers
  wide_cfg, widened, _ = pools_lib.prepare_draft(wide, str(tmp_path / "wide"), t2, tp,
                                                 log=lambda *_: None)
  assert widened["fc_layers"]["kernel"].shape == (2 * d, d)
  jax.tree.map(np.testing.assert_array_equal, widened["layers"], shipped["layers"])
  early = 10.0 * jax.random.normal(jax.random.PRNGKey(2), (2, 5, d))
  want2, _ = feature_forward(load_asset(asset, t2).params, summary["draft_cfg"], feats, toks)
  got, _ = feature_forward(widened, wide_cfg, jnp.concatenate([early, feats], -1), toks)
  np.testing.assert_allclose(got, want2, rtol=1e-5, atol=1e-5)
  kernel = widened["fc_layers"]["kernel"]  # control: nonzero early rows read `early`
  moved = {**widened, "fc_layers": {"kernel": kernel.at[:d].set(0.1 * jnp.ones((d, d)))}}
  off, _ = feature_forward(moved, wide_cfg, jnp.concatenate([early, feats], -1), toks)
  assert not np.allclose(off, want2, atol=1e-3)
  # ... and a shallower one, or another head, is one clear error.
  for field, value, match in (("n_layers", 0, "at most that many layers"),
                              ("head_vocab_size", 16, "head")):
    bad = _tiny_config(seed=3, **{"data.teacher": "topk"})
    bad.draft.kind, bad.draft.head_vocab_size, bad.draft.init_from = "feature", 40, asset
    setattr(bad.draft, field, value)
    with pytest.raises(ValueError, match=match):
      pools_lib.prepare_draft(bad, str(tmp_path / f"bad_{field}"), t, tp, log=lambda *_: None)

  bad = _tiny_config(seed=3, **{"data.teacher": "topk", "draft.kind": "feature"})
  bad.draft.init_from = "no-such-draft"
  with pytest.raises(ValueError, match="neither a draft asset"):
    pools_lib.prepare_draft(bad, str(tmp_path / "bad_name"), t, tp, log=lambda *_: None)

  rng = np.random.default_rng(1)
  pairs = {s: [{"prompt_ids": rng.integers(1, 60, 6).tolist(), "response_ids": [5, 6],
                "category": "chat"} for _ in range(n)] for s, n in (("train", 8), ("select", 5))}
  monkeypatch.setattr(selfgen, "load_pairs", lambda d, split="all": list(pairs[split]))
  c2.eval.select, c2.eval.select_prompts = "generated", 3
  c2.data.generated_dir = ""
  with pytest.raises(ValueError, match="generated_dir"):
    pools_lib.eval_pool(c2, str(tmp_path / "b"), t, tp, hp, log=lambda *_: None)
  c2.data.generated_dir = str(tmp_path / "gen")
  _, ev_prompts = pools_lib.eval_pool(c2, str(tmp_path / "b"), t, tp, hp, log=lambda *_: None)
  assert ev_prompts == [pairs["select"][i]["prompt_ids"] for i in (0, 2, 4)]
  assert os.path.exists(tmp_path / "b" / "data" / "select_generated_pool.npz")
  assert pools_lib.selection_split(c2, tp) == {}  # no training prompt leaves its pool
