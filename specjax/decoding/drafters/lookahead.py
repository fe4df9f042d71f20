"""Lookahead decoding (Fu et al. 2024): Jacobi iteration and n-gram verification in one pass.

Axes: B batch, W window width, N n-gram size, M = N - 1, G candidates per round,
N1 = 1 + G M tree nodes, T = N1 + M W tokens of one pass, V vocab, S cache slots, D width.

No trained weights. The state keeps a Jacobi window of M levels x W columns of guessed
future tokens and a fixed-shape n-gram pool: for every token id up to G continuations of
M tokens (written round-robin, exact duplicates skipped). One target pass per round, at
the cache length P (the root, the last final token x_{n-1}, goes to slot P), scores:

  verification branch: the root and the G pooled n-grams keyed by x_{n-1}, as a token
    tree of G chains of depth M (node 1 + (d-1) G + g = chain g's d-th token, position
    P + d, seeing the prefix, the root and its own chain);
  lookahead branch: window level l, column j at position P + 1 + l + j, seeing the
    prefix, the root, level 0's columns 0..j and levels 1..l of column j (a contiguous
    context, so its output is a Jacobi guess for position P + 2 + l + j).

The outputs of the last level give W new tokens; column j's trajectory (its M window
tokens and the new one) is an n-gram for the pool, and the window drops level 0 and
gains the new tokens as its last level. The tree is verified exactly by
`tree.verify_tree` (candidates are a deterministic function of the history, so q is
one-hot per child): greedy output equals the target's greedy output, and sampled output
follows the target's distribution exactly (recursive rejection with the rejected
candidates' mass removed). The accepted path is gathered into contiguous cache slots as
for any tree; k = M is fixed by the drafter.
"""
from __future__ import annotations

import functools

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from specjax import sampling as sampling_lib
from specjax.decoding import tree as tree_lib
from specjax.decoding.drafters.base import Capabilities, DrafterBase
from specjax.models.cache import gather_path


@flax.struct.dataclass
class LookaheadState:
  """window: [B, M, W] Jacobi levels (level M - 1 the newest). pool: [B, V, G, M] pooled
  continuations keyed by their n-gram's first token (-1: empty). ptr: [B, V] next slot."""
  window: jax.Array
  pool: jax.Array
  ptr: jax.Array


@functools.lru_cache(maxsize=None)
def _layout(w: int, n: int, g: int):
  """Static arrays of one pass: tree parents [N1], positions after P [T], mask [T, T]."""
  m = n - 1
  n1 = 1 + g * m
  parents = [0] + [0 if d == 1 else 1 + (d - 2) * g + c for d in range(1, m + 1) for c in range(g)]
  spec = tree_lib.TreeSpec.from_parents(parents[1:])  # checks the depth order
  t = n1 + m * w
  offsets = np.concatenate([np.asarray(spec.depths), [1 + l + j for l in range(m) for j in range(w)]])
  rel = np.zeros((t, t), bool)
  for i in range(n1):  # each node sees itself and its ancestors
    a = i
    while True:
      rel[i, a] = True
      if a == 0:
        break
      a = spec.parents[a]
  la = lambda l, j: n1 + l * w + j  # noqa: E731
  for l in range(m):
    for j in range(w):
      r = la(l, j)
      rel[r, 0] = True
      rel[r, [la(0, jj) for jj in range(j + 1)]] = True
      rel[r, [la(ll, j) for ll in range(1, l + 1)]] = True
  return spec, offsets.astype(np.int32), rel


@flax.struct.dataclass
class LookaheadDrafter(DrafterBase):
  """Lookahead decoding with window W, n-gram size N and G verified candidates."""
  window: int = flax.struct.field(pytree_node=False)
  ngram: int = flax.struct.field(pytree_node=False)
  candidates: int = flax.struct.field(pytree_node=False)
  vocab_size: int = flax.struct.field(pytree_node=False)
  name: str = flax.struct.field(pytree_node=False, default="lookahead")

  @property
  def caps(self) -> Capabilities:
    return Capabilities(owns_pass=True, round_slots=self.round_slots, fixed_k=self.ngram - 1,
                        verified_nodes=self.candidates * (self.ngram - 1))

  @property
  def round_slots(self) -> int:
    """Tokens (cache slots) one pass writes after a row's length."""
    return 1 + (self.candidates + self.window) * (self.ngram - 1)

  def __str__(self) -> str:
    return f"lookahead:{self.window},{self.ngram},{self.candidates}"

  def validate(self, target_cfg, k: int, tree, limit: int, used: int) -> None:
    del k
    if tree is not None:
      raise ValueError("Lookahead decoding verifies its own n-gram candidates as a tree; "
                       "use tree=None with draft='lookahead:W,N'.")
    t = self.round_slots
    if used + t + 1 > limit:
      raise ValueError(
          f"{self}: one lookahead pass writes {t} tokens (1 + (G + W) x (N - 1)), and with "
          f"the longest prompt plus max_new_tokens ({used}) it needs {used + t + 1} cache "
          f"positions, but the limit is {limit}. Lower W, N or G (or max_new_tokens).")
    if target_cfg.vocab_size != self.vocab_size:
      raise ValueError(f"{self} was built for {self.vocab_size} tokens but the target has "
                       f"{target_cfg.vocab_size}; build it with the target's vocabulary.")

  def init(self, target_params, prompt, prompt_lens, max_len, hidden):
    del target_params, max_len, hidden
    b = prompt.shape[0]
    m, w, g = self.ngram - 1, self.window, self.candidates
    # Initial guesses: prompt tokens, read backwards from the end (any guess is exact).
    idx = np.arange(m)[:, None] + np.arange(w)[None]  # [M, W]
    src = prompt_lens[:, None, None] - 1 - (idx[None] % prompt_lens[:, None, None])
    window = jnp.take_along_axis(prompt, src.reshape(b, -1), axis=1).reshape(b, m, w)
    pool = jnp.full((b, self.vocab_size, g, m), -1, jnp.int32)
    return LookaheadState(window=window.astype(jnp.int32), pool=pool,
                          ptr=jnp.zeros((b, self.vocab_size), jnp.int32))

  def round(self, target, state: LookaheadState, ctx, draft_key, verify_key):
    """One pass: verify the pooled n-grams of the last token and advance the window.

    Returns (path tokens [B, M], their ranks (zeros: counted as a chain), n_acc [B],
    next [B], the target's features along the path [B, M + 1, D], state, cache) like
    `tree.tree_round`.
    """
    del draft_key
    m, w, g = self.ngram - 1, self.window, self.candidates
    spec, offsets, rel = _layout(w, self.ngram, g)
    n1, t = spec.n_nodes + 1, len(offsets)
    b = ctx.tokens.shape[0]
    rows = jnp.arange(b)
    root = jnp.take_along_axis(ctx.tokens, (ctx.n_tokens - 1)[:, None], axis=1)[:, 0]  # [B]
    cand = state.pool[rows, root]  # [B, G, M]
    cand = jnp.where(cand < 0, root[:, None, None], cand)  # empty slots: any token is exact
    tree_tok = jnp.concatenate([root[:, None], jnp.swapaxes(cand, 1, 2).reshape(b, g * m)], 1)
    tokens = jnp.concatenate([tree_tok, state.window.reshape(b, m * w)], 1)  # [B, T]

    cache = ctx.target_cache
    prefix = cache.lengths  # [B] P = n_tokens - 1
    s = jnp.arange(cache.max_len)[None] - prefix[:, None]  # [B, S] slot relative to P
    inside = jnp.take(jnp.asarray(rel), jnp.clip(s, 0, t - 1), axis=1)  # [T, B, S]
    mask = (s < 0)[:, None] | (((s >= 0) & (s < t))[:, None] & jnp.moveaxis(inside, 0, 1))
    hidden, cache = target.step(tokens, prefix[:, None] + jnp.asarray(offsets)[None], mask,
                                cache)  # [B, T, D]
    last_level = n1 + (m - 1) * w + np.arange(w)
    logits = target.head(hidden[:, np.concatenate([np.arange(n1), last_level])])  # [B, N1+W, V]

    parents = jnp.broadcast_to(jnp.asarray(spec.parents, jnp.int32), (b, n1))
    depths = jnp.broadcast_to(jnp.asarray(spec.depths, jnp.int32), (b, n1))
    q = jax.nn.one_hot(tree_tok, logits.shape[-1], dtype=jnp.float32).at[:, 0].set(0.0)
    draft = tree_lib.TreeDraft(tokens=tree_tok, parents=parents, depths=depths, q=q)
    p = sampling_lib.warp(logits[:, :n1], ctx.sampling)  # [B, N1, V]
    path, n_acc, nxt = tree_lib.verify_tree(draft, p, verify_key, m)
    cache = gather_path(cache, prefix, path)
    path_hidden = jnp.take_along_axis(hidden[:, :n1], path[:, :, None], axis=1)  # [B, M+1, D]
    drafts = jnp.take_along_axis(tree_tok, path[:, 1:], axis=1)  # [B, M]

    new = sampling_lib.argmax(logits[:, n1:])  # [B, W] Jacobi step
    grams = jnp.concatenate([state.window, new[:, None]], 1)  # [B, N, W]: column j an n-gram
    pool, ptr = jax.vmap(functools.partial(_insert, g=g))(state.pool, state.ptr, grams)
    window = jnp.concatenate([state.window[:, 1:], new[:, None]], 1)
    ranks = jnp.zeros_like(drafts)  # the loop's rank counters are sized for a chain
    return (drafts, ranks, n_acc, nxt, path_hidden,
            LookaheadState(window=window, pool=pool, ptr=ptr), cache)

  def commit(self, state, n_tokens, hidden):
    return state

  def passes_per_round(self, k: int) -> int:
    return 0  # drafting shares the target's verify pass


def _insert(pool, ptr, grams, g: int):
  """One row: pool [V, G, M], ptr [V], grams [N, W] -> the pool with each column's
  continuation grams[1:, j] filed under grams[0, j] (skipped if already there)."""
  def body(j, carry):
    pool, ptr = carry
    key, cont = grams[0, j], grams[1:, j]
    have = pool[key]  # [G, M]
    dup = jnp.any(jnp.all(have == cont[None], -1))
    slot = ptr[key] % g
    pool = pool.at[key, slot].set(jnp.where(dup, have[slot], cont))
    return pool, ptr.at[key].add(jnp.where(dup, 0, 1))
  return jax.lax.fori_loop(0, grams.shape[1], body, (pool, ptr))


def parse(spec: str, vocab_size: int) -> LookaheadDrafter:
  """'lookahead:W,N[,G]' (window, n-gram size, candidates; G defaults to W)."""
  return from_spec(spec.partition(":")[2], vocab_size, spec)


def from_spec(arg: str, vocab_size: int, spec: str = "") -> LookaheadDrafter:
  """'W,N[,G]' (of 'lookahead:W,N[,G]')."""
  spec = spec or f"lookahead:{arg}"
  try:
    parts = [int(x) for x in arg.split(",")]
  except ValueError:
    parts = []
  if len(parts) not in (2, 3) or parts[0] < 1 or parts[1] < 2 or (len(parts) == 3 and parts[2] < 1):
    raise ValueError(f"Drafter {spec!r}: give 'lookahead:W,N[,G]' with window W >= 1, n-gram "
                     "size N >= 2 and G >= 1 candidates (default W), e.g. 'lookahead:5,4'.")
  w, n = parts[:2]
  return LookaheadDrafter(window=w, ngram=n, candidates=parts[2] if len(parts) == 3 else w,
                          vocab_size=int(vocab_size))
