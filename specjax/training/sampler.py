"""The autoregressive sampler of the training pools: one continuation per prompt from a
model (the target, or the draft for on-policy data), with the sampler's own top-K
log-probabilities at every step (the stored teacher when the sampler is the target).

Axes: B batch, P prompt bucket, G generated tokens, L sequence length, K teacher entries.

Why not `specjax.generate`: the pools need the sampling model's top-K log-probabilities
at every sampled position (the engine returns tokens only), and the pools (hence every
trained draft) are pinned by this sampler's PRNG stream; swapping it would change them.
Prompts are padded to the engine's bucket (`specjax.decoding.plan.prompt_bucket`).
"""
from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.plan import prompt_bucket
from specjax.models import KVCache, ModelConfig, forward
from specjax.sampling import SamplingParams, sample, warp
from specjax.training.teacher import topk_logp


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
    padded = np.zeros((batch_size, prompt_bucket(int(lens.max()))), np.int32)
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

