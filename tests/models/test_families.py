"""Model families beyond Llama-2/Qwen2: Llama-3.x RoPE scaling (llama3, linear, dynamic),
Qwen3 (per-head q/k RMSNorm, explicit head_dim), Qwen2.5 and Mistral sliding windows,
and GGUF files of these architectures.

Each tiny random model is built with transformers and `save_pretrained`; logits must
match transformers' PyTorch forward to 1e-4 and cached decoding must equal the full
forward. The RoPE-scaled models use a short original context (64) so that the scaling
changes the rotation at the positions tested.
"""
from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.errors import LoadError
from specjax.loading import load_model
from specjax.models import KVCache, forward

from conftest import TINY_VOCAB, save_tiny
from test_gguf import write_gguf
from test_loading import random_ids, torch_logits

_COMMON = dict(vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
               rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
_LLAMA3 = {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def _config(kind: str):
  import transformers as t
  if kind == "llama3":
    return t.LlamaConfig(**_COMMON, rope_parameters=dict(_LLAMA3))
  if kind == "llama_linear":
    return t.LlamaConfig(**_COMMON, rope_parameters={"rope_type": "linear", "rope_theta": 1e4,
                                                     "factor": 4.0})
  if kind == "llama_dynamic":
    return t.LlamaConfig(**_COMMON, rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4,
                                                     "factor": 2.0})
  if kind == "qwen3":  # head_dim 24 != 64 / 4, q/k norms
    return t.Qwen3Config(**_COMMON, head_dim=24, rope_parameters={"rope_type": "default",
                                                                  "rope_theta": 1e6})
  if kind == "qwen2_5":  # Qwen2.5 ships sliding_window with use_sliding_window=false
    return t.Qwen2Config(**_COMMON, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                         use_sliding_window=False, sliding_window=32, max_window_layers=1)
  if kind == "mistral":  # a window of 96 >= every sequence below
    return t.MistralConfig(**_COMMON, head_dim=16, sliding_window=96)
  raise KeyError(kind)


KINDS = ["llama3", "llama_linear", "llama_dynamic", "qwen3", "qwen2_5", "mistral"]


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory, tiny_tokenizer_dir):
  return {kind: save_tiny(tmp_path_factory, tiny_tokenizer_dir, kind, _config(kind), seed=10 + i)
          for i, kind in enumerate(KINDS)}


@pytest.mark.parametrize("kind", KINDS)
def test_logits_match_transformers(kind, family_dirs):
  path = family_dirs[kind]
  model = load_model(path)
  ids = random_ids((2, 40), TINY_VOCAB, seed=1)  # within 64: dynamic NTK stays plain RoPE
  want = torch_logits(path, ids)
  assert np.abs(want).max() > 1.0
  np.testing.assert_allclose(np.asarray(model.logits(ids)), want, atol=1e-4, rtol=0)


def test_config_fields_are_read(family_dirs):
  cfg = {k: load_model(family_dirs[k]).cfg for k in KINDS}
  assert (cfg["llama3"].rope_type, cfg["llama3"].rope_factor,
          cfg["llama3"].rope_original_max_positions, cfg["llama3"].rope_theta) == (
              "llama3", 8.0, 64, 5e5)
  assert (cfg["llama_linear"].rope_type, cfg["llama_linear"].rope_factor) == ("linear", 4.0)
  assert cfg["llama_dynamic"].rope_type == "default" and cfg["llama_dynamic"].max_positions == 128
  assert cfg["qwen3"].qk_norm and cfg["qwen3"].head_dim == 24 and not cfg["qwen3"].qkv_bias
  assert cfg["qwen2_5"].qkv_bias and cfg["qwen2_5"].sliding_window == 0
  assert cfg["mistral"].sliding_window == 96 and not cfg["mistral"].qk_norm


def test_rope_scaling_changes_the_rotation(family_dirs):
  """Negative control: the scaled models differ from their plain-RoPE twins."""
  for kind in ("llama3", "llama_linear"):
    model = load_model(family_dirs[kind])
    plain = specjax.models.ModelConfig(**{**model.cfg.__dict__, "rope_type": "default"})
    ids = jnp.asarray(random_ids((1, 40), TINY_VOCAB, seed=3))
    a = np.asarray(forward(model.params, model.cfg, ids)[0])
    b = np.asarray(forward(model.params, plain, ids)[0])
    assert np.abs(a - b).max() > 1e-2, kind


@pytest.mark.parametrize("kind", ["llama3", "qwen3", "mistral"])
def test_cached_decoding_matches_full_forward(kind, family_dirs):
  """Ragged prefill, 1-token steps, then a 3-token step equal each row's full forward."""
  model = load_model(family_dirs[kind])
  cfg, params = model.cfg, model.params
  lengths = [5, 2, 7]
  seqs = random_ids((3, 13), cfg.vocab_size, seed=4)
  prompt = seqs[:, :7].copy()
  full = [np.asarray(model.logits(seqs[b, :n + 6])) for b, n in enumerate(lengths)]
  step_fn = jax.jit(forward, static_argnums=1)
  cache = KVCache.init(cfg, 3, 32)
  logits, cache = step_fn(params, cfg, jnp.asarray(prompt), cache)
  cache = cache.with_lengths(lengths)
  for b, n in enumerate(lengths):
    np.testing.assert_allclose(np.asarray(logits[b, :n]), full[b][:n], atol=1e-4)
  for s in range(3):
    step = np.array([[seqs[b, n + s]] for b, n in enumerate(lengths)], np.int32)
    logits, cache = step_fn(params, cfg, jnp.asarray(step), cache)
    for b, n in enumerate(lengths):
      np.testing.assert_allclose(np.asarray(logits[b, 0]), full[b][n + s], atol=1e-4)
  multi = np.stack([seqs[b, n + 3:n + 6] for b, n in enumerate(lengths)])
  logits, cache = step_fn(params, cfg, jnp.asarray(multi), cache)
  for b, n in enumerate(lengths):
    np.testing.assert_allclose(np.asarray(logits[b]), full[b][n + 3:n + 6], atol=1e-4)


def test_generate_greedy_equals_full_forward_reference(family_dirs):
  """The Qwen3 model through `generate` (target alone and n-gram) equals argmax decoding."""
  model = load_model(family_dirs["qwen3"])
  prompt = random_ids((9,), TINY_VOCAB, seed=7).tolist()
  ids = list(prompt)
  for _ in range(8):
    ids.append(int(np.argmax(np.asarray(model.logits(ids))[-1])))
  for draft in (None, "ngram:2"):
    out = specjax.generate(model, [prompt], max_new_tokens=8, draft=draft, k=3, eos_ids=())
    assert out.tokens[0] == ids[len(prompt):], draft


# ------------------------------------------------------------------------- bad input

def test_unknown_rope_scaling_is_a_clear_error(family_dirs, tmp_path):
  shutil.copytree(family_dirs["llama3"], tmp_path / "m")
  cfg = json.load(open(tmp_path / "m" / "config.json"))
  cfg["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 5e5, "factor": 4.0,
                            "original_max_position_embeddings": 64}
  (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(LoadError, match="rope scaling 'yarn' is not supported"):
    load_model(str(tmp_path / "m"))
  with pytest.raises(ValueError, match="Unknown rope scaling type 'yarn'"):
    specjax.models.ModelConfig("llama", 10, 8, 1, 2, 2, 4, 8, rope_type="yarn")


def test_sliding_window_shorter_than_the_sequence_is_a_clear_error(family_dirs, tmp_path):
  shutil.copytree(family_dirs["mistral"], tmp_path / "m")
  cfg = json.load(open(tmp_path / "m" / "config.json"))
  cfg["sliding_window"] = 16
  (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
  model = load_model(str(tmp_path / "m"))
  assert model.cfg.sliding_window == 16
  with pytest.raises(ValueError, match="sliding-window attention"):
    specjax.generate(model, [[1, 2, 3]], max_new_tokens=20)
  with pytest.raises(ValueError, match="sliding-window attention"):
    model.logits(random_ids((1, 20), TINY_VOCAB))
  out = specjax.generate(model, [[1, 2, 3]], max_new_tokens=6, eos_ids=())  # fits: runs
  assert len(out.tokens[0]) == 6


# ----------------------------------------------------------------------------- GGUF

def _llama3_rope_freqs(p: dict, head_dim: int) -> np.ndarray:
  """llama.cpp convert_hf_to_gguf.py LlamaModel.generate_extra_tensors (rope_freqs)."""
  import math
  freqs = 1.0 / (p["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
  old = p["original_max_position_embeddings"]
  low_wl, high_wl = old / p["low_freq_factor"], old / p["high_freq_factor"]
  out = []
  for f in freqs:
    wl = 2 * math.pi / f
    if wl < high_wl:
      out.append(1.0)
    elif wl > low_wl:
      out.append(p["factor"])
    else:
      smooth = (old / wl - p["low_freq_factor"]) / (p["high_freq_factor"] - p["low_freq_factor"])
      out.append(1 / ((1 - smooth) / p["factor"] + smooth))
  return np.asarray(out, np.float32)


def _with_extras(monkeypatch, hf_dir: str, kind: str) -> None:
  """Makes `write_gguf` (tests/loading/test_loading.py) also write what llama.cpp's converter adds
  for these families: Qwen3's attn_q_norm / attn_k_norm, Llama-3's rope_freqs."""
  import gguf
  from safetensors.numpy import load_file
  t = load_file(f"{hf_dir}/model.safetensors")
  hf = json.load(open(f"{hf_dir}/config.json"))

  class Writer(gguf.GGUFWriter):
    def write_header_to_file(self, *a, **kw):
      if kind == "qwen3":
        for i in range(hf["num_hidden_layers"]):
          for n in "qk":
            self.add_tensor(f"blk.{i}.attn_{n}_norm.weight",
                            t[f"model.layers.{i}.self_attn.{n}_norm.weight"].astype(np.float32))
      if kind == "llama3":
        head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
        self.add_tensor("rope_freqs.weight", _llama3_rope_freqs(hf["rope_parameters"], head_dim))
      if kind == "mistral":
        self.add_sliding_window(hf["sliding_window"])
      return super().write_header_to_file(*a, **kw)

  monkeypatch.setattr(gguf, "GGUFWriter", Writer)


@pytest.mark.parametrize("kind,arch", [("llama3", "llama"), ("qwen3", "qwen3"),
                                       ("mistral", "llama")])
def test_gguf_of_new_families_matches_transformers(kind, arch, family_dirs, monkeypatch, tmp_path):
  hf_dir = family_dirs[kind]
  _with_extras(monkeypatch, hf_dir, kind)
  path = str(tmp_path / f"{kind}.gguf")
  write_gguf(hf_dir, path, arch)
  ours = load_model(path)
  assert ours.cfg.qk_norm == (kind == "qwen3")
  assert ours.cfg.rope_type == ("factors" if kind == "llama3" else "default")
  assert ours.cfg.sliding_window == (96 if kind == "mistral" else 0)
  ids = random_ids((2, 40), TINY_VOCAB, seed=6)
  np.testing.assert_allclose(np.asarray(ours.logits(ids)), torch_logits(hf_dir, ids),
                             atol=1e-4, rtol=0)


def test_gguf_unknown_rope_scaling_is_a_clear_error(family_dirs, monkeypatch, tmp_path):
  import gguf

  class Writer(gguf.GGUFWriter):
    def write_header_to_file(self, *a, **kw):
      self.add_rope_scaling_type(gguf.RopeScalingType.YARN)
      self.add_rope_scaling_factor(4.0)
      return super().write_header_to_file(*a, **kw)

  monkeypatch.setattr(gguf, "GGUFWriter", Writer)
  path = str(tmp_path / "yarn.gguf")
  write_gguf(family_dirs["qwen2_5"], path, "qwen2")
  with pytest.raises(LoadError, match="rope scaling 'yarn' is not supported"):
    load_model(path)


def test_transformers4_style_llama31_config_json():
  """Llama-3.1's config.json as published (transformers 4: `rope_scaling` + `rope_theta`)."""
  from specjax.loading.hf import config_from_hf
  hf = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "tie_word_embeddings": False,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
  cfg = config_from_hf(hf, "llama-3.1-8b")
  assert (cfg.rope_type, cfg.rope_factor, cfg.rope_theta, cfg.rope_original_max_positions,
          cfg.head_dim, cfg.max_positions) == ("llama3", 8.0, 5e5, 8192, 128, 131072)
  inv = cfg.rope_inv_freq()
  base = 1.0 / (5e5 ** (np.arange(0, 128, 2) / 128))
  assert np.allclose(inv[:10], base[:10], rtol=1e-5)  # short wavelengths kept
  assert np.allclose(inv[-10:], base[-10:] / 8.0, rtol=1e-5)  # long ones divided by 8
