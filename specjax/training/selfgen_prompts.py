"""Self-generated data, stage 1: Magpie-style prompts from the target, and decoding rows.

The target's chat template rendered up to the start of the user turn (with a short
category system line, `STEER`), plus a category opener, sampled from the target until
it ends the turn; each candidate through the filters (`selfgen_filters`). Categories get
candidates in inverse proportion to how often theirs survived so far (`_allocate`).
Rows are decoded with `specjax.generate` in fixed-size batches (`_generate_rows`).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

import specjax
from specjax.training import data as data_lib
from specjax.training.selfgen_filters import _Seen, reject_reason

# Category -> (system line, openers). The opener starts the user turn; the target writes the rest.
STEER = {
    "translation": ("The user asks the assistant to translate a sentence or a short text between "
                    "English and another language.",
                    ["Translate", "Translate the following sentence into", "How do you say",
                     "Can you translate this", "What does this", "Please translate"]),
    "summarisation": ("The user pastes a paragraph of text and asks the assistant to summarise it.",
                      ["Summarize the following", "Can you summarise this", "Please give me a short "
                       "summary of", "Here is a paragraph", "Summarize this article"]),
    "open_qa": ("The user asks the assistant a general knowledge question.",
                ["Why", "What is", "How does", "Who was", "What are", "When did", "Is it true that"]),
    "math_reasoning": ("The user asks the assistant to solve a math word problem step by step.",
                       ["A store", "If a train", "Sarah has", "Solve", "A rectangle", "What is the",
                        "John buys"]),
    "retrieval_qa": ("The user gives the assistant a short passage and asks a question that the "
                     "passage answers.",
                     ["Read the passage below and answer", "Based on the following text,",
                      "Context:", "Here is a paragraph", "Using the information below,"]),
    "writing": ("The user asks the assistant to write something: a story, a poem, an email, an essay.",
                ["Write a", "Compose", "Draft an email", "Write a short story", "Can you write"]),
    "coding": ("The user asks the assistant a programming question or asks it to write code.",
               ["Write a Python", "How do I", "Write a function", "What is the difference between",
                "Fix this code", "In JavaScript,"]),
    "extraction": ("The user gives the assistant a text and asks it to extract specific information "
                   "from it.",
                   ["Extract", "List all the", "From the following text,", "Find the",
                    "Identify the"]),
    "reasoning": ("The user asks the assistant a logic puzzle or a question that needs careful "
                  "reasoning.",
                  ["If", "Which", "A man", "There are", "Is the following", "Three"]),
    "roleplay": ("The user asks the assistant to play a character or act in a role.",
                 ["Pretend you are", "Act as", "Imagine you are", "You are a", "Role-play as"]),
    "stem": ("The user asks the assistant to explain a concept in science, technology, engineering "
             "or mathematics.",
             ["Explain", "How does", "Why do", "What happens when", "Describe how"]),
    "humanities": ("The user asks the assistant about history, philosophy, literature, art or "
                   "society.",
                   ["What were the causes of", "Explain the significance of", "Who was",
                    "How did", "Compare", "What is the meaning of"]),
}
CATEGORIES = tuple(STEER)
_SENTINEL = "\x00USER\x00"


def user_prefix(tokenizer, system: Optional[str]) -> str:
  """The chat template rendered up to the content of the first user turn."""
  msgs = ([{"role": "system", "content": system}] if system else []) + [
      {"role": "user", "content": _SENTINEL}]
  text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
  return text[:text.index(_SENTINEL)]


def _seed(*parts: int) -> int:
  return int(np.random.SeedSequence(list(parts)).generate_state(1)[0] & 0x7FFFFFFF)


def _generate_rows(target, ids: list, batch_size: int, max_new: int, temperature: float,
                   top_p: float, seed: int, eos_ids) -> tuple[list, list, float]:
  """New tokens of each row, decoded in fixed-size batches (the last one padded by repeating
  rows); returns (tokens, finished flags, compile seconds)."""
  out, fin, compile_s = [], [], 0.0
  eos = set(int(e) for e in eos_ids)
  for b, start in enumerate(range(0, len(ids), batch_size)):
    chunk = ids[start:start + batch_size]
    padded = chunk + [chunk[-1]] * (batch_size - len(chunk))
    r = specjax.generate(target, padded, max_new, temperature=temperature, top_p=top_p,
                         seed=_seed(seed, b), eos_ids=tuple(sorted(eos)))
    compile_s += r.stats.compile_time_s
    for t in r.tokens[:len(chunk)]:
      out.append(list(t))
      fin.append(bool(t) and t[-1] in eos)
  return out, fin, compile_s


def _batch(config) -> int:
  return max(1, min(config.batch_size, config.shard_size))


def _allocate(n: int, kept: np.ndarray, cand: np.ndarray) -> np.ndarray:
  """n candidates over categories in inverse proportion to their survival so far (every
  category at least one), so the kept counts come out balanced."""
  rate = (kept + 1.0) / (cand + 2.0)
  w = 1.0 / rate
  alloc = np.maximum(1, np.floor(n * w / w.sum())).astype(int)
  order = np.argsort(-(n * w / w.sum() - alloc), kind="stable")
  i = 0
  while alloc.sum() < n:
    alloc[order[i % len(order)]] += 1
    i += 1
  return alloc



def _prompt_set_rows(config) -> list[dict]:
  rows = []
  for name in [s.strip() for s in config.prompt_sets.split(",") if s.strip()]:
    if name in ("eval", "heldout"):
      raise ValueError(f"config.prompt_sets must not name {name!r}: the evaluation set is for "
                       "tables and the held-out split for checkpoint selection; name training "
                       "splits such as 'train,train_extra'.")
    rows += data_lib.load_prompts(name)
  return rows


def _sample_prompts(config, target, s: int, seen: _Seen, kept, cand):
  """Shard s's generated prompts: (texts, category indices, candidates per category,
  rejection counts, compile seconds)."""
  tok, f = target.tokenizer, config.filters
  alloc = _allocate(config.shard_size, kept, cand)
  rng = np.random.default_rng(_seed(config.seed, s, 0))
  plan = [(c, STEER[name][1][rng.integers(len(STEER[name][1]))])
          for c, name in enumerate(CATEGORIES) for _ in range(alloc[c])]
  ids = [tok.encode(user_prefix(tok, STEER[CATEGORIES[c]][0] if config.system_steer else None) + op,
                    add_special_tokens=False) for c, op in plan]
  new, fin, compile_s = _generate_rows(target, ids, _batch(config), config.prompt_max_new,
                                       config.prompt_temperature, config.prompt_top_p,
                                       _seed(config.seed, s, 1), target.eos_ids)
  special = set(tok.all_special_ids)
  texts, cats, reasons = [], [], {}
  for (c, op), t, ok in zip(plan, new, fin):
    body = t[:-1] if ok else t
    text = (op + tok.decode(body)).strip()
    why = ("unfinished" if not ok and f.require_finished else "special" if special & set(body)
           else reject_reason(text, f) or seen.reason(text))
    if why:
      reasons[why] = reasons.get(why, 0) + 1
      continue
    seen.add(text)
    texts.append(text)
    cats.append(c)
  shard_cand = np.bincount([c for c, _ in plan], minlength=len(CATEGORIES))
  return texts, cats, shard_cand, reasons, compile_s

