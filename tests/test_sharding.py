"""Sharded decoding on 8 fake CPU devices: the same `generate` on ("data", "model") meshes
(1, 8), (2, 4) and (8, 1) gives the tokens and stats of one device, greedy and sampled.

The fake devices need XLA_FLAGS set before jax is imported, so one subprocess runs every
mesh shape and prints JSON; the assertions are made here. The tiny target and draft are
written as Hugging Face directories (`export_hf`) so `load_model(mesh=)` reads each
device's slice from safetensors.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np

import pytest

from specjax import parallel
from specjax.models import ModelConfig, init_params
from specjax.models.params import PARAM_AXES, canonical
from specjax.training.export import export_hf

# Every case on one device and on (2, 4); the other shapes run the draft-model cases
# (greedy, T = 1, a padded batch of 3) to keep the subprocess near a minute.
ALL_CASES = ("alone", "draft", "ngram", "early_exit", "draft_t1", "draft_pad3")
MESH_CASES = {"one": ALL_CASES, "2x4": ALL_CASES, "1x8": ("draft", "draft_t1"),
              "8x1": ("draft", "draft_t1", "draft_pad3")}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 8 query/kv heads, MLP width 128 and vocabulary 320 are divisible by every model axis used.
TARGET = ModelConfig("llama", 320, 64, 2, 8, 8, 8, 128, max_positions=256, tie_embeddings=False)
DRAFT = ModelConfig("llama", 320, 64, 1, 8, 8, 8, 128, max_positions=256, tie_embeddings=False)

_WORKER = r"""
import json, sys
sys.path.insert(0, {root!r})
import jax, numpy as np
import specjax
from specjax import parallel
target_dir, draft_dir = {target!r}, {draft!r}
rng = np.random.default_rng(0)
prompts8 = [rng.integers(0, 320, size=int(n)).tolist() for n in (3, 9, 5, 12, 7, 2, 10, 6)]
prompts3 = prompts8[:3]
CASES = {{"alone": (None, 0.0, prompts8), "draft": ("D", 0.0, prompts8),
         "ngram": ("ngram:2", 0.0, prompts8), "early_exit": ("early_exit:1", 0.0, prompts3),
         "draft_t1": ("D", 1.0, prompts8), "draft_pad3": ("D", 0.0, prompts3)}}
out = {{"devices": jax.device_count(), "runs": {{}}, "errors": {{}},
       "default_mesh": dict(parallel.make_mesh().shape), "rest_mesh": dict(parallel.make_mesh((2, -1)).shape)}}
for key, names in {mesh_cases!r}.items():
  shape = None if key == "one" else tuple(int(x) for x in key.split("x"))
  mesh = None if shape is None else parallel.make_mesh(shape)
  target = specjax.load_model(target_dir, mesh=mesh)
  draft = specjax.load_model(draft_dir, mesh=mesh)
  runs = out["runs"][key] = {{}}
  if mesh is not None:
    emb = target.params["embed"]
    runs["embed_shard"] = list(emb.addressable_shards[0].data.shape)
    with jax.set_mesh(mesh):  # what KVCache.init gives inside the jitted loop
      cache = jax.jit(lambda: specjax.models.KVCache.init(target.cfg, 8, 16))()
    spec = list(cache.k[0].sharding.spec)
    runs["cache_spec"] = spec + [None] * (4 - len(spec))
  for name in names:
    spec, temp, prompts = CASES[name]
    d = draft if spec == "D" else spec
    r = specjax.generate(target, prompts, max_new_tokens=8, draft=d, k=3, temperature=temp,
                         seed=3, eos_ids=())
    s = r.stats.to_dict()
    runs[name] = {{"tokens": r.tokens, "stats": {{k: s[k] for k in (
        "target_passes", "draft_passes", "verify_passes", "accepted", "checked", "new_tokens")}}}}
# Bad input: a model axis that does not divide the attention heads (a 4-head model on 8)
# is a clear error before any work; an axis that is a multiple of the kv heads (4 on 2)
# is not bad input: the kv heads are repeated in place (tests/test_wide_mesh.py).
from specjax.models import ModelConfig, init_params
from specjax.training.export import export_hf
cfg4 = ModelConfig("llama", 320, 32, 1, 4, 2, 8, 64, max_positions=64, tie_embeddings=False)
export_hf(cfg4, jax.device_get(init_params(cfg4, jax.random.PRNGKey(0))), target_dir + "_4h")
for label, fn in [
    ("heads", lambda: specjax.load_model(target_dir + "_4h", mesh=parallel.make_mesh((1, 8)))),
    ("generate_heads", lambda: specjax.generate(specjax.load_model(target_dir + "_4h"), [[1, 2]],
                                                max_new_tokens=2, mesh=parallel.make_mesh((2, 4)))),
    ("devices", lambda: parallel.make_mesh((3, 2))),
    ("parse", lambda: parallel.parse_mesh("2x4"))]:
  try:
    fn()
    out["errors"][label] = None
  except ValueError as e:
    out["errors"][label] = str(e)
print("JSON" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def fake_device_runs(tmp_path_factory):
  base = tmp_path_factory.mktemp("sharded")
  target_dir, draft_dir = str(base / "target"), str(base / "draft")
  export_hf(TARGET, jax.device_get(init_params(TARGET, jax.random.PRNGKey(1), std=0.3)), target_dir)
  export_hf(DRAFT, jax.device_get(init_params(DRAFT, jax.random.PRNGKey(2), std=0.3)), draft_dir)
  from tiny_models import fake_devices_env  # not at the top: a subprocess imports this file
  env = fake_devices_env(8, PYTHONPATH=ROOT)
  code = _WORKER.format(root=ROOT, target=target_dir, draft=draft_dir, mesh_cases=MESH_CASES)
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=600, env=env)
  assert proc.returncode == 0, proc.stderr[-4000:]
  line = next(l for l in proc.stdout.splitlines() if l.startswith("JSON"))
  return json.loads(line[4:])


@pytest.mark.parametrize("mesh", ["1x8", "2x4", "8x1"])
def test_sharded_generate_equals_one_device(fake_device_runs, mesh):
  """Greedy (a draft model, a padded batch of 3; on (2, 4) also the target alone, n-gram
  and early exit) and T = 1 with a fixed seed: tokens and stats identical to one device."""
  assert fake_device_runs["devices"] == 8
  one, runs = fake_device_runs["runs"]["one"], fake_device_runs["runs"][mesh]
  for case in MESH_CASES[mesh]:
    assert runs[case]["tokens"] == one[case]["tokens"], (mesh, case)
    assert runs[case]["stats"] == one[case]["stats"], (mesh, case)
  assert all(len(t) == 8 for t in one["draft"]["tokens"])
  assert one["draft"]["stats"]["target_passes"] < one["alone"]["stats"]["target_passes"]  # it speculated
  # The sampled run differs from the greedy one (the seed matters, so equality is not vacuous).
  assert one["draft_t1"]["tokens"] != one["draft"]["tokens"]


def test_parameters_are_split_over_the_model_axis(fake_device_runs):
  """embed [V=320, D=64] is split by vocabulary over "model": 320 / m rows per device."""
  runs = fake_device_runs["runs"]
  assert runs["1x8"]["embed_shard"] == [40, 64]
  assert runs["2x4"]["embed_shard"] == [80, 64]
  assert runs["8x1"]["embed_shard"] == [320, 64]
  assert runs["2x4"]["cache_spec"] == ["data", "model", None, None]


def test_bad_meshes_are_clear_errors(fake_device_runs):
  errors = fake_device_runs["errors"]
  assert "'model' axis (8) does not divide the attention heads (4), kv heads (2)" in errors["heads"]
  assert errors["generate_heads"] is None  # 2 kv heads widened onto a 4-way axis
  assert "needs 6 devices but 8 are available" in errors["devices"]
  assert "Bad mesh '2x4'" in errors["parse"]


def test_one_make_mesh_default_is_data_parallel(fake_device_runs):
  """No shape (or "") puts every device on "data" (what --config.mesh= left empty means);
  -1 takes what the other axis leaves."""
  assert fake_device_runs["default_mesh"] == {"data": 8, "model": 1}
  assert fake_device_runs["rest_mesh"] == {"data": 2, "model": 4}


def test_parallel_imports_nothing_from_specjax():
  """specjax.models imports specjax.parallel (the cache's constraint), so parallel sits
  below it: no specjax import at all, not even inside a function; paths likewise."""
  import ast
  for name in ("parallel.py", "paths.py"):
    tree = ast.parse(open(os.path.join(ROOT, "specjax", name)).read())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m.split(".")[0] == "specjax"], (name, imported)


def test_mesh_strings_and_rules():
  assert parallel.parse_mesh("1,8") == (1, 8)
  assert parallel.parse_mesh("data=2,model=4") == (2, 4)
  assert parallel.parse_mesh("model=8") == (1, 8)
  for bad in ("8", "a,b", "data=2,mode=4", "0,8", "data=2,data=4"):
    with pytest.raises(ValueError, match="Bad mesh"):
      parallel.parse_mesh(bad)
  specs = parallel.param_specs(init_params(TARGET, jax.random.PRNGKey(0)), PARAM_AXES)
  P = jax.sharding.PartitionSpec
  layer = specs["layers"][0]
  assert specs["embed"] == P("model", None) and specs["lm_head"]["kernel"] == P(None, "model")
  assert layer["attn"]["q"]["kernel"] == P(None, "model")
  assert layer["attn"]["o"]["kernel"] == P("model", None)
  assert layer["mlp"]["down"]["kernel"] == P("model", None)
  assert layer["attn_norm"]["scale"] == P(None) and specs["final_norm"]["scale"] == P(None)


# ------------------------------------------------------------------ sharded distillation

_TRAIN_WORKER = r"""
import json, sys
sys.path.insert(0, {root!r})
import jax
from jax.sharding import PartitionSpec as P
from tests.test_sharding import _train_config
from tests.training.test_training import _toy
from specjax.training import read_metrics, train
from specjax import parallel
from specjax.models.params import PARAM_AXES
out = {{"devices": jax.device_count()}}
c = _train_config("2,4")
t, tp, hp = _toy(c)
train(c, {work!r} + "/a", t, tp, hp, progress=False)                 # 6 steps on 2 x 4
train(c, {work!r} + "/b", t, tp, hp, progress=False, stop_at=3)      # killed after step 3 ...
train(_train_config("8,1"), {work!r} + "/b", t, tp, hp, progress=False)  # ... resumed on 8 x 1
for run in "ab":
  out[run] = {{r["step"]: r["loss"] for r in read_metrics({work!r} + "/" + run) if "loss" in r}}
mesh = parallel.make_mesh("2,4")
state = parallel.place_state({{"params": t.params, "opt_state": {{"mu": t.params}}}}, mesh, PARAM_AXES)
q = lambda tree: tuple(tree["layers"][0]["attn"]["q"]["kernel"].sharding.spec)
out["specs"] = {{"param_q": list(q(state["params"])), "moment_q": list(q(state["opt_state"]["mu"])),
                 "embed": list(state["params"]["embed"].sharding.spec)}}
try:
  parallel.check_mesh(_toy(_train_config("1,8", heads=4))[0].cfg, parallel.make_mesh("1,8"), "toy")
except ValueError as e:
  out["error"] = str(e)
print("JSON" + json.dumps(out))
"""


def _train_config(mesh: str, heads: int = 8):
  """The tiny distillation config on a toy target with 8 heads (so a model axis of 8
  divides heads, kv heads, MLP width 64 and vocabulary 64)."""
  sys.path.insert(0, ROOT)
  from tests.training.test_training import _tiny_config
  c = _tiny_config(num_steps=6, batch_size=8, ckpt_every=3)
  c.toy.n_heads, c.toy.n_kv_heads = heads, heads
  c.mesh = mesh
  return c


def test_sharded_distillation_matches_one_device_and_restores_onto_another_mesh(tmp_path):
  """Tensor + data parallel (2 x 4) losses equal one device's within rtol 1e-4 (only
  reduction orders differ); a run checkpointed on 2 x 4 and resumed on 8 x 1 continues
  with the same losses; the optimizer moments are split over "data" (FSDP)."""
  sys.path.insert(0, ROOT)
  from specjax.training import read_metrics, train
  from tests.training.test_training import _toy
  c = _train_config("")
  t, tp, hp = _toy(c)
  train(c, str(tmp_path / "one"), t, tp, hp, progress=False)
  one = [r["loss"] for r in read_metrics(str(tmp_path / "one")) if "loss" in r]
  from tiny_models import fake_devices_env  # not at the top: a subprocess imports this file
  env = fake_devices_env(8, PYTHONPATH=ROOT)
  proc = subprocess.run([sys.executable, "-c", _TRAIN_WORKER.format(root=ROOT, work=str(tmp_path))],
                        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
  assert proc.returncode == 0, proc.stderr[-4000:]
  out = json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("JSON"))[4:])
  assert out["devices"] == 8 and len(one) == 6
  a = [out["a"][str(s)] for s in range(1, 7)]
  b = [out["b"][str(s)] for s in range(1, 7)]
  np.testing.assert_allclose(a, one, rtol=1e-4)
  np.testing.assert_allclose(b, one, rtol=1e-4)
  assert one[-1] < one[0]  # it trained
  assert out["specs"]["param_q"] == [None, "model"]
  assert out["specs"]["moment_q"] == ["data", "model"]
  assert out["specs"]["embed"] == ["model"] or out["specs"]["embed"] == ["model", None]
  assert "does not divide the attention heads (4), kv heads (4)" in out["error"]


# ------------------------------------------------------------------------------ bfloat16

def test_bfloat16_params_and_caches_float32_logits(tmp_path):
  """dtype="bfloat16" at load: params and the loop's KV caches in bf16, logits and
  sampling in float32; greedy speculative output equals the bf16 target alone here."""
  import jax.numpy as jnp
  import specjax
  from specjax.decoding.drafters import NgramDrafter
  from specjax.decoding.loop import run
  from specjax.sampling import SamplingParams
  export_hf(TARGET, jax.device_get(init_params(TARGET, jax.random.PRNGKey(1), std=0.3)),
            str(tmp_path / "t"))
  model = specjax.load_model(str(tmp_path / "t"), dtype="bfloat16")
  assert {x.dtype for x in jax.tree.leaves(model.params)} == {jnp.dtype(jnp.bfloat16)}
  assert model.logits([[1, 2, 3]]).dtype == jnp.float32
  prompt = jnp.zeros((2, 16), jnp.int32)
  state = jax.eval_shape(lambda p: run(
      p, NgramDrafter(n=2), prompt, jnp.array([3, 5]), jnp.int32(4), jax.random.PRNGKey(0),
      target_cfg=model.cfg, sampling=SamplingParams(), k=2, eos_ids=(), max_len=128),
      model.params)
  assert state.target_cache.k[0].dtype == jnp.bfloat16
  prompts = [[5, 6, 7, 5, 6, 7, 5], [9, 1, 2, 3]]
  alone = specjax.generate(model, prompts, max_new_tokens=8, eos_ids=())
  spec = specjax.generate(model, prompts, max_new_tokens=8, draft="ngram:2", k=3, eos_ids=())
  assert spec.tokens == alone.tokens


def test_scripts_reject_a_malformed_mesh_in_one_line(tmp_path):
  for cmd in (["scripts/speculate.py", "--config.mesh=2x4"],
              ["scripts/distill.py", "--config=configs/distill.py:tiny",
               f"--workdir={tmp_path}", "--config.mesh=data=2,modle=4"]):
    proc = subprocess.run([sys.executable] + cmd, capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("error: Bad mesh") and "Traceback" not in proc.stderr, cmd


def _split_checkpoint(src: str, dst: str) -> None:
  """Rewrites a single-file checkpoint as two shards with an index, like save_pretrained."""
  import shutil
  from safetensors.numpy import load_file, save_file
  shutil.copytree(src, dst)
  tensors = load_file(os.path.join(dst, "model.safetensors"))
  os.remove(os.path.join(dst, "model.safetensors"))
  names = sorted(tensors)
  shards = {"model-00001-of-00002.safetensors": names[::2],
            "model-00002-of-00002.safetensors": names[1::2]}
  for file, part in shards.items():
    save_file({n: tensors[n] for n in part}, os.path.join(dst, file), metadata={"format": "pt"})
  index = {"weight_map": {n: f for f, part in shards.items() for n in part}}
  with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
    json.dump(index, f)


def test_mesh_load_reads_slices_lazily_and_missing_shards_are_clear(tmp_path):
  """load_model(mesh=) over lazy safetensors views of a 2-shard checkpoint gives exactly
  the eager load's params; a missing shard is a LoadError before anything is read."""
  import specjax
  from specjax.errors import LoadError
  from specjax.loading import hf
  export_hf(TARGET, jax.device_get(init_params(TARGET, jax.random.PRNGKey(1), std=0.3)),
            str(tmp_path / "one"))
  _split_checkpoint(str(tmp_path / "one"), str(tmp_path / "split"))
  _, views, _ = hf.load_hf_dir(str(tmp_path / "split"), "split", lazy=True)
  q = views["layers"][1]["attn"]["q"]["kernel"]
  assert isinstance(q, hf.TensorView) and q.shape == (64, 64)
  eager = specjax.load_model(str(tmp_path / "one"))
  lazy = specjax.load_model(str(tmp_path / "split"), mesh=parallel.make_mesh((1, 1)))
  for a, b in zip(jax.tree.leaves(canonical(eager.params)), jax.tree.leaves(lazy.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  np.testing.assert_array_equal(np.asarray(q[8:24, 3:5]),
                                np.asarray(eager.params["layers"][1]["attn"]["q"]["kernel"])[8:24, 3:5])
  os.remove(tmp_path / "split" / "model-00002-of-00002.safetensors")
  with pytest.raises(LoadError, match="shards listed in model.safetensors.index.json are missing"):
    specjax.load_model(str(tmp_path / "split"), mesh=parallel.make_mesh((1, 1)))


@pytest.mark.parametrize("fixture", ["tiny_gpt2_dir", "tiny_qwen2_dir", "tiny_llama_tied_dir"])
def test_lazy_views_map_every_family_like_the_eager_load(fixture, request):
  """GPT-2's fused c_attn split, Qwen2's biases and a tied head through TensorView."""
  import specjax
  path = request.getfixturevalue(fixture)
  eager = canonical(specjax.load_model(path).params)  # without the one-device inference layout
  lazy = specjax.load_model(path, mesh=parallel.make_mesh((1, 1)))
  assert jax.tree.structure(eager) == jax.tree.structure(lazy.params)
  for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(lazy.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
