"""Prompt set, on-policy continuation pools and the batch order.

Axes: N sequences in a pool, B batch, P prompt bucket, G generated tokens,
L sequence length (prompt + continuation), K sparse teacher entries.

A *pool* is a dict of numpy arrays built once per source (target or draft sampler):
    tokens [N, L] int32   prompt + sampled continuation, right-padded with 0
    mask   [N, L] float32 1 where the next token is a sampled continuation token
    teacher_ids [N, L, K] int32, teacher_logp [N, L, K] float16   (optional: top-K
           teacher at every masked position; absent when the teacher runs online)
    features [N, L, F] float16   (feature drafts: the target's features at every
           position, `specjax.training.teacher.add_features`; F = D, or L_f x D for
           several target layers)
Pools are saved as .npz in the workdir so a resumed run reuses them exactly.

Batch order is a pure function of (seed, step): `batch_indices` draws the step's
rows from a per-epoch permutation seeded by (seed, stream, epoch), so an interrupted
and resumed run sees exactly the batches an uninterrupted run sees.
"""
from __future__ import annotations

import functools
import json
import os
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import KVCache, ModelConfig, forward
from specjax.sampling import SamplingParams, sample, warp
from specjax.training.teacher import topk_logp

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
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


def _bucket(n: int) -> int:
  """Prompt buckets are powers of two (at least 16): few shapes, few compiles."""
  return max(16, 1 << (max(n, 1) - 1).bit_length())


@functools.partial(jax.jit, static_argnames=("cfg", "max_new", "sampling", "top_k"))
def _sample_batch(params, cfg: ModelConfig, prompts, prompt_lens, key, eos_ids, *,
                  max_new: int, sampling: SamplingParams, top_k: int):
  """prompts [B, P] right-padded, prompt_lens [B] -> (new tokens [B, G], valid [B, G],
  top-K ids/log-probs [B, G, K] of the sampler's own logits at each step)."""
  b, p = prompts.shape
  cache = KVCache.init(cfg, b, p + max_new, dtype=jax.tree.leaves(params["layers"])[0].dtype)
  logits, cache = forward(params, cfg, prompts, cache)  # [B, P, V]
  last = jnp.take_along_axis(logits, (prompt_lens - 1)[:, None, None], axis=1)[:, 0]  # [B, V]
  cache = cache.with_lengths(prompt_lens)  # roll back the padding

  def step(carry, step_key):
    cache, logits, done = carry
    tok = sample(step_key, warp(logits, sampling))  # [B]
    ids, lp = topk_logp(logits, top_k)
    valid = ~done
    done = done | jnp.isin(tok, eos_ids)
    new_logits, cache = forward(params, cfg, tok[:, None], cache)
    return (cache, new_logits[:, 0], done), (tok, valid, ids, lp)

  keys = jax.random.split(key, max_new)
  _, (toks, valid, ids, lp) = jax.lax.scan(step, (cache, last, jnp.zeros((b,), bool)), keys)
  tr = lambda x: jnp.moveaxis(x, 0, 1)
  return tr(toks), tr(valid), tr(ids), tr(lp)


def sample_pool(params, cfg: ModelConfig, prompts: Sequence[Sequence[int]], *, max_new: int,
                seq_len: int, key: jax.Array, eos_ids: Sequence[int], temperature: float = 1.0,
                batch_size: int = 16, top_k_teacher: int = 0, progress=None) -> dict:
  """Samples one continuation per prompt from (params, cfg) and packs a pool.

  With top_k_teacher > 0 the sampler's own top-K log-probabilities (temperature 1)
  are kept as the stored teacher: use it when the sampler *is* the target. Prompts
  longer than seq_len - max_new keep their last tokens.
  """
  max_prompt = seq_len - max_new
  if max_prompt < 1:
    raise ValueError(f"seq_len={seq_len} leaves no room for prompts with max_new={max_new}.")
  prompts = [list(p)[-max_prompt:] for p in prompts]
  sampling = SamplingParams(temperature=float(temperature))
  eos = jnp.asarray(list(eos_ids) or [-1], jnp.int32)
  n = len(prompts)
  tokens = np.zeros((n, seq_len), np.int32)
  mask = np.zeros((n, seq_len), np.float32)
  k = max(top_k_teacher, 1)
  t_ids = np.zeros((n, seq_len, k), np.int32) if top_k_teacher else None
  t_lp = np.zeros((n, seq_len, k), np.float16) if top_k_teacher else None
  for start in range(0, n, batch_size):
    chunk = prompts[start:start + batch_size]
    rows = len(chunk)
    lens = np.array([len(p) for p in chunk] + [1] * (batch_size - rows), np.int32)
    padded = np.zeros((batch_size, _bucket(int(lens.max()))), np.int32)
    for i, pr in enumerate(chunk):
      padded[i, :len(pr)] = pr
    new, valid, ids, lp = jax.device_get(_sample_batch(
        params, cfg, jnp.asarray(padded), jnp.asarray(lens), jax.random.fold_in(key, start),
        eos, max_new=max_new, sampling=sampling, top_k=k))
    for i in range(rows):
      r, pl, g = start + i, lens[i], int(valid[i].sum())
      tokens[r, :pl] = chunk[i]
      tokens[r, pl:pl + g] = new[i, :g]
      mask[r, pl - 1:pl - 1 + g] = 1.0  # position t predicts token t + 1
      if top_k_teacher:
        t_ids[r, pl - 1:pl - 1 + g] = ids[i, :g]
        t_lp[r, pl - 1:pl - 1 + g] = lp[i, :g]
    if progress is not None:
      progress(min(start + batch_size, n), n)
  pool = {"tokens": tokens, "mask": mask}
  if top_k_teacher:
    pool.update(teacher_ids=t_ids, teacher_logp=t_lp)
  return pool


@functools.partial(jax.jit, static_argnames=("cfg", "top_k"))
def _teacher_topk(params, cfg: ModelConfig, tokens, *, top_k: int):
  logits, _ = forward(params, cfg, tokens)
  return topk_logp(logits, top_k)


def add_teacher_topk(pool: dict, target_params, target_cfg: ModelConfig, top_k: int,
                     batch_size: int = 8) -> dict:
  """Adds the target's top-K teacher to a pool sampled by another model (one target pass)."""
  n, seq_len = pool["tokens"].shape
  ids = np.zeros((n, seq_len, top_k), np.int32)
  lp = np.zeros((n, seq_len, top_k), np.float16)
  for start in range(0, n, batch_size):
    toks = pool["tokens"][start:start + batch_size]
    pad = batch_size - toks.shape[0]
    toks = np.pad(toks, ((0, pad), (0, 0)))
    i, l = jax.device_get(_teacher_topk(target_params, target_cfg, jnp.asarray(toks), top_k=top_k))
    m = pool["mask"][start:start + batch_size, :, None] > 0
    ids[start:start + batch_size] = np.where(m, i[:len(m)], 0)
    lp[start:start + batch_size] = np.where(m, l[:len(m)], 0)
  return dict(pool, teacher_ids=ids, teacher_logp=lp)


def save_pool(path: str, pool: dict) -> None:
  tmp = path + ".tmp.npz"
  np.savez(tmp, **pool)
  os.replace(tmp, path)


def load_pool(path: str) -> dict:
  try:
    with np.load(path) as f:
      return {k: f[k] for k in f.files}
  except Exception as e:  # noqa: BLE001 - re-raised with the path
    raise ValueError(f"Data pool {path} is unreadable ({e}); delete it to regenerate it.") from e


def cached_pool(path: Optional[str], make) -> dict:
  """Loads the pool at `path` if it exists, else builds it with make() and saves it."""
  if path and os.path.exists(path):
    return load_pool(path)
  pool = make()
  if path:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_pool(path, pool)
  return pool


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


def trim(batch: dict, multiple: int = 64) -> dict:
  """Drops trailing all-padding columns, keeping a multiple of `multiple` (few shapes to
  compile) and at least the token after the last masked position."""
  if not multiple:
    return batch
  n = live_width(batch["mask"], multiple)
  return {k: v[:, :n] for k, v in batch.items()}


def live_width(mask: np.ndarray, multiple: int = 64) -> int:
  """Columns of [B, L] rows the losses read: through the token after the last masked
  position, rounded up to a multiple of `multiple` (at most L)."""
  cols = np.nonzero(mask.any(0))[0]
  n = int(cols[-1]) + 2 if len(cols) else 1
  return min(-(-n // multiple) * multiple, mask.shape[1])


def token_frequencies(pools: Sequence[dict], vocab_size: int) -> np.ndarray:
  """[V] counts of the sampled continuation tokens in the pools (prompts excluded)."""
  counts = np.zeros((vocab_size,), np.int64)
  for pool in pools:
    sampled = pool["tokens"][:, 1:][pool["mask"][:, :-1] > 0]
    np.add.at(counts, sampled, 1)
  return counts
