"""Prompt sets for the curves, the benchmark and the draft evaluation.

Sources, each a list of rows {"id", "category", "text"}:

* "eval": the evaluation set `specjax/data/prompts_eval.jsonl`, 134 prompts written for
  this project (10+ in each of 12 categories, `EVAL_CATEGORIES`), disjoint from every
  training prompt. It is for tables only: never train on it or select checkpoints with
  it (checkpoint selection uses a split of the training data: the templated "heldout"
  split, or `selfgen.load_pairs(dir, split="select")` for generated data).
* "heldout": the distillation prompt set's held-out split (`specjax/data/`), made from
  the same templates as the training splits; falls back to "builtin" when the data
  files are absent.
* "repeat": built-in prompts whose answer repeats much of the input (categories
  repeat_rewrite, repeat_extract, repeat_code_edit): the case where prompt lookup
  (n-gram drafting) should shine.
* "builtin": a small fixed list, one prompt per category, for when nothing else is there.

* a path to a prompts file (`read_prompts_file`): Spec-Bench's `question.jsonl` (rows
  {"question_id", "category", "turns": [text, ...]}; the first turn is the prompt) or the
  project's own format (rows {"id", "category", "text"}).

`select(spec, per_category, categories)` combines them, e.g. "repeat+heldout" or
"eval+/path/to/question.jsonl". Bad files raise a ValueError of one line naming the
file, the line and what to do.
"""
from __future__ import annotations

import json
import os
from typing import Iterable, Optional

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

REPEAT = [
    {"id": "repeat-rewrite-0", "category": "repeat_rewrite",
     "text": "Rewrite the following paragraph in plain, simple English, keeping every fact: The "
             "municipal council convened on Tuesday evening to deliberate on the proposed expansion "
             "of the public library. After extensive discussion, the council voted seven to two in "
             "favour of allocating additional funds for the construction of a new reading room, a "
             "children's section and an expanded digital archive."},
    {"id": "repeat-extract-0", "category": "repeat_extract",
     "text": "Copy every sentence of this text that mentions a date, word for word, one per line:\n\n"
             "The museum opened on 3 March 1998 in the old railway station. Its first director was "
             "Anna Keller. On 12 June 2004 a new wing for modern art was added. The building was "
             "renovated between 2015 and 2017. Entry has been free on Sundays since 1 January 2019."},
    {"id": "repeat-code-0", "category": "repeat_code_edit",
     "text": "Rename the variable `total` to `running_sum` in this Python function and return the "
             "whole function:\n\n```python\ndef sum_positive(values):\n    total = 0\n    for value "
             "in values:\n        if value > 0:\n            total = total + value\n    return total\n```"},
    {"id": "repeat-code-1", "category": "repeat_code_edit",
     "text": "Add type hints to this Python function and return the whole function unchanged "
             "otherwise:\n\n```python\ndef count_words(text, min_length):\n    counts = {}\n    for "
             "word in text.split():\n        if len(word) >= min_length:\n            counts[word] = "
             "counts.get(word, 0) + 1\n    return counts\n```"},
]

BUILTIN = [
    {"id": "builtin-chat", "category": "chat", "text": "How can I make friends in a new city?"},
    {"id": "builtin-code", "category": "code",
     "text": "Write a Python function that checks whether a number is prime."},
    {"id": "builtin-math", "category": "math", "text": "Solve for x: 12x + 20 = 596."},
    {"id": "builtin-rewrite", "category": "repeat_rewrite",
     "text": "Rewrite this sentence in a more formal tone: Please remember to submit your reports "
             "before the end of the week."},
    {"id": "builtin-summarise", "category": "summarise",
     "text": "Summarise in one sentence: Electric cars use batteries instead of petrol engines. They "
             "produce no exhaust, are quiet and cheap to run, but they can take a long time to "
             "charge."},
    {"id": "builtin-extraction", "category": "extraction",
     "text": "Extract all names, dates and places from this text:\n\nFlight BA117 departs London "
             "Heathrow at 11:40 and arrives in New York JFK at 14:25 local time."},
]


EVAL_SET = "eval"  # the evaluation set's name: tables only, never training or selection
EVAL_CATEGORIES = ("translation", "summarisation", "open_qa", "math_reasoning", "retrieval_qa",
                   "writing", "coding", "extraction", "reasoning", "roleplay", "stem", "humanities")
_FORMATS = ("Spec-Bench question.jsonl rows {question_id, category, turns: [text, ...]} or "
            "project rows {id, category, text}")


def read_prompts_file(path: str) -> list[dict]:
  """Rows {"id", "category", "text"} of a Spec-Bench question.jsonl or a project prompts file."""
  if not os.path.isfile(path):
    raise ValueError(f"Prompts file {path!r} not found: pass a Spec-Bench question.jsonl or a "
                     "project prompts .jsonl file.")
  rows = []
  with open(path, encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        r = json.loads(line)
      except json.JSONDecodeError:
        r = None
      where = f"{path}:{n}"
      if not isinstance(r, dict):
        raise ValueError(f"{where}: not a JSON object; a prompts file holds one JSON object per "
                         f"line: {_FORMATS}.")
      if "turns" in r and "question_id" in r:
        turns = r["turns"]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
          raise ValueError(f"{where}: 'turns' must be a non-empty list of strings.")
        rid, text = str(r["question_id"]), turns[0]
      elif "text" in r and "id" in r:
        rid, text = str(r["id"]), r["text"]
      else:
        raise ValueError(f"{where}: expected {_FORMATS}; this row has keys {sorted(r)}.")
      cat = r.get("category")
      if not isinstance(cat, str) or not cat.strip():
        raise ValueError(f"{where}: empty category; every row needs a non-empty 'category'.")
      if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}: empty prompt text.")
      rows.append({"id": rid, "category": cat.strip(), "text": text})
  if not rows:
    raise ValueError(f"Prompts file {path!r} holds no prompts: expected {_FORMATS}.")
  return rows


def evaluation() -> list[dict]:
  """The evaluation set (prompts_eval.jsonl): tables only."""
  return read_prompts_file(os.path.join(DATA_DIR, "prompts_eval.jsonl"))


def heldout() -> list[dict]:
  """The distillation set's held-out rows (or BUILTIN when the data files are missing)."""
  path = os.path.join(DATA_DIR, "prompts_heldout.jsonl")
  return read_prompts_file(path) if os.path.isfile(path) else list(BUILTIN)


SOURCES = {"eval": evaluation, "heldout": heldout, "repeat": lambda: list(REPEAT),
           "builtin": lambda: list(BUILTIN)}


def select(spec: str = "heldout", per_category: int = 1,
           categories: Optional[Iterable[str]] = None,
           ids: Optional[Iterable[str]] = None) -> list[dict]:
  """Rows from "+"-joined sources (names or prompts-file paths), the first `per_category` of
  each category (0: all).

  categories: keep only these (None or empty: all), in the sources' order; one that no
  source holds is an error.
  ids: keep only these prompt ids (None or empty: all); per_category still applies.
  """
  keep = {c for c in (categories or []) if c}
  want = {i for i in (ids or []) if i}
  rows, counts = [], {}
  seen_cats = set()
  for name in [s for s in spec.split("+") if s]:
    if name in SOURCES:
      source = SOURCES[name]()
    elif os.sep in name or name.endswith((".jsonl", ".json")) or os.path.isfile(name):
      source = read_prompts_file(name)
    else:
      raise ValueError(f"Unknown prompt source {name!r}: use {', '.join(SOURCES)} or a path to a "
                       "prompts .jsonl file (Spec-Bench question.jsonl works), joined by '+'.")
    for r in source:
      seen_cats.add(r["category"])
      cat = r["category"]
      if (keep and cat not in keep) or (want and r["id"] not in want):
        continue
      if per_category and counts.get((name, cat), 0) >= per_category:
        continue
      counts[(name, cat)] = counts.get((name, cat), 0) + 1
      rows.append({"id": r["id"], "category": cat, "text": r["text"]})
  missing = sorted(keep - seen_cats)
  if missing:
    raise ValueError(f"Category {missing[0]!r} has no prompts in {spec!r}; its categories are "
                     f"{', '.join(sorted(seen_cats))}.")
  if not rows:
    raise ValueError(f"No prompts selected from {spec!r} with categories {sorted(keep)} "
                     f"and ids {sorted(want)}.")
  return rows


def check_config(p) -> list[dict]:
  """The rows a scripts' `config.prompts` (source, per_category, categories, ids) selects;
  raises the one-line ValueError of `select` for a bad source, file or category."""
  return select(p.source, p.per_category, parse_list(p.categories), parse_list(p.get("ids", "")))


def parse_list(value) -> list[str]:
  """A comma-separated config string (or a sequence) -> list of non-empty stripped items."""
  if isinstance(value, str):
    return [v.strip() for v in value.split(",") if v.strip()]
  return [str(v) for v in value]


def by_category(rows: list[dict]) -> dict:
  """{category: [row indices]} in the rows' order."""
  out: dict = {}
  for i, r in enumerate(rows):
    out.setdefault(r["category"], []).append(i)
  return out


def spread_by_category(rows: list[dict], n: int) -> list[dict]:
  """About n rows (all when n <= 0), the same share from every category in turn, so a
  small table still covers every category."""
  if n <= 0 or n >= len(rows):
    return list(rows)
  groups = list(by_category(rows).values())
  picked, i = [], 0
  while len(picked) < n:
    for g in groups:
      if i < len(g) and len(picked) < n:
        picked.append(g[i])
    i += 1
  return [rows[j] for j in sorted(picked)]
