"""The speculative loop: prefill, then fixed-shape rounds inside one `lax.while_loop`.

Axes: B batch, P prompt bucket, S token/cache slots, k drafted tokens, V vocab.

A round: the drafter proposes k tokens with their draft distributions q; the
target scores [last final token, d_1..d_k] in one forward pass; `verify_batch`
keeps the accepted prefix and adds the target's own token; each unfinished row
gains 1 to k+1 tokens. With no drafter (k = 0) a round is one autoregressive step.
Everything stays on device: no host round trip per token or per round.
"""
from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from specjax import sampling as sampling_lib
from specjax.decoding.drafters import DraftContext
from specjax.decoding.verify import verify_batch, verify_row
from specjax.models import KVCache, ModelConfig, forward_hidden, head


@flax.struct.dataclass
class NoDrafter:
  """k = 0: the target decodes alone, one token per round."""

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    return ()

  def propose(self, state, ctx: DraftContext, key):
    b, v = ctx.tokens.shape[0], ctx.target_cfg.vocab_size
    return (jnp.zeros((b, 0), jnp.int32), jnp.zeros((b, 0, v), jnp.float32), state,
            ctx.target_cache)

  def commit(self, state, n_tokens, hidden):
    return state

  def passes_per_round(self, k: int) -> int:
    return 0


@flax.struct.dataclass
class LoopState:
  """Everything the while_loop carries.

  tokens: [B, S] prompt then generated tokens; n_tokens[b] of them are final.
  target_cache: holds all final tokens of a row but the last one.
  draft_state: the drafter's own state (a draft cache, or nothing).
  done: [B] row finished (EOS or max_new_tokens).
  key: PRNG key, split every round.
  Counters, per row: target_passes (prefill included), draft_passes, rounds
  (verify passes while unfinished), checked[:, i] / accepted[:, i] = how often
  draft position i was reached by verification / accepted.
  """
  tokens: jax.Array
  n_tokens: jax.Array
  target_cache: KVCache
  draft_state: Any
  done: jax.Array
  key: jax.Array
  target_passes: jax.Array
  draft_passes: jax.Array
  rounds: jax.Array
  checked: jax.Array
  accepted: jax.Array


def greedy_verify(drafts: jax.Array, logits: jax.Array):
  """drafts [B, k], logits [B, k+1, V] -> (n_accepted [B], next [B]): what `verify_row`
  gives with greedy (one-hot) p, from the argmaxes alone."""
  best = jnp.argmax(logits, -1).astype(jnp.int32)  # [B, k+1]
  n = jnp.sum(jnp.cumprod((drafts == best[:, :-1]).astype(jnp.int32), axis=1), axis=1)
  return n.astype(jnp.int32), jnp.take_along_axis(best, n[:, None], axis=1)[:, 0]


def _finish(new_tokens, count, n_generated, max_new, eos_ids):
  """Cuts a row's candidate tokens at EOS and at max_new; returns (kept, done)."""
  idx = jnp.arange(new_tokens.shape[0])
  is_eos = jnp.zeros(new_tokens.shape, bool)
  for e in eos_ids:
    is_eos = is_eos | (new_tokens == e)
  eos_hit = is_eos & (idx < count)
  first_eos = jnp.where(eos_hit.any(), jnp.argmax(eos_hit), count)
  kept = jnp.minimum(jnp.minimum(count, first_eos + 1), max_new - n_generated)
  done = eos_hit.any() | (n_generated + kept >= max_new)
  return kept, done


@functools.partial(jax.jit, static_argnames=("target_cfg", "sampling", "k", "eos_ids", "max_len",
                                                  "verifier"))
def run(target_params, drafter, prompt: jax.Array, prompt_lens: jax.Array, max_new: jax.Array,
        key: jax.Array, *, target_cfg: ModelConfig, sampling: sampling_lib.SamplingParams, k: int,
        eos_ids: tuple, max_len: int, verifier=verify_row) -> LoopState:
  """Prefill and speculative rounds until every row is done. Returns the final state."""
  b, p_len = prompt.shape
  rows = jnp.arange(b)
  key, prefill_key = jax.random.split(key)

  # Prefill: the whole prompt bucket at once; the first new token comes from the target.
  cache = KVCache.init(target_cfg, b, max_len, target_params["embed"].dtype)
  hidden, cache = forward_hidden(target_params, target_cfg, prompt, cache)  # [B, P, D]
  last = head(target_params, target_cfg, hidden[rows, prompt_lens - 1][:, None])[:, 0]  # [B, V]
  first = sampling_lib.sample(prefill_key, sampling_lib.warp(last, sampling))
  tokens = jnp.zeros((b, max_len), jnp.int32).at[:, :p_len].set(prompt)
  tokens = tokens.at[rows, prompt_lens].set(first)
  _, done = jax.vmap(lambda t: _finish(t[None], 1, 0, max_new, eos_ids))(first)

  state = LoopState(
      tokens=tokens, n_tokens=prompt_lens + 1, target_cache=cache.with_lengths(prompt_lens),
      draft_state=drafter.init(target_params, prompt, prompt_lens, max_len, hidden), done=done,
      key=key,
      target_passes=jnp.ones((b,), jnp.int32), draft_passes=jnp.zeros((b,), jnp.int32),
      rounds=jnp.zeros((b,), jnp.int32), checked=jnp.zeros((b, k), jnp.int32),
      accepted=jnp.zeros((b, k), jnp.int32))

  def round_(s: LoopState) -> LoopState:
    key, draft_key, verify_key = jax.random.split(s.key, 3)
    active = ~s.done
    ctx = DraftContext(target_params=target_params, target_cache=s.target_cache, tokens=s.tokens,
                       n_tokens=s.n_tokens, target_cfg=target_cfg, k=k, sampling=sampling)
    drafts, q, draft_state, cache = drafter.propose(s.draft_state, ctx, draft_key)  # [B,k], [B,k,V]

    last = jnp.take_along_axis(s.tokens, (s.n_tokens - 1)[:, None], axis=1)  # [B, 1]
    hidden, cache = forward_hidden(target_params, target_cfg, jnp.concatenate([last, drafts], 1),
                                   cache)  # [B, k+1, D]
    logits = head(target_params, target_cfg, hidden)
    if sampling.greedy and verifier is verify_row:  # exact match: argmaxes, no [B, k+1, V] one-hots
      n_acc, nxt = greedy_verify(drafts, logits)
    else:
      p = sampling_lib.warp(logits, sampling)  # [B, k+1, V]
      n_acc, nxt = verify_batch(drafts, q, p, verify_key, verifier)

    # Candidates: accepted drafts, then the target's token; cut at EOS / max_new.
    cand = jnp.where(jnp.arange(k + 1)[None] < n_acc[:, None],
                     jnp.concatenate([drafts, nxt[:, None]], 1), nxt[:, None])  # [B, k+1]
    n_generated = s.n_tokens - prompt_lens
    kept, finished = jax.vmap(lambda c, n, g: _finish(c, n, g, max_new, eos_ids))(
        cand, n_acc + 1, n_generated)
    kept = jnp.where(active, kept, 0)
    old = jax.vmap(lambda r, i: jax.lax.dynamic_slice_in_dim(r, i, k + 1))(s.tokens, s.n_tokens)
    write = jnp.where(active[:, None], cand, old)
    tokens = jax.vmap(lambda r, c, i: jax.lax.dynamic_update_slice_in_dim(r, c, i, 0))(
        s.tokens, write, s.n_tokens)
    n_tokens = s.n_tokens + kept

    pos = jnp.arange(k)[None]
    act = active[:, None].astype(jnp.int32)
    return LoopState(
        tokens=tokens, n_tokens=n_tokens, target_cache=cache.with_lengths(n_tokens - 1),
        draft_state=drafter.commit(draft_state, n_tokens, hidden), done=s.done | (active & finished),
        key=key, target_passes=s.target_passes + active,
        draft_passes=s.draft_passes + active * drafter.passes_per_round(k),
        rounds=s.rounds + active,
        checked=s.checked + act * (pos <= n_acc[:, None]),
        accepted=s.accepted + act * (pos < n_acc[:, None]))

  return jax.lax.while_loop(lambda s: ~jnp.all(s.done), round_, state)
