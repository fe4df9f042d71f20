"""Wide meshes: a "model" axis wider than the kv heads and a vocabulary it does not divide.

A target with 8 query heads, 4 kv heads and a vocabulary of 100 (tied head) and a draft
with 2 kv heads (untied head) on a (1, 8) mesh: kv heads are repeated to 8 (one a device)
and the vocabulary padded to 104 (`parallel.widen_params`, `parallel.mesh_config`).
On one device here: the widened params give the logits of the original ones, and a tile
of the kv heads (the wrong order) does not. In a subprocess on 8 fake CPU devices: greedy
`specjax.generate` (target alone, and with the draft, chain k=2) gives one device's tokens
and stats, and a model axis of 3 is one clear error line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import parallel
from specjax.models import ModelConfig, forward, init_params
from specjax.models.params import PARAM_AXES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = ModelConfig("llama", 100, 32, 2, 8, 4, 8, 64, max_positions=128, tie_embeddings=True)
DRAFT = ModelConfig("llama", 100, 32, 1, 8, 2, 8, 64, max_positions=128, tie_embeddings=False)
# Qwen2-style (q/k/v biases, here random so their repeat order shows) with per-head q/k norms.
BIASED = ModelConfig("llama", 100, 32, 2, 8, 4, 8, 64, max_positions=128, tie_embeddings=False,
                     qkv_bias=True, qk_norm=True)
PROMPTS = [[3, 17, 42, 99, 5], [60, 1, 2, 77, 13, 8, 91, 40, 22]]


def _scaled(layers: list, scale: float) -> list:
  """Layers with the attention output and MLP down projections scaled (residuals small)."""
  out = []
  for lp in layers:
    attn = {**lp["attn"], "o": {**lp["attn"]["o"], "kernel": lp["attn"]["o"]["kernel"] * scale}}
    down = lp["mlp"]["down"]
    mlp = {**lp["mlp"], "down": {**down, "kernel": down["kernel"] * scale}}
    out.append({**lp, "attn": attn, "mlp": mlp})
  return out


def make_models() -> tuple[dict, dict]:
  """(target params, draft params) as numpy trees. Small residual updates keep both close
  to the same bigram model (the draft reads the target's embeddings), so the draft is
  accepted part of the time and the stats compared below are not vacuous."""
  target = jax.device_get(init_params(TARGET, jax.random.PRNGKey(1), std=0.3))
  target["layers"] = _scaled(target["layers"], 1 / 6)
  draft = jax.device_get(init_params(DRAFT, jax.random.PRNGKey(2), std=0.3))
  draft["layers"] = _scaled(draft["layers"], 1 / 6)
  draft["embed"] = target["embed"]
  draft["lm_head"] = {"kernel": np.ascontiguousarray(target["embed"].T)}
  return target, draft


def _biased_params() -> dict:
  params = jax.device_get(init_params(BIASED, jax.random.PRNGKey(3), std=0.3))
  rng = np.random.default_rng(3)
  for lp in params["layers"]:
    for n in "qkv":
      lp["attn"][n]["bias"] = rng.normal(0, 0.3, lp["attn"][n]["bias"].shape).astype(np.float32)
  return params


def _tiled(params: dict, cfg: ModelConfig, m: int) -> dict:
  """The naive widening: k/v heads tiled [a, b, c, d, a, b, ...] instead of repeated."""
  reps = m // cfg.n_kv_heads
  tile = lambda x: np.tile(np.asarray(x).reshape(x.shape[:-1] + (cfg.n_kv_heads, cfg.head_dim)),
                           (1,) * (x.ndim - 1) + (reps, 1)).reshape(x.shape[:-1] + (-1,))
  wide = parallel.widen_params(params, cfg, m, PARAM_AXES)
  layers = [{**lp, "attn": {**lp["attn"], **{n: {k: tile(v) for k, v in p["attn"][n].items()}
                                             for n in "kv"}}}
            for lp, p in zip(wide["layers"], params["layers"])]
  return {**wide, "layers": layers}


def _logits(params, cfg, tokens=PROMPTS[1]):
  return np.asarray(forward(params, cfg, jnp.asarray([tokens]))[0][0])  # [T, V]


@pytest.mark.parametrize("which", ["target", "draft", "biased"])
def test_widened_params_give_the_same_logits_and_a_tile_does_not(which):
  """kv heads repeated to 8 (so query head h still reads its kv head h // G), vocabulary
  padded to 104 with zero rows/columns and sliced off: logits equal the original's. The
  negative control tiles the heads instead: other keys for most query heads, other logits."""
  target, draft = make_models()
  cfg, params = {"target": (TARGET, target), "draft": (DRAFT, draft),
                 "biased": (BIASED, _biased_params())}[which]
  params = jax.tree.map(jnp.asarray, params)
  wide_cfg = parallel.mesh_config(cfg, 8)
  wide = parallel.widen_params(params, cfg, 8, PARAM_AXES)
  assert wide_cfg.n_kv_heads == 8 and wide_cfg.vocab_size == 100
  k = wide["layers"][0]["attn"]["k"]["kernel"]  # [D, 8 * E]
  assert k.shape == (32, 64) and wide["embed"].shape == (104, 32)
  assert not np.asarray(wide["embed"][100:]).any()
  if not cfg.tie_embeddings:
    assert wide["lm_head"]["kernel"].shape == (32, 104)
  heads = np.asarray(k).reshape(32, 8, 8)
  old = np.asarray(params["layers"][0]["attn"]["k"]["kernel"]).reshape(32, cfg.n_kv_heads, 8)
  r = 8 // cfg.n_kv_heads
  for j in range(8):  # new kv head j is old head j // r
    np.testing.assert_array_equal(heads[:, j], old[:, j // r])
  ref = _logits(params, cfg)
  got = _logits(wide, wide_cfg)
  assert got.shape == ref.shape == (len(PROMPTS[1]), 100)
  np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5)
  tiled = _tiled(params, cfg, 8)
  assert not np.array_equal(np.asarray(tiled["layers"][0]["attn"]["k"]["kernel"]), np.asarray(k))
  assert np.abs(_logits(tiled, wide_cfg) - ref).max() > 1e-3


def test_lazy_leaves_read_only_their_slice():
  """Host (and lazy safetensors) leaves are widened as views: one device's slice of the k
  kernel (one head) and of the padded embedding equals the eager widening."""
  target, _ = make_models()
  lazy = parallel.widen_params(target, TARGET, 8, PARAM_AXES)
  eager = parallel.widen_params(jax.tree.map(jnp.asarray, target), TARGET, 8, PARAM_AXES)
  k_lazy = lazy["layers"][1]["attn"]["k"]["kernel"]
  k = np.asarray(eager["layers"][1]["attn"]["k"]["kernel"])
  assert not isinstance(k_lazy, (np.ndarray, jax.Array)) and k_lazy.shape == (32, 64)
  for j in range(8):
    head = slice(8 * j, 8 * j + 8)  # one device's columns
    np.testing.assert_array_equal(k_lazy[slice(0, 32), head], k[:, head])
  emb = np.asarray(eager["embed"])
  np.testing.assert_array_equal(lazy["embed"][slice(91, 104), slice(0, 32)], emb[91:104])
  np.testing.assert_array_equal(lazy["embed"][slice(0, 13), slice(0, 32)], target["embed"][:13])
  # Widening what is already wide (a model loaded on the mesh, placed again) changes nothing.
  again = parallel.widen_params(eager, parallel.mesh_config(TARGET, 8), 8, PARAM_AXES)
  assert again["embed"] is eager["embed"]
  assert again["layers"][1]["attn"]["k"]["kernel"] is eager["layers"][1]["attn"]["k"]["kernel"]


def test_mesh_rules_and_errors():
  """Divisors and multiples of the kv heads fit; an axis dividing the query heads but
  neither dividing nor a multiple of the kv heads is one error line naming them."""
  for m in (1, 2, 4, 8):
    parallel.check_mesh(TARGET, m)
  assert parallel.mesh_config(TARGET, 2) == TARGET
  assert parallel.mesh_config(TARGET, 8).n_kv_heads == 8
  cfg = ModelConfig("llama", 100, 48, 1, 12, 4, 4, 48)
  with pytest.raises(ValueError) as e:
    parallel.check_mesh(cfg, 6, "m12")
  msg = str(e.value)
  assert "\n" not in msg
  assert msg.startswith("m12: the mesh's 'model' axis (6) does not divide the kv heads (4);")
  assert "divisor or a multiple of the kv heads" in msg and "[1, 2, 4, 12]" in msg


_WORKER = r"""
import json, sys
sys.path[:0] = [{root!r}, {root!r} + "/tests"]
import jax, numpy as np
import specjax
from specjax import parallel
from specjax.loading.hf_export import export_hf
from specjax.models import KVCache
from tests.test_wide_mesh import DRAFT, PROMPTS, TARGET, make_models
from tiny_models import TinyModel
target_params, draft_params = make_models()
export_hf(TARGET, target_params, {work!r} + "/target")
draft = TinyModel(DRAFT, draft_params, name="draft")
mesh = parallel.make_mesh((1, 8))
one = specjax.load_model({work!r} + "/target")
wide = specjax.load_model({work!r} + "/target", mesh=mesh)  # lazy views, widened
out = {{"devices": jax.device_count(), "runs": {{}}, "kv_heads": wide.cfg.n_kv_heads}}
for key, target, d in [("one", one, None), ("one", one, draft), ("1x8", wide, None),
                       ("1x8", wide, draft), ("1x8_from_one", one, None)]:
  r = specjax.generate(target, PROMPTS, max_new_tokens=8, draft=d, k=2, eos_ids=(),
                       mesh=mesh if key == "1x8_from_one" else None)
  s = r.stats.to_dict()
  out["runs"].setdefault(key, {{}})["draft" if d else "alone"] = {{"tokens": r.tokens,
      "stats": {{k: s[k] for k in ("target_passes", "accepted", "checked", "new_tokens")}}}}
shard = lambda x: list(x.addressable_shards[0].data.shape)
k = wide.params["layers"][0]["attn"]["k"]["kernel"]
out["shards"] = {{"k": shard(k), "embed": shard(wide.params["embed"]),
                 "k_spec": list(k.sharding.spec)}}
with jax.set_mesh(mesh):
  cache = jax.jit(lambda: KVCache.init(wide.cfg, 2, 16))()
out["cache"] = {{"shape": list(cache.k[0].shape), "shard": shard(cache.k[0])}}
try:
  mesh3 = parallel.make_mesh((1, 3), jax.devices()[:3])
  specjax.generate(one, PROMPTS, max_new_tokens=2, mesh=mesh3)
  out["error3"] = None
except ValueError as e:
  out["error3"] = str(e)
print("JSON" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def wide_runs(tmp_path_factory):
  from tiny_models import fake_devices_env  # not at the top: the subprocess imports this file
  work = str(tmp_path_factory.mktemp("wide"))
  proc = subprocess.run([sys.executable, "-c", _WORKER.format(root=ROOT, work=work)],
                        capture_output=True, text=True, timeout=600, cwd=ROOT,
                        env=fake_devices_env(8, PYTHONPATH=ROOT))
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("JSON"))[4:])


def test_wide_mesh_generate_equals_one_device(wide_runs):
  """On (1, 8): greedy tokens and stats of the target alone and with the draft (k=2) equal
  one device's, whether the target was loaded on the mesh or placed by generate."""
  runs = wide_runs["runs"]
  assert wide_runs["devices"] == 8 and wide_runs["kv_heads"] == 8
  for case in ("alone", "draft"):
    assert runs["1x8"][case] == runs["one"][case], case
  assert runs["1x8_from_one"]["alone"] == runs["one"]["alone"]
  assert runs["one"]["draft"]["tokens"] == runs["one"]["alone"]["tokens"]
  stats = runs["one"]["draft"]["stats"]
  assert 0 < stats["accepted"] < stats["checked"]  # the draft is right only sometimes
  assert all(len(t) == 8 for t in runs["one"]["alone"]["tokens"])
  assert max(max(t) for r in runs.values() for c in r.values() for t in c["tokens"]) < 100


def test_wide_mesh_splits_one_kv_head_and_13_vocabulary_rows_a_device(wide_runs):
  s = wide_runs["shards"]
  assert s["k"] == [32, 8] and s["k_spec"][-1] == "model" and s["embed"] == [13, 32]
  assert wide_runs["cache"] == {"shape": [2, 8, 8, 16], "shard": [2, 1, 8, 16]}


def test_an_axis_that_fits_neither_is_one_error_line(wide_runs):
  msg = wide_runs["error3"]
  assert msg is not None and "\n" not in msg
  assert ("'model' axis (3) does not divide the attention heads (8), kv heads (4), "
          "MLP width (64)") in msg
  assert "model-axis size in [1, 2, 4, 8]" in msg
