"""Training data from the target itself: Magpie-style prompts, on-policy responses, shards.

Stages, one module each: prompts (`selfgen_prompts`), filters (`selfgen_filters`), the
shard cache (`selfgen_shards`); `generate` here runs them shard by shard.

    python scripts/generate_data.py --config=configs/generate_data.py

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

import json
import math
import os
import time
from typing import Callable, Optional

import numpy as np

from specjax.training.selfgen_filters import (EVAL_FILE, _Seen, ngrams, normalise,  # noqa: F401
                                              read_jsonl_texts, reject_reason)
from specjax.training.selfgen_prompts import (CATEGORIES, STEER, _batch, _generate_rows,  # noqa: F401
                                              _prompt_set_rows, _sample_prompts, _seed,
                                              user_prefix)
from specjax.training.selfgen_shards import (SELECT_EVERY, config_hash, in_select_split,  # noqa: F401
                                             load_pairs, open_cache, pair_stats, read_shard,
                                             shard_path, shards, write_shard)

FIXED_SHARD = 128  # prompts per shard of the fixed prompt sets (independent of shard_size)


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
