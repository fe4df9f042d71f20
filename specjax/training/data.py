"""Prompt sets and the batch order: the trainer's inputs that are plain numpy.

Axes: N sequences in a pool, B batch, L sequence length, K sparse teacher entries.

A *pool* is a dict of numpy arrays built once per source (target or draft sampler;
`specjax.training.sampler`), saved in the workdir (`specjax.training.store`):
    tokens [N, L] int32   prompt + sampled continuation, right-padded with 0
    mask   [N, L] float32 1 where the next token is a sampled continuation token
    teacher_ids [N, L, K] int32, teacher_logp [N, L, K] float16   (optional: top-K
           teacher at every masked position; absent when the teacher runs online)
    features [N, L, F] float16   (feature drafts: the target's features at every
           position, `specjax.training.teacher.add_features`; F = D, or L_f x D for
           several target layers)

Batch order is a pure function of (seed, step): `batch_indices` draws the step's
rows from a per-epoch permutation seeded by (seed, stream, epoch), so an interrupted
and resumed run sees exactly the batches an uninterrupted run sees.
"""
from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import numpy as np

from specjax.prompts import DATA_DIR  # the one place the prompt files live
# Categories of the train / held-out prompt sets (not those of prompts_eval.jsonl, which are
# `specjax.training.selfgen_prompts.CATEGORIES`).
CATEGORIES = ("chat", "code", "math", "rewrite", "summarise", "extraction", "creative")


def load_prompts(split: str = "train", path: Optional[str] = None) -> list[dict]:
  """Rows {"id", "category", "split", "text"} of the project's prompt set ("train" or "heldout")."""
  path = path or os.path.join(DATA_DIR, f"prompts_{split}.jsonl")
  with open(path, encoding="utf-8") as f:
    rows = [json.loads(line) for line in f if line.strip()]
  bad = [r["id"] for r in rows if r.get("split") != split]
  if bad:
    raise ValueError(f"{path}: rows {bad[:5]} are not in split {split!r}.")
  return rows


def prompt_sets(prompts) -> dict:
  """{name: prompts}: a dict of named prompt sets as is, a plain list as the set "train"."""
  return dict(prompts) if isinstance(prompts, dict) else {"train": list(prompts)}


def encode_prompts(model, rows: Sequence[dict], chat: bool = True, max_len: int = 0) -> list[list[int]]:
  """Token ids of each prompt through `model.encode`, keeping the last max_len (0: all)."""
  out = []
  for r in rows:
    ids = list(model.encode(r["text"], chat=chat))
    out.append(ids[-max_len:] if max_len else ids)
  return out


def spread(items: Sequence, n: int) -> list:
  """n items evenly spaced over the sequence (all of them when n <= 0 or n >= len):
  the held-out file is ordered by category, so this keeps every category represented."""
  items = list(items)
  if n <= 0 or n >= len(items):
    return items
  return [items[i] for i in np.linspace(0, len(items) - 1, n).round().astype(int)]


def batch_indices(seed: int, step: int, n: int, batch_size: int, stream: int = 0) -> np.ndarray:
  """Rows of a pool of n used at `step`: a pure function of (seed, stream, step).

  Global sample i = step * batch_size + j walks epoch i // n of a permutation seeded by
  (seed, stream, epoch), so every row is seen once per epoch.
  """
  if n <= 0:
    raise ValueError("Empty data pool.")
  out = np.empty((batch_size,), np.int64)
  perms = {}
  for j in range(batch_size):
    i = step * batch_size + j
    epoch = i // n
    if epoch not in perms:
      perms[epoch] = np.random.default_rng([seed, stream, epoch]).permutation(n)
    out[j] = perms[epoch][i % n]
  return out


def take(pool: dict, idx: np.ndarray) -> dict:
  """The rows idx of every pool array (teacher log-probs as float32)."""
  out = {k: v[idx] for k, v in pool.items()}
  if "teacher_logp" in out:
    out["teacher_logp"] = out["teacher_logp"].astype(np.float32)
  return out


def concat_batches(parts: Sequence[dict]) -> dict:
  keys = set(parts[0])
  for p in parts[1:]:
    if set(p) != keys:
      raise ValueError("Mixed pools must all carry (or all lack) a stored teacher.")
  return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def token_frequencies(pools: Sequence[dict], vocab_size: int) -> np.ndarray:
  """[V] counts of the sampled continuation tokens in the pools (prompts excluded)."""
  counts = np.zeros((vocab_size,), np.int64)
  for pool in pools:
    sampled = pool["tokens"][:, 1:][pool["mask"][:, :-1] > 0]
    np.add.at(counts, sampled, 1)
  return counts
