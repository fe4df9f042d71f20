"""Self-generated training data (specjax/training/selfgen.py) on a tiny random target.

The target is conftest's tiny Llama with a ChatML template (its user turns, random
text, are kept when cut off at prompt_max_new: configs/generate_data.py:tiny). Checked: the filters
and the near-duplicate / evaluation-set guard on crafted strings; generated prompts
are distinct, pass the filters and are what the responses were sampled for; greedy
prompts collapse to one per (category, opener) and the duplicates are dropped; a run
stopped after one shard and resumed writes exactly what an uninterrupted run writes;
a cache written by another config is refused; the selection split is disjoint.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from configs import generate_data
from specjax.training import selfgen

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def target(tiny_llama_dir):
  from specjax.loading import load_model
  m = load_model(tiny_llama_dir)
  assert m.tokenizer.convert_tokens_to_ids("<|im_end|>") in m.eos_ids
  return m


def _config(tmp_path, name="data", **over):
  c = generate_data.get_config("tiny")
  c.data_dir = str(tmp_path / name)
  for k, v in over.items():
    node, *path = k.split(".")
    if path:
      c[node][path[0]] = v
    else:
      c[k] = v
  return c


def _texts(data_dir):
  return [t for s in selfgen.shards(data_dir) for t in selfgen.read_shard(data_dir, s)["prompt_text"]]


def test_user_prefix_stops_at_the_user_turn(target):
  tok = target.tokenizer
  assert selfgen.user_prefix(tok, None) == "<|im_start|>user\n"
  assert selfgen.user_prefix(tok, "Be brief.") == (
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")


def test_filters_on_crafted_prompts():
  f = generate_data.get_config("tiny").filters  # relaxed: only length in words
  real = generate_data.get_config().filters
  good = "How do I make a simple tomato soup for four people?"
  assert selfgen.reject_reason(good, real) is None
  assert selfgen.reject_reason("Hi there", real) == "short"
  german = "Wie kann ich eine einfache Tomatensuppe kochen heute Abend?"
  assert selfgen.reject_reason(german, real) == "language"
  assert selfgen.reject_reason("Как приготовить простой томатный суп?", real) == "language"
  assert selfgen.reject_reason("the cat and the dog " * 12, real) == "repetitive"
  assert selfgen.reject_reason("the cat and the dog " * 12, f) is None
  seen = selfgen._Seen(real, selfgen.read_jsonl_texts(selfgen.EVAL_FILE))
  eval_text = selfgen.read_jsonl_texts(selfgen.EVAL_FILE)[40]
  assert seen.reason(eval_text) == "eval_overlap"
  long = ("Please explain how a steam engine converts the heat of burning coal into motion, "
          "and why it was so important for the railways.")
  assert seen.reason(long) is None
  seen.add(long)
  assert seen.reason(long.upper().replace(",", "")) == "duplicate"  # normalised text
  assert seen.reason(long.replace("railways", "factories")) == "duplicate"  # near duplicate
  assert seen.reason("Please explain how a jet engine works, in simple words for a child.") is None


@pytest.fixture(scope="module")
def cache(tmp_path_factory, target):
  """A 40-pair cache of the tiny config, and its stats."""
  c = _config(tmp_path_factory.mktemp("cache"), num_pairs=40)
  return c, selfgen.generate(c, target=target, log=lambda _: None)


def test_generated_prompts_are_distinct_and_filtered(cache, target):
  c, stats = cache
  pairs = selfgen.load_pairs(c.data_dir)
  assert stats["pairs"] == len(pairs) >= 40
  texts = _texts(c.data_dir)
  assert len(set(texts)) == len(texts) == len(pairs)
  seen = selfgen._Seen(c.filters, selfgen.read_jsonl_texts(selfgen.EVAL_FILE))
  for text, p in zip(texts, pairs):
    assert selfgen.reject_reason(text, c.filters) is None and seen.reason(text) is None
    seen.add(text)
    assert p["prompt_ids"] == target.encode(text, chat=True)  # what the response was sampled for
    assert 1 <= len(p["response_ids"]) <= c.response_max_new
    assert p["category"] in selfgen.CATEGORIES and p["source"] == "generated"
    opener_ok = any(text.startswith(o.strip()) for o in selfgen.STEER[p["category"]][1])
    assert opener_ok, (p["category"], text)
  assert set(p["category"] for p in pairs) == set(selfgen.CATEGORIES)


def test_greedy_prompts_collapse_to_distinct_ones(tmp_path, target):
  c = _config(tmp_path, num_pairs=1000, max_shards=2, prompt_temperature=0.0)
  stats = selfgen.generate(c, target=target, log=lambda _: None)
  n_openers = sum(len(o) for _, o in selfgen.STEER.values())
  # Greedy: one prompt per (system line, opener); every repeat is dropped as a duplicate.
  assert stats["generated_candidates"] == 2 * c.shard_size
  assert stats["distinct_prompts"] == stats["pairs"] <= n_openers
  with open(os.path.join(c.data_dir, "log.jsonl")) as f:
    rejected = [json.loads(line)["rejected"] for line in f]
  assert sum(r.get("duplicate", 0) for r in rejected) > 0


def test_interrupted_run_resumes_without_loss_or_duplicates(tmp_path, target):
  whole = _config(tmp_path, "whole", num_pairs=40)
  selfgen.generate(whole, target=target, log=lambda _: None)
  part = _config(tmp_path, "part", num_pairs=40)
  selfgen.generate(part, target=target, log=lambda _: None, max_shards=1)  # "killed" after shard 0
  assert selfgen.shards(part.data_dir) == [0]
  open(selfgen.shard_path(part.data_dir, 1) + ".tmp999", "wb").write(b"half a shard")  # died mid-write
  selfgen.generate(part, target=target, log=lambda _: None)
  assert selfgen.shards(part.data_dir) == selfgen.shards(whole.data_dir)
  assert not [n for n in os.listdir(part.data_dir) if ".tmp" in n]
  a, b = selfgen.load_pairs(whole.data_dir), selfgen.load_pairs(part.data_dir)
  assert a == b and len(a) >= 40
  keys = [(tuple(p["prompt_ids"]), tuple(p["response_ids"])) for p in b]
  assert len(set(keys)) == len(keys)
  selfgen.generate(part, target=target, log=lambda _: None)  # complete: nothing more is written
  assert selfgen.load_pairs(part.data_dir) == b


def test_cache_of_another_config_is_refused(tmp_path, target):
  c = _config(tmp_path, num_pairs=10, max_shards=1)
  selfgen.generate(c, target=target, log=lambda _: None)
  other = _config(tmp_path, num_pairs=10, prompt_temperature=0.7)
  with pytest.raises(ValueError, match=r"another config .*fields differ: prompt_temperature\).*"
                                       r"--config.data_dir"):
    selfgen.generate(other, target=target, log=lambda _: None)
  # Batch and shard sizes change which samples are drawn, not what the cache is: they may
  # change between calls (a CPU cache continued on an accelerator), still without duplicates.
  assert selfgen.config_hash(_config(tmp_path, batch_size=4, shard_size=12)) == selfgen.config_hash(c)
  selfgen.generate(_config(tmp_path, num_pairs=40, shard_size=16), target=target, log=lambda _: None)
  texts = _texts(c.data_dir)
  assert len(texts) >= 40 and len(set(texts)) == len(texts)
  with pytest.raises(ValueError, match="must not name 'eval'"):
    selfgen.generate(_config(tmp_path, "e", prompt_sets="eval"), target=target)


def test_fixed_prompt_sets_come_first(tmp_path, target, monkeypatch):
  from specjax.training import data as data_lib
  rows = [{"id": f"c{i}", "category": ["chat", "code"][i % 2], "split": "train",
           "text": f"Question number {i}?"} for i in range(5)]
  monkeypatch.setattr(data_lib, "load_prompts", lambda name: rows if name == "train" else 1 / 0)
  c = _config(tmp_path, num_pairs=20, prompt_sets="train")
  selfgen.generate(c, target=target, log=lambda _: None)
  pairs = selfgen.load_pairs(c.data_dir)
  fixed = [p for p in pairs if p["source"] == "prompt_set"]
  assert [p["category"] for p in fixed] == [r["category"] for r in rows]
  assert [p["prompt_ids"] for p in fixed] == [target.encode(r["text"], chat=True) for r in rows]
  assert pairs[:5] == fixed and len(pairs) >= 20
  assert selfgen.pair_stats(c.data_dir)["per_category"]["chat"] == 3
  with pytest.raises(ValueError, match="must not name 'heldout'"):
    selfgen.generate(_config(tmp_path, "h", prompt_sets="train,heldout"), target=target)


def test_selection_split_is_disjoint(cache, tmp_path, monkeypatch):
  c, _ = cache
  monkeypatch.setattr(selfgen, "SELECT_EVERY", 4)  # 1 in 4 at this size, 1 in 50 by default
  ids = lambda split: [p["id"] for p in selfgen.load_pairs(c.data_dir, split)]
  train, select, every = ids("train"), ids("select"), ids("all")
  assert train and select and not set(train) & set(select)
  assert sorted(train + select) == sorted(every)
  assert len(select) < len(train)
  with pytest.raises(ValueError, match="no manifest.json"):
    selfgen.load_pairs(str(tmp_path / "nothing"))


@pytest.mark.slow
def test_generate_data_script(tmp_path, tiny_llama_dir):
  out = tmp_path / "stats.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu", HF_HUB_OFFLINE="1")
  run = lambda *extra: subprocess.run(
      [sys.executable, "scripts/generate_data.py", "--config=configs/generate_data.py:tiny",
       f"--config.target={tiny_llama_dir}", f"--config.data_dir={tmp_path / 'd'}",
       "--config.num_pairs=8",
       f"--stats_out={out}", *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  proc = run()
  assert proc.returncode == 0, proc.stderr[-3000:]
  stats = json.loads(out.read_text())
  assert stats["shards"] >= 1 and stats["pairs"] >= 0 and "pairs_per_minute" in stats
  proc = run("--config.prompt_top_p=0.5")
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1].startswith("error: ") and "prompt_top_p" in proc.stderr
