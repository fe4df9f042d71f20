"""The shapes of one generate call: prompt bucket, round width, cache length, padding.

The one place these are computed; the tuning layer and the trainer ask here too.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import jax
import numpy as np

LONG_PREFILL = 1024  # prompts longer than this get a console line when their prefill starts
CACHE_MULTIPLE = 128  # cache lengths are rounded up to this (fewer distinct programs)


def round_up(x: int, m: int) -> int:
  return -(-x // m) * m


def prompt_bucket(n: int) -> int:
  """The padded prompt length, a few buckets to bound recompiles: powers of two (at least
  16) up to 64 tokens; past that, multiples of a quarter of the power of two below n, so a
  prompt is padded by less than 25% (151 -> 160, not 256; 5,000 -> 5,120, not 8,192). A
  batch pads every row to its longest prompt's bucket, and at batch 32 the prefill of those
  padded rows was most of the call (experiments/batch_step/)."""
  n = max(n, 1)
  if n <= 64:
    return max(16, 1 << (n - 1).bit_length())
  step = 1 << ((n - 1).bit_length() - 3)  # a quarter of the power of two below n
  return round_up(n, step)


PREFILL_GROUPS_MIN_GAIN = 0.3  # a prefill is split in two row groups only where that saves this share


def prefill_groups(lengths: Sequence[int]) -> tuple[tuple[int, ...], ...]:
  """The rows of a batch (indices) in the groups its prefill runs them in: one group, the
  rows in order, unless splitting the rows (sorted by length, shortest first) in two saves
  at least `PREFILL_GROUPS_MIN_GAIN` of the padded prompt positions (rows x bucket). Each
  group is padded to its own longest prompt's bucket, so short rows of a batch with a few
  long prompts are not padded to the longest (experiments/batch_step/). The split falls at a
  multiple of an eighth of the batch, so a batch size has at most 7 split points and its
  prefill programs stay few."""
  n = len(lengths)
  one = tuple(range(n))
  order = sorted(one, key=lambda b: (lengths[b], b))
  sizes = [prompt_bucket(lengths[b]) for b in order]  # non-decreasing
  cost, split = n * sizes[-1], None
  step = max(1, n // 8)
  for s in range(step, n, step):
    c = s * sizes[s - 1] + (n - s) * sizes[-1]
    if c < cost:
      cost, split = c, s
  if split is None or cost > (1 - PREFILL_GROUPS_MIN_GAIN) * n * sizes[-1]:
    return (one,)
  return tuple(order[:split]), tuple(order[split:])


def round_width(k: int, tree=None, round_slots: Optional[int] = None) -> int:
  """Draft slots one round writes after a row's last final token: k for a chain, the
  tree's slots - 1, or a drafter's own pass's (`caps.round_slots`) - 1."""
  if round_slots is not None:
    return round_slots - 1
  return k if tree is None else tree.slots - 1


def cache_len(prompt_len: int, max_new_tokens: int, width: int) -> int:
  """The KV cache length one call allocates: the prompt bucket, or the prompt, the new
  tokens and one round's slots (+ 2), rounded up to `CACHE_MULTIPLE`."""
  need = max(prompt_bucket(prompt_len), prompt_len + max_new_tokens + width + 2)
  return round_up(need, CACHE_MULTIPLE)


@dataclasses.dataclass(frozen=True)
class Plan:
  """bucket: padded prompt length; max_len: cache length; width: `round_width`."""
  bucket: int
  max_len: int
  width: int


def plan(cfg, longest: int, max_new_tokens: int, width: int,
         max_cache_len: Optional[int] = None) -> Plan:
  """Checks that the longest prompt and the new tokens fit the cache (one line if not)."""
  needed = longest + max_new_tokens + width + 1
  limit = cache_limit(cfg, max_cache_len)
  if needed > limit:
    raise ValueError(
        f"The prompt does not fit the cache: the longest prompt has {longest} tokens and "
        f"max_new_tokens={max_new_tokens} (+ {width + 1} slots for verification) needs "
        f"{needed} positions, but the limit is {limit} (model context "
        f"{cfg.max_positions}). Shorten the prompt or lower max_new_tokens.")
  bucket = prompt_bucket(longest)
  max_len = cache_len(longest, max_new_tokens, width)
  if getattr(cfg, "sliding_window", None):  # the cache must fit the window (a no-op there)
    max_len = min(max_len, cfg.sliding_window)
    cfg.check_window(max(bucket, longest + max_new_tokens + width + 2))
  return Plan(bucket=bucket, max_len=max_len, width=width)


def cache_bytes(decoder, batch: int, max_len: int) -> int:
  """Bytes of a decoder's cache for `batch` rows of `max_len` slots (its shapes only:
  nothing is allocated)."""
  shapes = jax.eval_shape(lambda: decoder.init_cache(batch, max_len))
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))


def device_memory_bytes(device=None) -> Optional[int]:
  """Memory one device can still give: the accelerator's limit less what is in use, or on
  the CPU the host's available memory (/proc/meminfo); None where neither is known."""
  device = device or jax.devices()[0]
  stats = device.memory_stats() if hasattr(device, "memory_stats") else None
  if stats and "bytes_limit" in stats:
    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


def check_memory(needed: int, batch: int, max_len: int, devices: int = 1,
                 available: Optional[int] = None) -> None:
  """One line, before compiling, when the caches of `batch` rows of `max_len` slots
  (`needed` bytes over `devices` devices) cannot fit one device's free memory."""
  available = device_memory_bytes() if available is None else available
  per_device = needed / max(devices, 1)
  if available is not None and per_device > available:
    gib = lambda x: f"{x / 2**30:.1f} GiB"
    raise ValueError(
        f"The KV caches do not fit in memory: a batch of {batch} rows with a cache of "
        f"{max_len} positions needs {gib(per_device)} per device, but {gib(available)} is "
        f"free. Lower the batch size, max_new_tokens or the prompt length, or spread the "
        f"batch over a mesh.")


def pad_groups(prompt_ids: Sequence[Sequence[int]], groups: tuple) -> tuple:
  """Token id lists in `prefill_groups`' groups -> (prompt, lengths [B], order [B]): prompt
  is [B, bucket] for one group (the rows in order), else a tuple of [B_g, bucket_g], each
  group zero-padded to its own bucket; lengths and the rows follow the groups' order, and
  order[i] is the caller's row of row i."""
  rows = [[prompt_ids[b] for b in g] for g in groups]
  padded = [pad_prompts(r, prompt_bucket(max(len(p) for p in r))) for r in rows]
  if len(padded) == 1:
    return (*padded[0], np.arange(len(prompt_ids)))
  return (tuple(p for p, _ in padded), np.concatenate([l for _, l in padded]),
          np.concatenate(groups))


def cache_limit(cfg, max_cache_len: Optional[int] = None) -> int:
  """The most cache positions a call may use: the model's context or the caller's cap."""
  return cfg.max_positions if max_cache_len is None else min(cfg.max_positions, max_cache_len)


def pad_prompts(prompt_ids: Sequence[Sequence[int]], bucket: int) -> tuple[np.ndarray, np.ndarray]:
  """Token id lists -> (prompt [B, bucket] zero-padded on the right, lengths [B])."""
  prompt = np.zeros((len(prompt_ids), bucket), np.int32)
  for b, ids in enumerate(prompt_ids):
    prompt[b, :len(ids)] = ids
  return prompt, np.array([len(p) for p in prompt_ids], np.int32)
