"""specjax.loading: GGUF files, synthetic (tiny checkpoints written the way llama.cpp's
converter writes them) and the embedded SmolLM2-135M-Instruct GGUF against transformers'
own GGUF loading (marked `real_model`, loaded once per module).
"""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from specjax.loading import load_model, registry
from specjax.loading.gguf_file import reverse_permute


def random_ids(shape, vocab, seed=0) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, vocab, shape).astype(np.int32)


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
