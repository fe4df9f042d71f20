"""Drafters: one jit-compatible interface, three kinds.

A drafter is a pytree (its weights are leaves, its hyper-parameters static) with

  init(target_params, prompt [B, P], prompt_lens [B], max_len, hidden [B, P, D]) -> state
  propose(state, ctx, key) -> (drafts [B, k], q [B, k, V], state, target_cache)
  commit(state, n_tokens [B], hidden [B, k+1, D]) -> state   # n_tokens now final
  passes_per_round(k) -> how many forward passes of its own one proposal costs

`ctx` is a `DraftContext` with the target (behind the model interface of
`specjax.models.interface`), its cache and the token buffer.
`hidden` is the target's last hidden state (before its final norm) from the prefill
and from each verify pass; only feature drafts read it. A drafter with a static
`feature_layers` tuple gets those target layers' outputs concatenated instead
([B, T, L*D], EAGLE-3 style).
Invariant between rounds: row b holds n_tokens[b] final tokens and the target cache
holds all but the last of them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Protocol, runtime_checkable

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from specjax import sampling as sampling_lib
from specjax.decoding import tree as tree_lib
from specjax.models import KVCache, ModelConfig, feature_forward, head
from specjax.models.feature_draft import feature_layers_of
from specjax.models.interface import Decoder


@runtime_checkable
class Drafter(Protocol):
  """The interface the loop reaches a drafter through (see the module docstring).

  An implementation is a `flax.struct.dataclass`: weights and state are pytree
  leaves, hyper-parameters static fields, every shape fixed, so it passes through jit.
  """

  def init(self, target_params: Any, prompt: jax.Array, prompt_lens: jax.Array, max_len: int,
           hidden: jax.Array) -> Any:
    """The drafter's state after the prompt [B, P] (hidden [B, P, D]: target features)."""

  def propose(self, state: Any, ctx: "DraftContext",
              key: jax.Array) -> tuple[jax.Array, jax.Array, Any, KVCache]:
    """(drafts [B, k], q [B, k, V] they were sampled from, state, target cache)."""

  def commit(self, state: Any, n_tokens: jax.Array, hidden: jax.Array) -> Any:
    """The state once n_tokens [B] are final (hidden [B, k+1, D]: the verify pass)."""

  def passes_per_round(self, k: int) -> int:
    """Forward passes of its own that one proposal of k drafts costs."""


@flax.struct.dataclass
class NoDrafter:
  """k = 0: the target decodes alone, one token per round."""

  def init(self, target_params, prompt, prompt_lens, max_len, hidden) -> tuple:
    return ()

  def propose(self, state, ctx: "DraftContext",
              key) -> tuple[jax.Array, jax.Array, tuple, KVCache]:
    b, v = ctx.tokens.shape[0], ctx.target_cfg.vocab_size
    return (jnp.zeros((b, 0), jnp.int32), jnp.zeros((b, 0, v), jnp.float32), state,
            ctx.target_cache)

  def commit(self, state, n_tokens, hidden) -> tuple:
    return state

  def passes_per_round(self, k: int) -> int:
    return 0


@flax.struct.dataclass
class DraftContext:
  """What a drafter may read each round. Drafters reach the target through `target`
  (the model interface); target_params/target_cfg are its weights and config."""
  target_params: Any
  target_cache: KVCache
  tokens: jax.Array  # [B, S] token buffer
  n_tokens: jax.Array  # [B] final tokens per row
  target_cfg: Any = flax.struct.field(pytree_node=False)
  k: int = flax.struct.field(pytree_node=False)  # drafts per round (a tree's: its reach)
  sampling: sampling_lib.SamplingParams = flax.struct.field(pytree_node=False)
  target_model: Any = None  # the interface object (default: a `Decoder` of the above)

  @property
  def target(self):
    if self.target_model is not None:
      return self.target_model
    return Decoder(params=self.target_params, cfg=self.target_cfg)


def _rows_slice(tokens: jax.Array, starts: jax.Array, size: int) -> jax.Array:
  """tokens[b, starts[b] : starts[b] + size] for every row -> [B, size, ...]."""
  return jax.vmap(lambda row, s: jax.lax.dynamic_slice_in_dim(row, s, size))(tokens, starts)


def sample_chain(first_logits: jax.Array, carry, step_fn, ctx: DraftContext,
                 key: jax.Array) -> tuple[jax.Array, jax.Array, Any]:
  """Samples k drafts, each fed back to the drafter: d_1 from first_logits [B, V], then
  d_{i+1} from `step_fn(carry, d_i) -> (logits [B, V], carry)`, k - 1 times in a scan.

  Returns drafts [B, k], their warped distributions q [B, k, V] and the final carry.
  """
  keys = jax.random.split(key, ctx.k)
  q0 = sampling_lib.warp(first_logits, ctx.sampling)
  x0 = sampling_lib.sample(keys[0], q0)

  def step(state, step_key):
    carry, x = state
    logits, carry = step_fn(carry, x)
    q = sampling_lib.warp(logits, ctx.sampling)
    nxt = sampling_lib.sample(step_key, q)
    return (carry, nxt), (nxt, q)

  (carry, _), (xs, qs) = jax.lax.scan(step, (carry, x0), keys[1:])
  drafts = jnp.concatenate([x0[:, None], xs.T], axis=1)  # [B, k]
  q = jnp.concatenate([q0[:, None], jnp.swapaxes(qs, 0, 1)], axis=1)  # [B, k, V]
  return drafts, q, carry


def draft_autoregressive(model, cache: KVCache, first: jax.Array, first_idx: jax.Array,
                         n_tokens: jax.Array, ctx: DraftContext, key: jax.Array,
                         n_layers: Optional[int] = None
                         ) -> tuple[jax.Array, jax.Array, KVCache]:
  """k draft steps of a causal LM `model` (the model interface); the first step feeds
  `first` [B, T0] tokens.

  first_idx [B] picks which of the T0 first-step positions predicts the next token
  (a draft cache can lag the target by one token after a fully accepted round).
  Returns drafts [B, k], q [B, k, V] and the cache holding n_tokens + k - 1 entries.
  """
  hidden, cache = model.step(first, None, None, cache, n_layers)  # [B, T0, D]
  hidden = jnp.take_along_axis(hidden, first_idx[:, None, None], axis=1)  # [B, 1, D]
  logits = model.head(hidden)[:, 0]  # [B, V]

  def step(cache, x):
    hidden, cache = model.step(x[:, None], None, None, cache, n_layers)
    return model.head(hidden)[:, 0], cache

  return sample_chain(logits, cache.with_lengths(n_tokens), step, ctx, key)


def _last(ctx: DraftContext) -> jax.Array:
  """[B] each row's last final token (a tree's root)."""
  return jnp.take_along_axis(ctx.tokens, (ctx.n_tokens - 1)[:, None], axis=1)[:, 0]


def _lm_feed(model, prefix: jax.Array, n_layers: Optional[int] = None):
  """A tree's per-depth draft pass for a causal LM (the model interface): the W nodes
  of depth d at slots prefix + nodes, positions prefix + d, seeing prefix and ancestors."""
  def feed(cache, d, tok, nodes, parents, anc):
    del parents
    pos = jnp.broadcast_to(prefix[:, None] + d, tok.shape)
    mask = tree_lib.tree_mask(prefix, anc, cache.max_len)
    hidden, cache = model.step(tok, pos, mask, cache.with_lengths(prefix + nodes[0]), n_layers)
    return model.head(hidden), cache
  return feed


@flax.struct.dataclass
class ModelDrafter:
  """A separate small causal LM with the target's vocabulary; state is its own cache."""
  params: Any
  cfg: ModelConfig = flax.struct.field(pytree_node=False)
  name: str = flax.struct.field(pytree_node=False, default="draft")

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    del target_params, hidden
    return self.model.prefill(prompt, prompt_lens, max_len)[1]

  @property
  def model(self) -> Decoder:
    return Decoder(params=self.params, cfg=self.cfg)

  def propose(self, state: KVCache, ctx: DraftContext, key):
    # The draft cache lags by one or two tokens; refeed two from its length on.
    start = state.lengths
    first = _rows_slice(ctx.tokens, start, 2)  # [B, 2]
    first_idx = ctx.n_tokens - 1 - start  # 0 or 1
    drafts, q, state = draft_autoregressive(self.model, state, first, first_idx, ctx.n_tokens,
                                            ctx, key)
    return drafts, q, state, ctx.target_cache

  def propose_tree(self, state: KVCache, ctx: DraftContext, tree, key):
    # The draft cache lags by 1 to k + 1 tokens after a tree round; refeed k + 1.
    start = state.lengths
    hidden, cache = self.model.step(_rows_slice(ctx.tokens, start, ctx.k + 1), None, None, state)
    hidden = jnp.take_along_axis(hidden, (ctx.n_tokens - 1 - start)[:, None, None], axis=1)
    draft, cache = tree_lib.expand(tree, _last(ctx), self.model.head(hidden)[:, 0], cache,
                                   _lm_feed(self.model, ctx.n_tokens - 1), ctx.sampling, key)
    # Only the root's entry is in order; the accepted path is refed next round.
    return draft, cache.with_lengths(ctx.n_tokens), ctx.target_cache

  def commit(self, state: KVCache, n_tokens, hidden):
    return state.with_lengths(jnp.minimum(state.lengths, n_tokens - 1))

  def passes_per_round(self, k: int) -> int:
    return k


@flax.struct.dataclass
class FeatureDraftState:
  """cache: the draft's own cache; its entries below `lengths` were built from target
  features only (entries from the draft's predicted features are redone next round).
  features: [B, S, D] the target's features by position (valid below n_tokens - 1)."""
  cache: KVCache
  features: jax.Array


@flax.struct.dataclass
class FeatureDrafter:
  """An EAGLE-style draft (`specjax.models.feature_draft`) over the target's features.

  Each round: one pass over the positions whose target features arrived with the last
  verify (up to k + 1 of them, fixed shape) yields d_1; k - 1 passes feeding back the
  draft's own predicted features yield d_2..d_k.
  """
  params: Any
  cfg: ModelConfig = flax.struct.field(pytree_node=False)
  name: str = flax.struct.field(pytree_node=False, default="feature draft")
  # Target layers whose outputs the loop hands over as `hidden` (concatenated, EAGLE-3
  # style); None: the last layer only.
  feature_layers: Optional[tuple] = flax.struct.field(pytree_node=False, default=None)

  @classmethod
  def of(cls, params, cfg: ModelConfig, name: str = "feature draft") -> "FeatureDrafter":
    """The drafter of a feature draft's params (its feature layers read from them)."""
    return cls(params=params, cfg=cfg, name=name, feature_layers=feature_layers_of(params))

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    del target_params
    want = None if self.feature_layers is None else len(self.feature_layers) * self.cfg.d_model
    if want is not None and hidden.shape[-1] != want:  # else it would skip fc_layers silently
      raise ValueError(f"The feature draft {self.name!r} reads target layers "
                       f"{self.feature_layers} (width {want}) but got features of width "
                       f"{hidden.shape[-1]}: run the target through "
                       "specjax.models.interface.target_pass with this drafter.")
    b, p = prompt.shape
    features = jnp.zeros((b, max_len, hidden.shape[-1]), hidden.dtype).at[:, :p].set(hidden)
    nxt = jnp.concatenate([prompt[:, 1:], jnp.zeros_like(prompt[:, :1])], axis=1)  # token j + 1
    cache = KVCache.init(self.cfg, b, max_len, self.params["embed"].dtype)
    _, cache = feature_forward(self.params, self.cfg, hidden, nxt, cache)
    # Position plen - 1 waits for the first generated token: the first round does it.
    return FeatureDraftState(cache=cache.with_lengths(prompt_lens - 1), features=features)

  def propose(self, state: FeatureDraftState, ctx: DraftContext, key):
    k, start = ctx.k, state.cache.lengths  # start = n_tokens - 1 - (accepted last round + 1)
    feats = _rows_slice(state.features, start, k + 1)  # [B, k+1, D]
    nxt = _rows_slice(ctx.tokens, start + 1, k + 1)  # [B, k+1]
    pred, cache = feature_forward(self.params, self.cfg, feats, nxt, state.cache)
    f = jnp.take_along_axis(pred, (ctx.n_tokens - 2 - start)[:, None, None], axis=1)  # [B, 1, D]
    logits = head(self.params, self.cfg, f)[:, 0]  # [B, V]

    def step(carry, x):
      cache, f = carry
      f, cache = feature_forward(self.params, self.cfg, f, x[:, None], cache)
      return head(self.params, self.cfg, f)[:, 0], (cache, f)

    drafts, q, (cache, _) = sample_chain(logits, (cache.with_lengths(ctx.n_tokens - 1), f), step,
                                         ctx, key)
    # Keep only entries built from target features; the verify pass brings the rest.
    state = FeatureDraftState(cache=cache.with_lengths(ctx.n_tokens - 1), features=state.features)
    return drafts, q, state, ctx.target_cache

  def propose_tree(self, state: FeatureDraftState, ctx: DraftContext, tree, key):
    k, start = ctx.k, state.cache.lengths
    feats = _rows_slice(state.features, start, k + 1)  # [B, k+1, D]
    nxt = _rows_slice(ctx.tokens, start + 1, k + 1)  # [B, k+1]
    pred, cache = feature_forward(self.params, self.cfg, feats, nxt, state.cache)
    f = jnp.take_along_axis(pred, (ctx.n_tokens - 2 - start)[:, None, None], axis=1)  # [B, 1, D]
    # Node i of depth d reads its parent's predicted feature at position P + d, where
    # P = n_tokens - 2 is the root's own entry (a tree node at slot P + i).
    prefix = ctx.n_tokens - 2
    fbuf = jnp.zeros((f.shape[0], tree.slots, f.shape[-1]), f.dtype).at[:, 0].set(f[:, 0])

    def feed(carry, d, tok, nodes, parents, anc):
      cache, fbuf = carry
      fin = jnp.take_along_axis(fbuf, parents[:, :, None], axis=1)  # [B, W, D]
      pos = jnp.broadcast_to(prefix[:, None] + d, tok.shape)
      out, cache = feature_forward(self.params, self.cfg, fin, tok,
                                   cache.with_lengths(prefix + nodes[0]), positions=pos,
                                   mask=tree_lib.tree_mask(prefix, anc, cache.max_len))
      return head(self.params, self.cfg, out), (cache, fbuf.at[:, nodes].set(out))

    draft, (cache, _) = tree_lib.expand(tree, _last(ctx), head(self.params, self.cfg, f)[:, 0],
                                        (cache, fbuf), feed, ctx.sampling, key)
    state = FeatureDraftState(cache=cache.with_lengths(ctx.n_tokens - 1), features=state.features)
    return draft, state, ctx.target_cache

  def commit(self, state: FeatureDraftState, n_tokens, hidden):
    # hidden [B, k+1, D]: the verify pass's features at positions start .. start + k.
    features = jax.vmap(lambda f, h, i: jax.lax.dynamic_update_slice_in_dim(f, h, i, 0))(
        state.features, hidden.astype(state.features.dtype), state.cache.lengths)
    return state.replace(features=features)

  def passes_per_round(self, k: int) -> int:
    return k


@flax.struct.dataclass
class EarlyExitDrafter:
  """The target's first `n_layers` blocks with its final norm and head.

  Shares the target's weights and the first n_layers of its cache: drafting writes
  those layers' entries, and the verify pass then rewrites them with the same values.
  """
  n_layers: int = flax.struct.field(pytree_node=False)

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    return ()

  def propose(self, state, ctx: DraftContext, key):
    lengths = ctx.target_cache.lengths
    view = ctx.target_cache.first_layers(self.n_layers)
    first = _rows_slice(ctx.tokens, ctx.n_tokens - 1, 1)  # [B, 1]: the last final token
    drafts, q, view = draft_autoregressive(ctx.target, view, first, jnp.zeros_like(lengths),
                                           ctx.n_tokens, ctx, key, n_layers=self.n_layers)
    cache = ctx.target_cache.merge_first_layers(view).with_lengths(lengths)
    return drafts, q, state, cache

  def propose_tree(self, state, ctx: DraftContext, tree, key):
    lengths = ctx.target_cache.lengths  # P: the root goes to slot P
    view = ctx.target_cache.first_layers(self.n_layers)
    hidden, view = ctx.target.step(_last(ctx)[:, None], None, None, view, self.n_layers)
    draft, view = tree_lib.expand(tree, _last(ctx), ctx.target.head(hidden)[:, 0], view,
                                  _lm_feed(ctx.target, lengths, self.n_layers), ctx.sampling, key)
    # The verify pass rewrites these layers' tree slots with the same values.
    return draft, state, ctx.target_cache.merge_first_layers(view).with_lengths(lengths)

  def commit(self, state, n_tokens, hidden):
    return state

  def passes_per_round(self, k: int) -> int:
    return k


@flax.struct.dataclass
class NgramDrafter:
  """Prompt lookup: continue the latest earlier match of the last n tokens (n down to 1).

  No model and no state; q is one-hot. Where the match runs into the end of the
  text, the continuation repeats with the match's period.
  """
  n: int = flax.struct.field(pytree_node=False, default=3)
  tree_kinds = ("static",)  # the tree kinds propose_tree expands (default: every kind)

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    return ()

  def propose(self, state, ctx: DraftContext, key):
    del key
    drafts = jax.vmap(lambda row, n: _ngram_row(row, n, self.n, ctx.k))(ctx.tokens, ctx.n_tokens)
    q = jax.nn.one_hot(drafts, ctx.target.vocab_size, dtype=jnp.float32)
    return drafts, q, state, ctx.target_cache

  def propose_tree(self, state, ctx: DraftContext, tree, key):
    """Several earlier matches as branches: node i follows match `branch_ids[i]`."""
    del key
    if tree.kind != "static":
      raise ValueError("n-gram drafts expand static trees only (e.g. tree='static:3,1,1').")
    branch, depths = tree.branch_ids(), np.asarray(tree.depths)
    conts = jax.vmap(lambda row, n: _ngram_candidates(row, n, self.n, ctx.k, int(branch.max()) + 1))(
        ctx.tokens, ctx.n_tokens)  # [B, M, k]
    tokens = jnp.concatenate([_last(ctx)[:, None], conts[:, branch[1:], depths[1:] - 1]], axis=1)
    b, n1 = tokens.shape
    draft = tree_lib.TreeDraft(
        tokens=tokens, parents=jnp.broadcast_to(jnp.asarray(tree.parents, jnp.int32), (b, n1)),
        depths=jnp.broadcast_to(jnp.asarray(depths, jnp.int32), (b, n1)),
        q=jax.nn.one_hot(tokens, ctx.target.vocab_size, dtype=jnp.float32).at[:, 0].set(0.0))
    return draft, state, ctx.target_cache

  def commit(self, state, n_tokens, hidden):
    return state

  def passes_per_round(self, k: int) -> int:
    return 0


@flax.struct.dataclass
class LookupFirstDrafter:
  """Prompt lookup where the text repeats itself, a model drafter elsewhere.

  Each round and row: when the last `min_match` or more tokens occur earlier in the row
  (the longest suffix of up to n tokens, latest match: `NgramDrafter`'s rule), draft
  their continuation (q one-hot); otherwise `base`'s proposal. The choice depends on
  the final tokens only, so verification stays exact. `base` proposes every round; its
  state must follow the verified tokens whatever was drafted, as a feature draft's
  (rebuilt from the target's features) and early exit's (the target's own cache) do.
  With a tree, the lookup's continuation is a chain of `chain` nodes beside it (0: as
  deep as the tree); a longer chain lets a round accept more than k drafts where the
  text is copied. Spec string: "<draft>+ngram:N" or "<draft>+ngram:N:L" (chain = L).
  """
  base: Any
  n: int = flax.struct.field(pytree_node=False, default=3)
  min_match: int = flax.struct.field(pytree_node=False, default=2)
  chain: int = flax.struct.field(pytree_node=False, default=0)
  BASES = ("FeatureDrafter", "EarlyExitDrafter")  # state follows the verified tokens

  @property
  def name(self) -> str:
    length = f":{self.chain}" if self.chain else ""
    return f"{getattr(self.base, 'name', type(self.base).__name__)}+ngram:{self.n}{length}"

  @property
  def feature_layers(self) -> Optional[tuple]:
    return getattr(self.base, "feature_layers", None)

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    return self.base.init(target_params, prompt, prompt_lens, max_len, hidden)

  def propose(self, state, ctx: DraftContext, key):
    drafts, q, state, cache = self.base.propose(state, ctx, key)
    looked, size = jax.vmap(lambda row, n: _ngram_match(row, n, self.n, ctx.k))(
        ctx.tokens, ctx.n_tokens)  # [B, k], [B]
    use = size >= self.min_match  # [B]
    drafts = jnp.where(use[:, None], looked, drafts)
    q = jnp.where(use[:, None, None], jax.nn.one_hot(looked, q.shape[-1], dtype=q.dtype), q)
    return drafts, q, state, cache

  def propose_tree(self, state, ctx: DraftContext, tree, key):
    """`base`'s tree plus the lookup's continuation as a chain under the root, tried
    first where the match is at least `min_match` tokens long (`tree_lib.with_chain`)."""
    draft, state, cache = self.base.propose_tree(
        state, ctx, dataclasses.replace(tree, lookup=0), key)
    looked, size = jax.vmap(lambda row, n: _ngram_match(row, n, self.n, tree.lookup))(
        ctx.tokens, ctx.n_tokens)  # [B, L], [B]
    return tree_lib.with_chain(draft, looked, size >= self.min_match), state, cache

  def tree_spec(self, tree):
    """The tree a round verifies: the user's, plus a lookup chain of `chain` nodes (0: as
    deep as the tree)."""
    return dataclasses.replace(tree, lookup=self.chain or tree.depth)

  def commit(self, state, n_tokens, hidden):
    return self.base.commit(state, n_tokens, hidden)

  def passes_per_round(self, k: int) -> int:
    return self.base.passes_per_round(k)


def _ngram_candidates(row: jax.Array, n_tokens: jax.Array, max_n: int, k: int,
                      m: int) -> jax.Array:
  """row [S], n_tokens scalar -> [m, k]: the continuations of the m best earlier matches
  (longest suffix match first, then latest; one per continuation start), the last
  token repeated where there are fewer; m = 1 is `_ngram_row`."""
  s = row.shape[0]
  starts = jnp.arange(s)
  score = jnp.full((s,), -1, jnp.int32)
  size_at = jnp.zeros((s,), jnp.int32)
  for size in range(max_n, 0, -1):
    tail = jax.lax.dynamic_slice_in_dim(row, jnp.maximum(n_tokens - size, 0), size)  # [size]
    windows = jnp.stack([jnp.roll(row, -t) for t in range(size)], axis=1)  # [S, size]
    ok = jnp.all(windows == tail[None, :], axis=1) & (starts + size < n_tokens) \
        & (n_tokens >= size)
    sc = jnp.where(ok, size * s + starts, -1)
    better = sc > score
    score, size_at = jnp.where(better, sc, score), jnp.where(better, size, size_at)
  # Matches continuing from the same place propose the same tokens: keep the best one.
  conts = jnp.clip(starts + size_at, 0, s - 1)
  best = jnp.full((s,), -1, jnp.int32).at[conts].max(score)
  score = jnp.where(best[conts] == score, score, -1)
  top, j = jax.lax.top_k(score, m)  # [m]
  cont = j + size_at[j]
  period = jnp.maximum(n_tokens - cont, 1)
  src = cont[:, None] + jnp.arange(k)[None] % period[:, None]  # [m, k]
  fallback = row[jnp.maximum(n_tokens - 1, 0)]
  return jnp.where((top >= 0)[:, None], row[jnp.clip(src, 0, s - 1)], fallback).astype(jnp.int32)


def _ngram_row(row: jax.Array, n_tokens: jax.Array, max_n: int, k: int) -> jax.Array:
  """row [S], n_tokens scalar -> k proposed tokens."""
  return _ngram_match(row, n_tokens, max_n, k)[0]


def _ngram_match(row: jax.Array, n_tokens: jax.Array, max_n: int,
                 k: int) -> tuple[jax.Array, jax.Array]:
  """row [S], n_tokens scalar -> (k proposed tokens, the matched suffix's length, 0 for
  none): the latest earlier match of the longest suffix of up to max_n tokens."""
  s = row.shape[0]
  starts = jnp.arange(s)  # candidate match starts j
  best_j = jnp.int32(-1)
  best_size = jnp.int32(0)
  for size in range(max_n, 0, -1):
    tail = jax.lax.dynamic_slice_in_dim(row, jnp.maximum(n_tokens - size, 0), size)  # [size]
    windows = jnp.stack([jnp.roll(row, -t) for t in range(size)], axis=1)  # [S, size]
    ok = jnp.all(windows == tail[None, :], axis=1) & (starts + size < n_tokens) \
        & (n_tokens >= size)
    j = jnp.max(jnp.where(ok, starts, -1))
    take = (best_j < 0) & (j >= 0)
    best_j = jnp.where(take, j, best_j)
    best_size = jnp.where(take, size, best_size)
  cont = best_j + best_size  # first continuation index
  period = jnp.maximum(n_tokens - cont, 1)
  src = cont + jnp.arange(k) % period
  fallback = jnp.full((k,), row[jnp.maximum(n_tokens - 1, 0)])
  return jnp.where(best_j >= 0, row[jnp.clip(src, 0, s - 1)], fallback).astype(jnp.int32), best_size
