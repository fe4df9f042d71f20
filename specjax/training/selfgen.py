"""Training data from the target itself: Magpie-style prompts, on-policy responses, shards.

    python scripts/generate_data.py --config=configs/generate_data_smollm2.py

Prompts: the target's chat template rendered up to the start of the user turn (with a
short category system line), plus a category opener ("Translate", "Write a Python ..."),
sampled from the target (`prompt_temperature`, `prompt_top_p`) until it ends the turn.
Each candidate is filtered (finished turn, length, ASCII / English heuristic, no
degenerate repetition, no special tokens) and dropped when it is a near duplicate
(normalised word n-gram overlap) of an earlier prompt or shares any n-gram with the
evaluation set `specjax/data/prompts_eval.jsonl`, which so stays unseen. Categories
(`CATEGORIES`, those of the evaluation set) get candidates in inverse proportion to how
often theirs survived so far, so the kept pairs balance over them. Optional fixed prompt
sets (`prompt_sets`, e.g. "train,train_extra") come first, FIXED_SHARD to a shard.
Responses: `target.encode(prompt, chat=True)` (what evaluation feeds the target) decoded
with `specjax.generate` (plain jitted loop, batches of `batch_size`, greedy at
`response_temperature` 0, on-policy samples at 1).

Cache layout (`data_dir`):
    manifest.json       the generation config, its hash and the category list
    shard_00000.npz ... one per shard, written atomically (tmp file + rename)
    log.jsonl           one line per written shard (wall and CPU seconds, compile, pairs, batch)
Shard s is a pure function of (config, s, the shards before it): its PRNG seeds derive
from (seed, s), so a killed run rerun with the same config continues at the first
missing shard with nothing lost and nothing duplicated. `batch_size` and `shard_size`
are left out of the hash (they change which samples are drawn, not their distribution;
the filters see every earlier shard either way), so a cache begun on a CPU can be
continued on an accelerator with larger batches and shards. Rows are decoded in
batches of min(batch_size, shard_size), the last one padded, so shapes (and compiles)
stay fixed. Another config in the same `data_dir` is refused with a `ValueError`
saying what to do. One process writes a data_dir at a time.

Shard arrays (N pairs, C categories): prompt_tokens / response_tokens flat int32 with
prompt_offsets / response_offsets [N + 1] int64; category [N] int16 (index into the
manifest's categories); source [N] int8 (0 generated, 1 fixed prompt set); finished [N]
bool (the response ended with an EOS); prompt_text [N] str; candidates [C] int32 (prompt
candidates sampled per category in this shard).

API for the trainer:
    load_pairs(data_dir, split="all") -> [{"prompt_ids", "response_ids", "category",
        "source", "id"}]  prompt_ids: the chat-encoded prompt (list[int]), response_ids:
        the sampled continuation (EOS kept when hit); split "select" is a fixed 1 in
        SELECT_EVERY of the pairs (by a hash of the prompt ids) kept for checkpoint
        selection, "train" the rest, "all" both. The evaluation set (prompts_eval.jsonl)
        is for tables only: never train on it or select checkpoints with it.
    pair_stats(data_dir) -> dict of counts, per-category counts, mean lengths, filter
        survival, throughput from log.jsonl and two example prompts per category.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
import zlib
from typing import Callable, Iterable, Optional

import numpy as np

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
EVAL_FILE = os.path.join(DATA_DIR, "prompts_eval.jsonl")
SELECT_EVERY = 50  # 1 pair in 50 is the checkpoint-selection split
FIXED_SHARD = 128  # prompts per shard of the fixed prompt sets (independent of shard_size)
FORMAT = 1

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
_ENGLISH = set("the a an of to and in is are was for on with that this what how why who which "
               "can you your my i me it be as at by from or do does if please about".split())
_SENTINEL = "\x00USER\x00"
HASHED_FIELDS = ("format", "target", "seed", "prompt_sets", "system_steer",
                 "prompt_temperature", "prompt_top_p", "prompt_max_new", "response_temperature",
                 "response_top_p", "response_max_new", "filters", "steer")


# ----------------------------------------------------------------------------- n-grams


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


# ----------------------------------------------------------------------------- the cache


def config_dict(config) -> dict:
  """The fields that define the data (hashed), as plain JSON values."""
  d = config.to_dict() if hasattr(config, "to_dict") else dict(config)
  d = dict(d, format=FORMAT, steer=STEER)
  return {k: d[k] for k in HASHED_FIELDS}


def config_hash(config) -> str:
  return hashlib.sha256(json.dumps(config_dict(config), sort_keys=True).encode()).hexdigest()[:16]


def _atomic_write(path: str, write: Callable) -> None:
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "wb") as f:
    write(f)
  os.replace(tmp, path)


def open_cache(data_dir: str, config, categories: list) -> None:
  """Creates data_dir/manifest.json, or checks that the one there was written by this config."""
  os.makedirs(data_dir, exist_ok=True)
  for name in os.listdir(data_dir):  # half-written shards of a killed run
    if re.fullmatch(r"shard_\d{5}\.npz\.tmp\d+", name):
      os.remove(os.path.join(data_dir, name))
  path = os.path.join(data_dir, "manifest.json")
  want = {"config_hash": config_hash(config), "config": config_dict(config),
          "categories": list(categories)}
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      have = json.load(f)
    if have.get("config_hash") != want["config_hash"]:
      old, new = have.get("config", {}), json.loads(json.dumps(want["config"]))
      diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
      raise ValueError(
          f"{data_dir} holds data generated by another config (hash {have.get('config_hash')}, "
          f"this one {want['config_hash']}; fields differ: {', '.join(diff)}): pass a new "
          "--config.data_dir, or delete that directory to regenerate.")
    return
  _atomic_write(path, lambda f: f.write(json.dumps(want, indent=1).encode()))


def shard_path(data_dir: str, s: int) -> str:
  return os.path.join(data_dir, f"shard_{s:05d}.npz")


def shards(data_dir: str) -> list[int]:
  """Indices of the complete shards, in order."""
  names = [n for n in os.listdir(data_dir) if re.fullmatch(r"shard_\d{5}\.npz", n)]
  return sorted(int(n[6:11]) for n in names)


def _pack(seqs) -> tuple[np.ndarray, np.ndarray]:
  offsets = np.zeros(len(seqs) + 1, np.int64)
  offsets[1:] = np.cumsum([len(s) for s in seqs])
  flat = np.concatenate([np.asarray(s, np.int32) for s in seqs]) if seqs else np.zeros(0, np.int32)
  return flat, offsets


def _unpack(flat, offsets) -> list[list[int]]:
  return [flat[offsets[i]:offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]


def write_shard(data_dir: str, s: int, rows: list[dict], candidates) -> None:
  """rows: {"prompt_ids", "response_ids", "category" (index), "source", "finished", "text"}."""
  p, po = _pack([r["prompt_ids"] for r in rows])
  r, ro = _pack([r["response_ids"] for r in rows])
  arrays = dict(prompt_tokens=p, prompt_offsets=po, response_tokens=r, response_offsets=ro,
                category=np.array([x["category"] for x in rows], np.int16),
                source=np.array([x["source"] for x in rows], np.int8),
                finished=np.array([x["finished"] for x in rows], bool),
                prompt_text=np.array([x["text"] for x in rows], dtype=str),
                candidates=np.asarray(candidates, np.int32))
  _atomic_write(shard_path(data_dir, s), lambda f: np.savez(f, **arrays))


def read_shard(data_dir: str, s: int) -> dict:
  with np.load(shard_path(data_dir, s), allow_pickle=False) as z:
    return {k: z[k] for k in z.files}


def _manifest(data_dir: str) -> dict:
  path = os.path.join(data_dir, "manifest.json")
  if not os.path.exists(path):
    raise ValueError(f"{data_dir} holds no generated data (no manifest.json): run "
                     "scripts/generate_data.py with --config.data_dir there first.")
  with open(path, encoding="utf-8") as f:
    return json.load(f)


# ----------------------------------------------------------------------------- the trainer API


def in_select_split(prompt_ids) -> bool:
  return zlib.crc32(np.asarray(prompt_ids, np.int32).tobytes()) % SELECT_EVERY == 0


def load_pairs(data_dir: str, split: str = "all") -> list[dict]:
  """Every stored pair as {"prompt_ids", "response_ids", "category", "source", "id"}.
  split: "all", "train" (for training) or "select" (for checkpoint selection only)."""
  if split not in ("all", "train", "select"):
    raise ValueError(f"split must be 'all', 'train' or 'select', got {split!r}.")
  cats = _manifest(data_dir)["categories"]
  out = []
  for s in shards(data_dir):
    z = read_shard(data_dir, s)
    prompts = _unpack(z["prompt_tokens"], z["prompt_offsets"])
    responses = _unpack(z["response_tokens"], z["response_offsets"])
    for i, (p, r) in enumerate(zip(prompts, responses)):
      if split != "all" and in_select_split(p) != (split == "select"):
        continue
      out.append({"prompt_ids": p, "response_ids": r, "category": cats[int(z["category"][i])],
                  "source": "generated" if z["source"][i] == 0 else "prompt_set",
                  "id": f"{s:05d}-{i:04d}"})
  return out


def pair_stats(data_dir: str, config=None) -> dict:
  """Counts, per-category counts, lengths, filter survival and throughput of a cache
  (checked against `config` when one is given)."""
  man = _manifest(data_dir)
  if config is not None and man["config_hash"] != config_hash(config):
    open_cache(data_dir, config, man["categories"])  # raises, naming the fields that differ
  cats = man["categories"]
  n, per_cat, p_len, r_len, fin, cand, texts = 0, {c: 0 for c in cats}, 0, 0, 0, 0, set()
  kept_gen, examples = 0, {}
  idx = shards(data_dir)
  for s in idx:
    z = read_shard(data_dir, s)
    n += len(z["category"])
    for c in z["category"]:
      per_cat[cats[int(c)]] += 1
    p_len += int(z["prompt_offsets"][-1])
    r_len += int(z["response_offsets"][-1])
    fin += int(z["finished"].sum())
    cand += int(z["candidates"].sum())
    kept_gen += int((z["source"] == 0).sum())
    texts.update(z["prompt_text"].tolist())
    for c, t in zip(z["category"], z["prompt_text"].tolist()):
      if len(examples.setdefault(cats[int(c)], [])) < 2:
        examples[cats[int(c)]].append(t[:200])
  log = []
  if os.path.exists(os.path.join(data_dir, "log.jsonl")):
    with open(os.path.join(data_dir, "log.jsonl"), encoding="utf-8") as f:
      lines = f.read().split("\n")
    log = [json.loads(line) for line in lines[:-1] if line.strip()]  # the last: being written
  secs = sum(r["wall_s"] for r in log)
  timed = [r for r in log if "cpu_s" in r]  # CPU seconds of all the process's threads
  cpu_s, cpu_pairs = sum(r["cpu_s"] for r in timed), sum(r["pairs"] for r in timed)
  comp = sum(r["compile_s"] for r in log)
  pairs_logged = sum(r["pairs"] for r in log)
  return {"config_hash": man["config_hash"], "shards": len(idx), "pairs": n,
          "distinct_prompts": len(texts), "per_category": per_cat,
          "mean_prompt_tokens": p_len / max(n, 1), "mean_response_tokens": r_len / max(n, 1),
          "finished_fraction": fin / max(n, 1),
          "generated_candidates": cand, "generated_kept": kept_gen,
          "filter_survival": kept_gen / cand if cand else None,
          "logged_shards": len(log), "logged_pairs": pairs_logged, "logged_wall_s": secs,
          "logged_compile_s": comp, "logged_cpu_s": cpu_s,
          "pairs_per_minute": 60 * pairs_logged / secs if secs else None,
          "pairs_per_minute_excl_compile": (60 * pairs_logged / (secs - comp)
                                            if secs > comp else None),
          "pairs_per_cpu_minute": 60 * cpu_pairs / cpu_s if cpu_s else None,
          "batch_sizes": sorted({r["batch_size"] for r in log}),
          "examples": examples}


# ----------------------------------------------------------------------------- generation


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
  import specjax
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


def _prompt_set_rows(config) -> list[dict]:
  from specjax.training import data as data_lib
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


def generate(config, target=None, log: Callable = print, max_shards: Optional[int] = None) -> dict:
  """Writes shards into config.data_dir until it holds config.num_pairs pairs, or this call
  has written max_shards (default config.max_shards, 0: no limit) shards; returns `pair_stats`."""
  data_dir = config.data_dir
  fixed = _prompt_set_rows(config)
  extra = [c for c in dict.fromkeys(r["category"] for r in fixed) if c not in CATEGORIES]
  categories = list(CATEGORIES) + extra
  open_cache(data_dir, config, categories)
  if target is None:
    from specjax.loading import load_model
    target = load_model(config.target)
  seen = _Seen(config.filters, read_jsonl_texts(EVAL_FILE) if config.filters.exclude_eval else [])
  n_fixed = math.ceil(len(fixed) / FIXED_SHARD)
  kept = np.zeros(len(CATEGORIES), np.int64)  # generated pairs per category so far
  cand = np.zeros(len(CATEGORIES), np.int64)  # generated candidates per category so far
  total, done = 0, shards(data_dir)
  for s in done:  # resume: rebuild the filter and balance state from the shards on disk
    z = read_shard(data_dir, s)
    for t in z["prompt_text"].tolist():
      seen.add(t)
    np.add.at(kept, z["category"][z["source"] == 0].astype(int), 1)
    cand += z["candidates"]
    total += len(z["category"])
  limit = config.max_shards if max_shards is None else max_shards
  written, s, done, empty = 0, 0, set(done), 0
  while total < config.num_pairs and (not limit or written < limit):
    if empty >= 3:
      raise ValueError(f"3 shards in a row kept no prompt (see {data_dir}/log.jsonl for why): "
                       "loosen config.filters or raise config.prompt_max_new.")
    if s in done:
      s += 1
      continue
    start, cpu, reasons = time.perf_counter(), time.process_time(), None
    if s < n_fixed:  # a shard of the fixed prompt sets
      chunk = fixed[s * FIXED_SHARD:(s + 1) * FIXED_SHARD]
      texts, cats = [r["text"] for r in chunk], [categories.index(r["category"]) for r in chunk]
      shard_cand, source, compile_s = np.zeros(len(CATEGORIES), np.int64), 1, 0.0
    else:
      texts, cats, shard_cand, reasons, compile_s = _sample_prompts(config, target, s, seen,
                                                                    kept, cand)
      source = 0
    prompt_ids = [target.encode(t, chat=True) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: len(prompt_ids[i]))  # fewer padded slots
    resp, rfin = [None] * len(texts), [False] * len(texts)
    if texts:
      out, ok, cs = _generate_rows(target, [prompt_ids[i] for i in order], _batch(config),
                                   config.response_max_new, config.response_temperature,
                                   config.response_top_p, _seed(config.seed, s, 2), target.eos_ids)
      compile_s += cs
      for i, r, o in zip(order, out, ok):
        resp[i], rfin[i] = r, o
    rows = [{"prompt_ids": prompt_ids[i], "response_ids": resp[i], "category": cats[i],
             "source": source, "finished": rfin[i], "text": texts[i]} for i in range(len(texts))]
    write_shard(data_dir, s, rows, shard_cand)
    if source == 0:
      np.add.at(kept, np.asarray(cats, int), 1)
    cand += shard_cand
    total += len(rows)
    empty = 0 if rows else empty + 1
    rec = {"shard": s, "pairs": len(rows), "candidates": int(shard_cand.sum()),
           "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu,
           "compile_s": compile_s,
           "batch_size": _batch(config), "total_pairs": total, "load_avg": os.getloadavg()[0],
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if reasons is not None:
      rec["rejected"] = reasons
    with open(os.path.join(data_dir, "log.jsonl"), "a", encoding="utf-8") as fh:
      fh.write(json.dumps(rec) + "\n")
    log(json.dumps(rec))
    done.add(s)
    written += 1
    s += 1
  return pair_stats(data_dir)
