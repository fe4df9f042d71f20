"""The speculative loop: prefill, then fixed-shape rounds inside one `lax.while_loop`.

Axes: B batch, P prompt bucket, S token/cache slots, k drafted tokens, V vocab.

A round: the drafter proposes k tokens with their draft distributions q; the
target scores [last final token, d_1..d_k] in one forward pass; `verify_batch`
keeps the accepted prefix and adds the target's own token; each unfinished row
gains 1 to k+1 tokens. With no drafter (k = 0) a round is one autoregressive step.
Everything stays on device: no host round trip per token or per round.
The target is reached only through the model interface (`specjax.models.interface`).
The round's kind (`specjax.decoding.rounds`): a chain, a token tree (`tree=`, N drafted
nodes verified in one pass; a round then gains up to `tree.reach` + 1 tokens), or a
drafter's own pass; after it every kind continues alike.
"""
from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from specjax import sampling as sampling_lib
from specjax.decoding.drafters.base import DraftContext
from specjax.decoding.rounds import greedy_verify, round_step  # greedy_verify: re-exported
from specjax.decoding.verify import verify_row
from specjax.models import KVCache
from specjax.models.interface import Decoder, target_pass


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
  draft position i was reached by verification and kept / accepted and kept
  (exact definitions in `specjax.decoding.stats`); path_lengths[:, n] =
  rounds that kept n accepted drafts; rank_hits[:, i, r] = rounds whose accepted and
  kept node at depth i + 1 was its parent's r-th child (a chain has one rank).
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
  path_lengths: jax.Array
  rank_hits: jax.Array


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


def _reach(k: int, tree) -> int:
  """The most drafts one round accepts: k, or a tree's reach (a longer lookup chain)."""
  return k if tree is None else tree.reach


def _decoder(target, target_cfg):
  return target if target_cfg is None else Decoder(params=target, cfg=target_cfg)


def classes_of(target, drafter) -> tuple:
  """The classes of the target's and the drafter's pytree nodes, nested as the trees are: a
  static key of both programs. jit's cache compares treedefs, and two flax dataclasses with
  the same fields compare equal as treedefs, so a drafter subclass that overrides `propose`
  would otherwise be served its parent's trace whenever the two keys met in that cache."""
  def types(treedef):
    data = treedef.node_data()
    return (None if data is None else data[0],) + tuple(types(c) for c in treedef.children())
  return types(jax.tree.structure((target, drafter)))


def _join(parts: list):
  """Per-group pytrees with the rows leading on every leaf -> one pytree of all rows."""
  if len(parts) == 1:
    return parts[0]
  return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *parts)


@functools.partial(jax.jit, static_argnames=("eos_ids", "max_len", "target_cfg", "classes"))
def prefill(target, drafter, prompt, prompt_lens: jax.Array, max_new: jax.Array,
            key: jax.Array, sampling: sampling_lib.TracedSampling, *, eos_ids: tuple,
            max_len: int, target_cfg=None, classes: tuple = ()) -> LoopState:
  """The prompt bucket in one pass, the first new token from the target, and the loop's
  initial state without its counters (`rounds` adds them: their shapes follow k and the
  tree, which the prefill does not read, so one prefill program serves every k and tree).
  Compiled apart from the rounds: its passes have many rows.
  prompt: [B, P], or a tuple of row groups [B_g, P_g] (`plan.prefill_groups`), each
  prefilled at its own bucket and joined on the rows (the drafter's state too: its leaves
  have the rows leading); prompt_lens [B] in the groups' order.
  max_new and sampling's numbers are traced (one program for all their values).
  classes: `classes_of(target, drafter)`, read by jit's cache only."""
  target = _decoder(target, target_cfg)
  groups = prompt if isinstance(prompt, tuple) else (prompt,)
  b = prompt_lens.shape[0]
  key, prefill_key = jax.random.split(key)
  tokens = jnp.zeros((b, max_len), jnp.int32)
  lasts, caches, states, start = [], [], [], 0
  for group in groups:
    n, p_len = group.shape
    lens = prompt_lens[start:start + n]
    hidden, cache, feats = target_pass(target, drafter.caps.feature_layers, group,
                                       prefill=(lens, max_len))  # [B_g, P_g, D]
    lasts.append(hidden[jnp.arange(n), lens - 1])  # [B_g, D]
    caches.append(cache)
    states.append(drafter.init(target.params, group, lens, max_len, feats))
    tokens = tokens.at[start:start + n, :p_len].set(group)
    start += n
  last = target.head(_join(lasts)[:, None])[:, 0]  # [B, V]
  first = sampling_lib.sample(prefill_key, sampling_lib.warp(last, sampling))
  tokens = tokens.at[jnp.arange(b), prompt_lens].set(first)
  _, done = jax.vmap(lambda t: _finish(t[None], 1, 0, max_new, eos_ids))(first)
  return LoopState(
      tokens=tokens, n_tokens=prompt_lens + 1, target_cache=_join(caches),
      draft_state=_join(states), done=done, key=key,
      target_passes=jnp.ones((b,), jnp.int32), draft_passes=jnp.zeros((b,), jnp.int32),
      rounds=jnp.zeros((b,), jnp.int32), checked=None, accepted=None, path_lengths=None,
      rank_hits=None)


def _with_counters(s: LoopState, r: int, tree) -> LoopState:
  """The state with its per-position counters at zero, for r candidates a round."""
  b = s.rounds.shape[0]
  return s.replace(
      checked=jnp.zeros((b, r), jnp.int32), accepted=jnp.zeros((b, r), jnp.int32),
      path_lengths=jnp.zeros((b, r + 1), jnp.int32),
      rank_hits=jnp.zeros((b, r, 1 if tree is None else tree.max_children), jnp.int32))


@functools.partial(jax.jit, static_argnames=("k", "eos_ids", "verifier", "tree", "target_cfg",
                                             "classes"), donate_argnums=(2,))
def rounds(target, drafter, state: LoopState, prompt_lens: jax.Array, max_new: jax.Array,
           sampling: sampling_lib.TracedSampling, *, k: int, eos_ids: tuple,
           verifier=verify_row, tree=None, target_cfg=None, classes: tuple = ()) -> LoopState:
  """Speculative rounds from `prefill`'s state until every row is done (one while_loop).
  Its passes have B x (k + 1) rows (B x tree slots): `pass_options` compiles it for that.
  The cache length is the state's (`prefill`'s max_len)."""
  target = _decoder(target, target_cfg)
  r = _reach(k, tree)  # candidates per round: r drafts and the target's token
  state = _with_counters(state, r, tree)  # `prefill` leaves them to the rounds

  def round_(s: LoopState) -> LoopState:
    key, draft_key, verify_key = jax.random.split(s.key, 3)
    active = ~s.done
    ctx = DraftContext(target_params=target.params, target_cache=s.target_cache, tokens=s.tokens,
                       n_tokens=s.n_tokens, target_cfg=target.cfg, k=r, sampling=sampling,
                       target_model=target)
    drafts, ranks, n_acc, nxt, feats, draft_state, cache = round_step(
        target, drafter, s.draft_state, ctx, tree, draft_key, verify_key, verifier)

    # Candidates: accepted drafts, then the target's token; cut at EOS / max_new.
    cand = jnp.where(jnp.arange(r + 1)[None] < n_acc[:, None],
                     jnp.concatenate([drafts, nxt[:, None]], 1), nxt[:, None])  # [B, r+1]
    n_generated = s.n_tokens - prompt_lens
    kept, finished = jax.vmap(lambda c, n, g: _finish(c, n, g, max_new, eos_ids))(
        cand, n_acc + 1, n_generated)
    kept = jnp.where(active, kept, 0)
    old = jax.vmap(lambda row, i: jax.lax.dynamic_slice_in_dim(row, i, r + 1))(
        s.tokens, s.n_tokens)
    write = jnp.where(active[:, None], cand, old)
    tokens = jax.vmap(lambda row, c, i: jax.lax.dynamic_update_slice_in_dim(row, c, i, 0))(
        s.tokens, write, s.n_tokens)
    n_tokens = s.n_tokens + kept

    pos = jnp.arange(r)[None]
    act = active[:, None].astype(jnp.int32)
    n_kept = jnp.minimum(n_acc, kept)  # accepted drafts the row kept (EOS / max_new cut)
    return LoopState(
        tokens=tokens, n_tokens=n_tokens, target_cache=cache.with_lengths(n_tokens - 1),
        draft_state=drafter.commit(draft_state, n_tokens, feats), done=s.done | (active & finished),
        key=key, target_passes=s.target_passes + active,
        draft_passes=s.draft_passes + active * drafter.passes_per_round(k),
        rounds=s.rounds + active,
        # Only kept positions count: drafts that EOS / max_new cut were never emitted.
        checked=s.checked + act * (pos < kept[:, None]),
        accepted=s.accepted + act * (pos < n_kept[:, None]),
        path_lengths=s.path_lengths + act * (jnp.arange(r + 1)[None] == n_kept[:, None]),
        rank_hits=s.rank_hits + act[:, :, None] * (
            (pos < n_kept[:, None])[:, :, None]
            & (ranks[:, :, None] == jnp.arange(s.rank_hits.shape[2]))))

  return jax.lax.while_loop(lambda s: ~jnp.all(s.done), round_, state)


def run(target, drafter, prompt: jax.Array, prompt_lens: jax.Array, max_new: jax.Array,
        key: jax.Array, *, sampling: sampling_lib.Sampling, k: int, eos_ids: tuple,
        max_len: int, verifier=verify_row, tree=None, target_cfg=None) -> LoopState:
  """Prefill and speculative rounds until every row is done. Returns the final state.

  target: a decoder behind the model interface (`specjax.models.interface.Decoder`), or
  a transformer's params with its `target_cfg`.
  tree: None (a chain of k drafts) or a `tree_lib.TreeSpec` of depth k; with a tree, a
  verifier other than `verify_row` is a per-row tree rule like `tree_lib.verify_tree_row`.
  Two jitted programs (`prefill`, `rounds`); `generate` compiles each with its options.
  sampling: `SamplingParams` (made traced here) or `TracedSampling`.
  """
  if isinstance(sampling, sampling_lib.SamplingParams):
    sampling = sampling.traced()
  classes = classes_of(target, drafter)
  state = prefill(target, drafter, prompt, prompt_lens, max_new, key, sampling, max_len=max_len,
                  eos_ids=eos_ids, target_cfg=target_cfg, classes=classes)
  return rounds(target, drafter, state, prompt_lens, max_new, sampling, verifier=verifier,
                k=k, eos_ids=eos_ids, tree=tree, target_cfg=target_cfg, classes=classes)
