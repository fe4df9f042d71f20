"""The trainer's recipe knobs: gradient accumulation equals the full batch, bfloat16 steps
keep float32 masters, learning-rate schedules, the selection split and generated pairs,
cached features of another config, warm starts from an asset (test_training.py: losses,
the toy run end to end, resumption, devices, checkpoint errors, export)."""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.training import toy
from test_training import _tiny_config, _toy


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
