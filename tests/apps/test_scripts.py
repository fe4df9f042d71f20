"""End-to-end runs of the experiment scripts on tiny configs in a tmp workdir (slow).

A tiny random Llama target and a 1-layer draft sharing its tokenizer are written with
transformers' `save_pretrained`, so both specjax and the transformers peer load them.
Each script runs as a subprocess (as a user would run it) and the files it promises are
checked: non-empty PNGs, parseable JSON with the documented fields.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCAB = 300
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def _save_tiny_llama(path, n_layers: int, seed: int, tokenizer_dir: str) -> str:
  import shutil

  import torch
  import transformers
  torch.manual_seed(seed)
  cfg = transformers.LlamaConfig(
      vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=n_layers,
      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
  model = transformers.AutoModelForCausalLM.from_config(cfg)
  with torch.no_grad():  # peaked logits: repetitive text, so the drafters get accepted
    for p in model.parameters():
      p.normal_(0.0, 0.3) if p.ndim > 1 else p.fill_(1.0)
  model.save_pretrained(path)
  for f in os.listdir(tokenizer_dir):
    shutil.copy(os.path.join(tokenizer_dir, f), os.path.join(path, f))
  return str(path)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
  """(target_dir, draft_dir): 2-layer and 1-layer tiny Llamas with a shared BPE tokenizer."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  from transformers import PreTrainedTokenizerFast
  specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  tok.decoder = decoders.ByteLevel()
  corpus = ["How can I make friends in a new city? Rewrite this sentence in a formal tone.",
            "Please remember to submit your reports before the end of the week."] * 20
  tok.train_from_iterator(corpus, trainers.BpeTrainer(
      vocab_size=VOCAB - 10, special_tokens=specials, show_progress=False,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
  fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>",
                                 eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 chat_template=CHATML)
  tok_dir = tmp_path_factory.mktemp("tok")
  fast.save_pretrained(tok_dir)
  target = _save_tiny_llama(tmp_path_factory.mktemp("target"), 2, 0, str(tok_dir))
  draft = _save_tiny_llama(tmp_path_factory.mktemp("draft"), 1, 1, str(tok_dir))
  return target, draft


def _run(script: str, *flags: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, HF_HUB_OFFLINE="1", JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script), *flags],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  return proc


def _png_ok(path: str) -> bool:
  with open(path, "rb") as f:
    return os.path.getsize(path) > 1000 and f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_acceptance_curves_end_to_end(tiny_dirs, tmp_path):
  target, _ = tiny_dirs
  workdir = tmp_path / "curves"
  proc = _run("acceptance_curves.py", "--config=configs/curves.py:tiny", f"--workdir={workdir}",
              f"--config.target={target}", "--config.drafters=ngram:2,early_exit:1",
              "--config.ks=1,2", "--config.temperatures=0,1", "--config.batch_by_category=False",
              "--config.trees=static:2,1", "--noprogress")
  assert "| drafter | tree | T | k |" in proc.stdout
  config = json.loads((workdir / "config.json").read_text())
  assert config["target"] == target and config["ks"] == "1,2"
  records = [json.loads(line) for line in (workdir / "curves.jsonl").read_text().splitlines()]
  # 2 target-alone baselines + 2 drafters x 2 temperatures x (2 values of k + the tree at k=2).
  assert len(records) == 2 + 2 * 2 * 3
  trees = [r for r in records if r["tree"] == "static:2,1"]
  assert len(trees) == 4 and {r["drafter"] for r in trees} == {"ngram:2", "early_exit:1"}
  for r in records:
    for key in ("drafter", "k", "temperature", "acceptance_rate", "per_position_acceptance",
                "tokens_per_pass", "closed_form_tokens_per_pass", "tokens_per_s",
                "target_tokens_per_s", "speedup", "per_category"):
      assert key in r, key
    assert r["tokens_per_s"] > 0 and r["speedup"] > 0 and r["new_tokens"] > 0
    assert set(r["per_category"]) == {"chat", "repeat_rewrite"}  # one batch: no per-category speed
    assert all(c["speedup"] is None and c["new_tokens"] > 0 for c in r["per_category"].values())
    if r["drafter"] == "none":
      assert r["k"] == 0 and r["tokens_per_pass"] == 1.0 and r["speedup"] == 1.0
      assert r["tree"] is None
    else:
      # The tree axis: nodes verified per round, accepted path lengths, per-depth acceptance.
      assert r["nodes_per_round"] == (2 + 2 if r["tree"] == "static:2,1" else r["k"])
      assert r["tree"] in ("chain", "static:2,1") and (r["tree_shape"] is None) == (
          r["tree"] == "chain")
      assert len(r["path_lengths"]) == r["k"] + 1 and sum(r["path_lengths"]) == r["verify_passes"]
      assert 0.0 <= r["mean_accepted_path"] <= r["k"]
      assert r["tokens_per_pass"] <= r["mean_accepted_path"] + 1 + 1e-9
      assert r["per_depth_acceptance"] == r["per_position_acceptance"]
      assert len(r["per_rank_acceptance"]) == r["k"]
      assert all("mean_accepted_path" in c for c in r["per_category"].values())
      assert len(r["per_position_acceptance"]) == r["k"]
      assert 0.0 <= r["acceptance_rate"] <= 1.0
      assert 1.0 <= r["tokens_per_pass"] <= r["k"] + 1
      assert r["closed_form_tokens_per_pass"] == pytest.approx(
          sum(r["acceptance_rate"] ** i for i in range(r["k"] + 1)))
  for name in ("tokens_per_pass_vs_k.png", "per_position_acceptance.png", "speedup_vs_k.png",
               "acceptance_by_category.png", "tokens_per_pass_vs_nodes.png"):
    assert _png_ok(str(workdir / name)), name
  assert os.listdir(workdir / "tb"), "no TensorBoard event file"
  summary = (workdir / "summary.md").read_text()
  assert "| ngram:2 | chain | 0 | 2 | 2 |" in summary
  assert "| ngram:2 | static:2,1 | 0 | 2 | 4 |" in summary
  assert "Acceptance per depth" in summary
  assert "nodes_per_round" in json.loads((workdir / "fields.json").read_text())


@pytest.mark.slow
def test_benchmark_end_to_end(tiny_dirs, tmp_path):
  """Draft = the target itself: alpha must be 1 in specjax AND in transformers' assisted
  generation (whose acceptance is reconstructed from forward-call records)."""
  target, _ = tiny_dirs
  workdir, k = tmp_path / "bench", 2
  proc = _run("benchmark.py", "--config=configs/benchmark.py:tiny", f"--workdir={workdir}",
              f"--config.target={target}", f"--config.drafters=ngram:2,{target},missing-draft",
              f"--config.k={k}", "--config.prompts.categories=chat", "--noprogress",
              "--config.trees=static:2,1", f"--json_out={tmp_path / 'out.json'}")
  result = json.loads((workdir / "results.json").read_text())
  assert json.loads((tmp_path / "out.json").read_text())["rows"] == result["rows"]
  rows = {(r["framework"], r["row"]): r for r in result["rows"]}
  tree_rows = {("specjax", "ngram:2 [static:2,1]"), ("specjax", f"{target} [static:2,1]")}
  assert set(rows) == {("specjax", "target"), ("specjax", "ngram:2"), ("specjax", target),
                       ("transformers", "greedy"), ("transformers", "prompt_lookup"),
                       ("transformers", "assisted")} | tree_rows
  assert any(s["row"] == "missing-draft" for s in result["skipped"])
  for r in rows.values():
    for key in ("tokens_per_s", "speedup", "vs_hf_greedy", "acceptance_rate", "tokens_per_pass",
                "closed_form_tokens_per_pass", "ideal_speedup", "fraction_of_ideal",
                "identical_to_base"):
      assert key in r, key
    assert r["tokens_per_s"] > 0 and r["vs_hf_greedy"] > 0 and r["ideal_speedup"] > 0
    assert r["identical_to_base"], r["row"]  # greedy speculative == greedy alone
  assert rows[("specjax", "target")]["speedup"] == 1.0
  assert rows[("transformers", "greedy")]["vs_hf_greedy"] == 1.0
  for fw, name in (("specjax", target), ("transformers", "assisted"),
                   ("specjax", f"{target} [static:2,1]")):
    assert rows[(fw, name)]["acceptance_rate"] == 1.0, (fw, rows[(fw, name)])
    assert rows[(fw, name)]["tokens_per_pass"] > 2.0
  # The tree axis: a tree row per drafter, chain rows marked "chain", the rest None.
  for key, r in rows.items():
    want = ("static:2,1" if key in tree_rows else
            "chain" if key in {("specjax", "ngram:2"), ("specjax", target)} else None)
    assert r["tree"] == want, key
    nodes = {"static:2,1": 4, "chain": k, None: 0 if key[0] == "specjax" else None}[want]
    assert r["nodes_per_round"] == nodes, key
    if want:
      assert sum(r["path_lengths"]) > 0 and len(r["per_depth_acceptance"]) == k
  # draft = target: every round keeps all k drafts but a row's last, which max_new may cut
  # (path lengths count kept drafts only, as `accepted` does)
  hist = rows[("specjax", f"{target} [static:2,1]")]["path_lengths"]
  n_prompts = len(result["prompts"])
  assert hist[k] > 0 and sum(hist[:k]) <= n_prompts, hist
  assert rows[("specjax", f"{target} [static:2,1]")]["drafter"] == target
  # Both frameworks decode the same ids with the same weights: same greedy output.
  assert rows[("transformers", "greedy")]["same_as_specjax_target"] == 1.0
  costs = result["costs"]["specjax"]
  assert costs["c_step"] > 0 and costs["c_verify"] > 0 and set(costs["c_draft"]) == {"ngram:2", target}
  assert costs["c_verify_tree"]["static:2,1"] > 0 and set(costs["c_draft_tree"]) == {
      name for _, name in tree_rows}
  assert "tok/s" in proc.stdout and "skipped missing-draft" in proc.stdout
  assert any(line.startswith("framework") and " tree " in line for line in proc.stdout.splitlines())


@pytest.mark.slow
def test_speculate_card_end_to_end(tiny_dirs, tmp_path):
  target, draft = tiny_dirs
  out = tmp_path / "card.json"
  proc = _run("speculate.py", f"--config.target={target}", f"--config.draft={draft}",
              "--config.k=3", "--config.max_new_tokens=12", "--config.repeats=1",
              f"--json_out={out}")
  card = json.loads(out.read_text())
  for key in ("new_tokens", "target_passes", "acceptance_rate", "tokens_per_pass",
              "identical_to_target", "speedup"):
    assert key in card, key
  assert card["identical_to_target"] is True and card["speedup"] > 0
  assert card["draft"] == draft and card["k"] == 3 and card["new_tokens"] >= 1
  assert 1.0 <= card["tokens_per_pass"] <= 4.0
  assert "identical to target  True" in proc.stdout
  # The card says what its speedup means, from this run's own timings.
  assert card["round_in_steps"] > 0 and 0 < card["verify_share"] <= 1 and card["warning"] is None
  why = [line for line in proc.stdout.splitlines() if line.startswith("why ")]
  assert len(why) == 1 and ("below 1" if card["speedup"] < 1 else "above 1") in why[0], why
  assert f"kept {card['tokens_per_pass']:.2f} tokens" in why[0]
  # A token tree on the card: its shape, its pass size in the why line, the same output.
  proc = _run("speculate.py", f"--config.target={target}", f"--config.draft={draft}",
              "--config.k=2", "--config.tree=static:2,1", "--config.max_new_tokens=12",
              "--config.repeats=1", f"--json_out={out}")
  tree_card = json.loads(out.read_text())
  assert tree_card["tree"].startswith("static tree of 4 nodes") and tree_card["k"] == 2
  assert tree_card["nodes_per_round"] == 4 and tree_card["identical_to_target"] is True
  assert tree_card["output"] == card["output"] and "verify_share" not in tree_card
  assert any(line.startswith("tree ") and "4 draft nodes per round" in line
             for line in proc.stdout.splitlines()), proc.stdout
  why = [line for line in proc.stdout.splitlines() if line.startswith("why ")]
  assert len(why) == 1 and "a tree of 4 draft nodes, depth 2, and one 5-token verify pass" in why[0]


@pytest.mark.slow
def test_speculate_bad_input_and_unreachable_model_are_clear_errors(tiny_dirs):
  target, _ = tiny_dirs
  env = dict(os.environ, HF_HUB_OFFLINE="1", JAX_PLATFORMS="cpu")

  def fails(*flags):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "speculate.py"), *flags],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    return proc.stderr

  assert "k (tokens drafted per round)" in fails(f"--config.target={target}",
                                                 "--config.draft=ngram:2", "--config.k=0")
  assert "top_p" in fails(f"--config.target={target}", "--config.draft=ngram:2",
                          "--config.top_p=1.5")
  assert "config.k as a number" in fails(f"--config.target={target}", "--config.draft=ngram:2",
                                          "--config.tree=static:2")
  # A draft that cannot be loaded fails loudly (no silent fallback to n-gram lookup).
  err = fails(f"--config.target={target}", "--config.draft=no-such-draft")
  assert "error: no-such-draft: unknown model" in err and "ngram" not in err.lower()
  err = fails(f"--config.target={target}", "--config.draft=ngram:x")
  assert "error: Drafter spec 'ngram:x'" in err and "'early_exit:N'" in err
  # The classic seed card needs gpt2 from the hub: offline with no cache, the loader's error.
  from huggingface_hub import try_to_load_from_cache
  if isinstance(try_to_load_from_cache("gpt2", "config.json"), str):
    return  # gpt2 is cached here: the seed card would run instead of failing
  err = fails("--config.target=gpt2", "--config.draft=distilgpt2", "--config.k=4",
              "--config.chat=False")
  assert "error: gpt2" in err and "hub" in err


@pytest.mark.slow
def test_export_draft_writes_an_lm_draft_asset_as_a_transformers_directory(tiny_dirs, tmp_path):
  """--format=hf: a shipped-style LM draft asset (own float16 tensors, the target's
  embeddings) -> a Hugging Face directory whose logits in transformers are specjax's."""
  import dataclasses

  import jax
  import numpy as np
  import torch
  import transformers
  from specjax.loading import load_model
  from specjax.training import draft as draft_lib, export
  target_dir, _ = tiny_dirs
  target = load_model(target_dir)
  cfg, params = draft_lib.build_draft(target.cfg, target.params, n_layers=1, init="random",
                                      key=jax.random.PRNGKey(1), init_std=0.3)
  # An asset shares the target's embeddings and nothing else: its head is them (tied).
  cfg = dataclasses.replace(cfg, tie_embeddings=True)
  params = {k: v for k, v in params.items() if k not in ("lm_head", "inference")}
  asset = export.save_asset(cfg, params, str(tmp_path / "asset"), target=target_dir)
  out = str(tmp_path / "hf")
  proc = _run("export_draft.py", f"--draft={asset}", "--format=hf", f"--out={out}")
  assert f"hf: {out} (LM draft asset" in proc.stdout
  hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
  tokens = np.array([[1, 40, 41, 42, 43, 44]])
  with torch.no_grad():
    got = hf(torch.tensor(tokens)).logits.numpy()
  want = np.asarray(load_model(asset, target=target).logits(tokens))
  np.testing.assert_allclose(got, want, atol=1e-4)
  assert transformers.AutoTokenizer.from_pretrained(out).vocab_size == target.tokenizer.vocab_size


@pytest.mark.slow
def test_export_draft_says_why_a_feature_draft_has_no_speculators_form(tmp_path):
  """The feature draft of configs/distill.py (smollm2): one line naming what speculators'
  eagle type lacks, before any checkpoint or model is read."""
  env = dict(os.environ, HF_HUB_OFFLINE="1", JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "export_draft.py"),
                         "--config=configs/distill.py", f"--workdir={tmp_path / 'none'}",
                         "--format=speculators", f"--out={tmp_path / 'out'}"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
  for fact in ("feeds back to unit RMS", "before the final norm", "head_vocab", "q = 0",
               "docs/extending.md"):
    assert fact in lines[0], fact
  assert not (tmp_path / "out").exists() and not (tmp_path / "none").exists()
