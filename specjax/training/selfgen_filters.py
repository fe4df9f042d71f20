"""Self-generated data, stage 2: the filters a generated prompt must pass.

Length, language (ASCII share, common English words), degenerate repetition, and near
duplicates: normalised word n-grams against every kept prompt and the evaluation set
(`EVAL_FILE`, which so stays unseen by training).
"""
from __future__ import annotations

import json
import os
import re
from typing import Iterable, Optional

from specjax.training.data import DATA_DIR

EVAL_FILE = os.path.join(DATA_DIR, "prompts_eval.jsonl")
_ENGLISH = set("the a an of to and in is are was for on with that this what how why who which "
               "can you your my i me it be as at by from or do does if please about".split())


def normalise(text: str) -> list[str]:
  """Lower-case words of letters and digits: what near-duplicate checks compare."""
  return re.findall(r"[a-z0-9]+", text.lower())


def ngrams(text: str, n: int = 8) -> set:
  """Hashed word n-grams of the normalised text (the whole text when shorter than n)."""
  w = normalise(text)
  if len(w) < n:
    return {hash(" ".join(w))} if w else set()
  return {hash(" ".join(w[i:i + n])) for i in range(len(w) - n + 1)}


def read_jsonl_texts(path: str) -> list[str]:
  with open(path, encoding="utf-8") as f:
    return [json.loads(line)["text"] for line in f if line.strip()]


# ----------------------------------------------------------------------------- filters


def reject_reason(text: str, f) -> Optional[str]:
  """Why a generated prompt fails the length / language / repetition filters (None: passes).
  f: the config's `filters` (min_words, max_words, min_ascii, min_english, min_distinct_3grams);
  `require_finished` (drop turns cut off at prompt_max_new) is checked by the caller."""
  words = text.split()
  if len(words) < f.min_words:
    return "short"
  if len(words) > f.max_words:
    return "long"
  if f.min_ascii and ("\ufffd" in text or sum(c.isascii() for c in text) < f.min_ascii * len(text)):
    return "language"
  norm = normalise(text)
  if not norm or sum(w in _ENGLISH for w in norm) < f.min_english * len(norm):
    return "language"
  tri = [tuple(norm[i:i + 3]) for i in range(len(norm) - 2)]
  if tri and len(set(tri)) < f.min_distinct_3grams * len(tri):
    return "repetitive"
  return None



class _Seen:
  """n-grams of every kept prompt, and of the evaluation set, for the near-duplicate filter."""

  def __init__(self, f, eval_texts: Iterable[str]):
    self.f, self.grams, self.eval = f, set(), set()
    for t in eval_texts:
      self.eval |= ngrams(t, f.ngram)

  def reason(self, text: str) -> Optional[str]:
    g = ngrams(text, self.f.ngram)
    if g & self.eval:
      return "eval_overlap"
    if not g or len(g & self.grams) > self.f.max_overlap * len(g):
      return "duplicate"
    return None

  def add(self, text: str) -> None:
    self.grams |= ngrams(text, self.f.ngram)

