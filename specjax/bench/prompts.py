"""Prompt sets for the curves and the benchmark.

Two sources, each a list of rows {"id", "category", "text"}:

* "heldout": the distillation prompt set's held-out split (`specjax/data/`), so drafts
  are never measured on prompts they were trained on; falls back to "builtin" when the
  data files are absent.
* "repeat": built-in prompts whose answer repeats much of the input (categories
  repeat_rewrite, repeat_extract, repeat_code_edit): the case where prompt lookup
  (n-gram drafting) should shine.
* "builtin": a small fixed list, one prompt per category, for when nothing else is there.

`select(spec, per_category, categories)` combines them, e.g. "repeat+heldout".
"""
from __future__ import annotations

import json
import os
from typing import Iterable, Optional

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")

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


def heldout() -> list[dict]:
  """The distillation set's held-out rows (or BUILTIN when the data files are missing)."""
  path = os.path.join(DATA_DIR, "prompts_heldout.jsonl")
  if not os.path.isfile(path):
    return list(BUILTIN)
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


SOURCES = {"heldout": heldout, "repeat": lambda: list(REPEAT), "builtin": lambda: list(BUILTIN)}


def select(spec: str = "heldout", per_category: int = 1,
           categories: Optional[Iterable[str]] = None,
           ids: Optional[Iterable[str]] = None) -> list[dict]:
  """Rows from "+"-joined sources, the first `per_category` of each category (0: all).

  categories: keep only these (None or empty: all), in the sources' order.
  ids: keep only these prompt ids (None or empty: all); per_category still applies.
  """
  keep = {c for c in (categories or []) if c}
  want = {i for i in (ids or []) if i}
  rows, counts = [], {}
  for name in [s for s in spec.split("+") if s]:
    if name not in SOURCES:
      raise ValueError(f"Unknown prompt source {name!r}; use {'+'.join(SOURCES)} (joined by '+').")
    for r in SOURCES[name]():
      cat = r["category"]
      if (keep and cat not in keep) or (want and r["id"] not in want):
        continue
      if per_category and counts.get((name, cat), 0) >= per_category:
        continue
      counts[(name, cat)] = counts.get((name, cat), 0) + 1
      rows.append({"id": r["id"], "category": cat, "text": r["text"]})
  if not rows:
    raise ValueError(f"No prompts selected from {spec!r} with categories {sorted(keep)}.")
  return rows


def parse_list(value) -> list[str]:
  """A comma-separated config string (or a sequence) -> list of non-empty stripped items."""
  if isinstance(value, str):
    return [v.strip() for v in value.split(",") if v.strip()]
  return [str(v) for v in value]
