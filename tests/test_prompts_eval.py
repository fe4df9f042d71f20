"""The evaluation set and the prompts-file reader (Spec-Bench question.jsonl).

The evaluation set `specjax/data/prompts_eval.jsonl` must cover its 12 categories and
share no normalised word 8-gram with any training prompt (the templated splits, and a
self-generated cache when SPECJAX_SELFGEN_DIR names one); the check itself is shown to
catch a planted near duplicate. Spec-Bench files are read from a tiny question.jsonl
written here (the project ships no copy of Spec-Bench).
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from specjax import prompts as prompts_lib
from specjax.training import selfgen

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "specjax", "data")


def _training_texts() -> list[str]:
  texts = []
  for path in sorted(glob.glob(os.path.join(DATA, "prompts_*.jsonl"))):
    if not path.endswith("prompts_eval.jsonl"):
      texts += selfgen.read_jsonl_texts(path)
  cache = os.environ.get("SPECJAX_SELFGEN_DIR")
  if cache and os.path.exists(os.path.join(cache, "manifest.json")):
    for s in selfgen.shards(cache):
      texts += selfgen.read_shard(cache, s)["prompt_text"].tolist()
  return texts


def _shared(eval_texts, train_texts, n=8) -> list[str]:
  """Evaluation prompts sharing a normalised n-gram (or being equal) with a training prompt."""
  grams = set()
  for t in train_texts:
    grams |= selfgen.ngrams(t, n)
  return [t for t in eval_texts if selfgen.ngrams(t, n) & grams]


def test_eval_set_covers_every_category():
  rows = prompts_lib.select("eval", 0)
  assert len(rows) >= 120
  counts = {c: len(i) for c, i in prompts_lib.by_category(rows).items()}
  assert set(counts) == set(prompts_lib.EVAL_CATEGORIES) == set(selfgen.CATEGORIES)
  assert min(counts.values()) >= 10, counts
  assert len({r["id"] for r in rows}) == len(rows)
  with open(os.path.join(DATA, "prompts_eval.jsonl"), encoding="utf-8") as f:
    assert all(json.loads(line)["split"] == "eval" for line in f)
  for r in rows:  # summaries and passage questions carry their source text
    if r["category"] in ("summarisation", "retrieval_qa"):
      assert len(r["text"].split()) >= 50, r["id"]


def test_eval_set_disjoint_from_training_prompts():
  eval_texts = [r["text"] for r in prompts_lib.select("eval", 0)]
  train = _training_texts()
  assert len(train) >= 700
  assert _shared(eval_texts, train) == []
  assert len({" ".join(selfgen.normalise(t)) for t in eval_texts}) == len(eval_texts)
  # Negative control: a training prompt with its case, punctuation and one word changed
  # is caught by the same check.
  words = next(t for t in train if len(t.split()) >= 20).split()
  words[10] = "banana"
  planted = " ".join(words).upper().replace(".", "!")
  assert _shared(eval_texts + [planted], train) == [planted]


def _write(path, rows):
  with open(path, "w", encoding="utf-8") as f:
    for r in rows:
      f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
  return str(path)


SPEC_BENCH = [
    {"question_id": 81, "category": "writing", "turns": ["Write a haiku about rain.", "Now a limerick."]},
    {"question_id": 82, "category": "writing", "turns": ["Draft a short toast."]},
    {"question_id": 83, "category": "math_reasoning", "turns": ["What is 17 * 23?"]},
    {"question_id": 84, "category": "translation", "turns": ["Translate 'good night' into French."]},
]


def test_reads_spec_bench_question_jsonl(tmp_path):
  path = _write(tmp_path / "question.jsonl", SPEC_BENCH)
  rows = prompts_lib.select(path, 0)
  assert [r["id"] for r in rows] == ["81", "82", "83", "84"]
  assert rows[0]["text"] == "Write a haiku about rain."  # the first turn
  assert [r["category"] for r in prompts_lib.select(path, 1)] == ["writing", "math_reasoning",
                                                                  "translation"]
  assert len(prompts_lib.select(path, 0, categories=["writing"])) == 2
  both = prompts_lib.select(f"eval+{path}", 1)
  assert len(both) == 12 + 3
  # The project's own format reads through the same function.
  own = _write(tmp_path / "own.jsonl", [{"id": "a", "category": "x", "text": "Hi."}])
  assert prompts_lib.read_prompts_file(own) == [{"id": "a", "category": "x", "text": "Hi."}]


def test_spread_by_category_keeps_every_category():
  rows = prompts_lib.select("eval", 0)
  picked = prompts_lib.spread_by_category(rows, 24)
  assert len(picked) == 24
  assert {len(i) for i in prompts_lib.by_category(picked).values()} == {2}


@pytest.mark.parametrize("rows,needle", [
    (["{not json"], "question.jsonl:1: not a JSON object"),
    ([{"prompt": "hi", "category": "x"}], "question.jsonl:1: expected Spec-Bench"),
    ([SPEC_BENCH[0], {"question_id": 2, "category": "", "turns": ["hi"]}],
     "question.jsonl:2: empty category"),
    ([{"question_id": 2, "category": "x", "turns": []}], "'turns' must be a non-empty list"),
    ([], "holds no prompts"),
])
def test_bad_prompts_files_give_one_clear_line(tmp_path, rows, needle):
  path = _write(tmp_path / "question.jsonl", rows)
  with pytest.raises(ValueError) as e:
    prompts_lib.select(path, 0)
  assert needle in str(e.value) and "\n" not in str(e.value)


def test_bad_sources_and_empty_categories(tmp_path):
  path = _write(tmp_path / "question.jsonl", SPEC_BENCH)
  with pytest.raises(ValueError, match="Category 'coding' has no prompts in .*writing"):
    prompts_lib.select(path, 0, categories=["coding"])
  with pytest.raises(ValueError, match="Unknown prompt source 'evl'"):
    prompts_lib.select("evl", 0)
  with pytest.raises(ValueError, match="not found"):
    prompts_lib.select(str(tmp_path / "missing.jsonl"), 0)


def _script(*args):
  env = dict(os.environ, JAX_PLATFORMS="cpu", HF_HUB_OFFLINE="1")
  return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=600)


@pytest.mark.parametrize("script,flag", [
    ("scripts/benchmark.py", "--config.prompts.source="),
    ("scripts/acceptance_curves.py", "--config.prompts.source="),
    ("scripts/eval_draft.py", "--prompts="),
])
def test_scripts_reject_a_bad_prompts_file_in_one_line(tmp_path, script, flag):
  bad = _write(tmp_path / "question.jsonl", [{"question_id": 1, "category": "", "turns": ["x"]}])
  extra = {"scripts/benchmark.py": ["--config=configs/benchmark.py:tiny"],
           "scripts/acceptance_curves.py": ["--config=configs/curves.py:tiny",
                                            f"--workdir={tmp_path / 'w'}"],
           "scripts/eval_draft.py": ["--config=configs/distill.py:tiny", "--asset=unused"]}[script]
  proc = _script(script, *extra, flag + bad)
  assert proc.returncode != 0
  lines = proc.stderr.strip().splitlines()
  assert "Traceback" not in proc.stderr
  assert lines[-1].startswith("error: ") and "question.jsonl:1: empty category" in lines[-1], proc.stderr


@pytest.mark.slow
def test_curves_read_spec_bench_per_category(tmp_path, tiny_llama_dir):
  path = _write(tmp_path / "question.jsonl", SPEC_BENCH)
  work = tmp_path / "curves"
  proc = _script("scripts/acceptance_curves.py", "--config=configs/curves.py:tiny",
                 f"--config.target={tiny_llama_dir}", f"--workdir={work}", f"--config.prompts.source={path}",
                 "--config.prompts.per_category=0", "--config.prompts.categories=",
                 "--config.drafters=ngram:2", "--config.ks=2", "--config.temperatures=0", "--noprogress")
  assert proc.returncode == 0, proc.stderr[-3000:]
  records = [json.loads(line) for line in (work / "curves.jsonl").read_text().splitlines()]
  assert all("tree" not in r for r in records)  # no config.trees: no tree axis in the outputs
  spec = [r for r in records if r["drafter"] != "none" and r["k"] == 2]
  assert spec and set(spec[0]["per_category"]) == {"writing", "math_reasoning", "translation"}
  assert "| ngram:2 | 0 | 2 | translation |" in (work / "summary.md").read_text()
