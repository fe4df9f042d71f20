"""The drafter contract: a `Protocol`, a declared `Capabilities` record, the round's context.

Axes: B batch, P prompt bucket, S cache slots, k drafts per round, V vocab, D width.

A drafter is a pytree (`flax.struct.dataclass`: weights and state are leaves, its
hyper-parameters static) with

  init(target_params, prompt [B, P], prompt_lens [B], max_len, hidden [B, P, D]) -> state
  commit(state, n_tokens [B], hidden [B, k+1, D]) -> state   # n_tokens now final
  passes_per_round(k) -> forward passes of its own that one proposal costs
  validate(target_cfg, k, tree, limit, used), round_tree(tree)   # defaults in DrafterBase

and a `caps` record that says which round kinds it takes part in (`decoding/rounds.py`):
chains (`propose`, every drafter but one that owns its pass), the tree kinds its
`propose_tree` expands, or its own verify pass (`round`); also a k of its own and the
target layers it reads. The loop and `generate` read `caps`; nothing probes a drafter.

  propose(state, ctx, key) -> (drafts [B, k], q [B, k, V], state, target_cache)
  propose_tree(state, ctx, tree, key) -> (TreeDraft, state, target_cache)
  round(target, state, ctx, draft_key, verify_key) -> a `rounds.RoundOut`'s fields
`hidden` is the target's last hidden state (before its final norm) from the prefill and
each verify pass, or the outputs of `caps.feature_layers` concatenated ([B, T, L*D]).
Invariant between rounds: row b holds n_tokens[b] final tokens and the target cache
holds all but the last of them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Protocol, runtime_checkable

import flax.struct
import jax
import jax.numpy as jnp

from specjax import sampling as sampling_lib
from specjax.models import KVCache
from specjax.models.interface import Decoder


@dataclasses.dataclass(frozen=True)
class Capabilities:
  """What a drafter declares beyond the four methods every drafter has.

  tree_kinds: the `TreeSpec` kinds its `propose_tree` expands; () drafts chains only.
  owns_pass: it runs the target's verify pass itself (`round`); its rounds write
    `round_slots` cache slots and verify `verified_nodes` drafted nodes.
  fixed_k: drafts this many tokens per round whatever k is asked (None: the caller's k).
  feature_layers: target layers whose outputs it reads, concatenated (EAGLE-3 style);
    None: the last hidden state.
  follows_verified: its state follows the verified tokens whatever was drafted, so
    another proposal (prompt lookup) may replace its own in a round.
  needs_tree: its settings only apply to a given tree (a lookup chain's length).
  mesh_split: its `params` and `cfg` (a `ModelConfig`) are a decoder that a mesh splits
    over its "model" axis as the target's (`parallel.place_params`); every other
    drafter's arrays are replicated on each device of the mesh (`parallel.onto_mesh`).
  """
  tree_kinds: tuple = ()
  owns_pass: bool = False
  round_slots: Optional[int] = None
  verified_nodes: Optional[int] = None
  fixed_k: Optional[int] = None
  feature_layers: Optional[tuple] = None
  follows_verified: bool = False
  needs_tree: bool = False
  mesh_split: bool = False


class SpecError(ValueError):
  """A drafter kind's spec argument is malformed (the API names the whole spec)."""


@runtime_checkable
class Drafter(Protocol):
  """What every drafter has (see the module docstring); `ChainDrafter`, `TreeDrafter` and
  `PassDrafter` add the method of each round kind that `caps` declares."""
  caps: Capabilities
  name: str

  def init(self, target_params: Any, prompt: jax.Array, prompt_lens: jax.Array, max_len: int,
           hidden: jax.Array) -> Any:
    """The drafter's state after the prompt [B, P] (hidden [B, P, D]: target features).
    Every leaf has the rows leading: the loop prefills a batch in row groups and joins
    their states on that axis (`loop.prefill`)."""

  def commit(self, state: Any, n_tokens: jax.Array, hidden: jax.Array) -> Any:
    """The state once n_tokens [B] are final (hidden [B, k+1, D]: the verify pass)."""

  def passes_per_round(self, k: int) -> int:
    """Forward passes of its own that one proposal of k drafts costs."""

  def validate(self, target_cfg, k: int, tree, limit: int, used: int) -> None:
    """Raises ValueError (one line) where this drafter cannot run these settings."""

  def round_tree(self, tree):
    """The tree a round verifies given the caller's (its own candidates added)."""


@runtime_checkable
class ChainDrafter(Drafter, Protocol):
  def propose(self, state: Any, ctx: "DraftContext",
              key: jax.Array) -> tuple[jax.Array, jax.Array, Any, KVCache]:
    """(drafts [B, k], q [B, k, V] they were sampled from, state, target cache)."""


@runtime_checkable
class TreeDrafter(Drafter, Protocol):
  def propose_tree(self, state: Any, ctx: "DraftContext", tree, key: jax.Array) -> tuple:
    """(a `tree.TreeDraft` of the round's tree, state, target cache); caps.tree_kinds."""


@runtime_checkable
class PassDrafter(Drafter, Protocol):
  def round(self, target, state: Any, ctx: "DraftContext", draft_key: jax.Array,
            verify_key: jax.Array) -> tuple:
    """Drafts, runs the target's pass and verifies: `rounds.RoundOut`'s fields; caps.owns_pass."""


class DrafterBase:
  """Defaults for the optional parts of the contract; every drafter kind inherits them."""
  caps = Capabilities()

  def validate(self, target_cfg, k: int, tree, limit: int, used: int) -> None:
    del target_cfg, k, tree, limit, used

  def round_tree(self, tree):
    return tree


@flax.struct.dataclass
class NoDrafter(DrafterBase):
  """k = 0: the target decodes alone, one token per round."""
  name = "none"

  def init(self, target_params, prompt, prompt_lens, max_len, hidden) -> tuple:
    return ()

  def propose(self, state, ctx: "DraftContext", key) -> tuple:
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
  sampling: sampling_lib.Sampling  # a pytree node: the loop's numbers are traced leaves
  target_model: Any = None  # the interface object (default: a `Decoder` of the above)

  @property
  def target(self):
    if self.target_model is not None:
      return self.target_model
    return Decoder(params=self.target_params, cfg=self.target_cfg)


def rows_slice(tokens: jax.Array, starts: jax.Array, size: int) -> jax.Array:
  """tokens[b, starts[b] : starts[b] + size] for every row -> [B, size, ...]."""
  return jax.vmap(lambda row, s: jax.lax.dynamic_slice_in_dim(row, s, size))(tokens, starts)


def last_token(ctx: DraftContext) -> jax.Array:
  """[B] each row's last final token (a tree's root)."""
  return jnp.take_along_axis(ctx.tokens, (ctx.n_tokens - 1)[:, None], axis=1)[:, 0]


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
