"""P-EAGLE (parallel EAGLE) drafts: EAGLE-3 with mask inputs, all k drafts in one pass.

Axes: B batch, T positions, M elements of a COD batch, S cache slots, k drafts,
A aux layers, Dt target width, D draft width, V / Vd vocabularies.

As vllm-project/speculators defines it (`speculators.models.peagle`): an EAGLE-3 draft
(`specjax.models.eagle3`, same params and config) plus a learned `mask_hidden` [A*Dt]
and a `mask_token_id`. Element (anchor j, depth 0) is EAGLE-3's own input at position j:
the target's aux states g_j and token j + 1 (speculators' `shift_batch`), predicting
token j + 2. Element (j, depth d >= 1) reads mask_hidden (through the same fuse: norms
and fc) and the mask token at position j + d and predicts token j + d + 2. An element
attends to the depth-0 elements of anchors <= its own and to its own rollout's elements
of depth <= its own (speculators' `create_peagle_mask_mod`).

At inference with n final tokens the anchor is j = n - 2 (the last position whose target
states are known): depth 0 predicts x_n = d_1, depth d predicts d_{d+1}; k drafts from
one causal pass over [the depth-0 entries not yet cached .., mask x (k - 1)], every q
conditioned on the context only (as DFlash: `decoding/drafters/dflash.py` argues why a
chain and a tree over such drafts verify exactly).

Params: `specjax.models.eagle3`'s, plus "mask_hidden": [A*Dt].
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.models import eagle3
from specjax.models.cache import KVCache
from specjax.models.eagle3 import Eagle3Config


@dataclasses.dataclass(frozen=True)
class PEagleConfig:
  """eagle3: the EAGLE-3 draft's config; mask_token_id: the mask input token;
  n_depths: drafts one pass was trained for (speculators' speculative_tokens)."""
  eagle3: Eagle3Config
  mask_token_id: int
  n_depths: int

  @property
  def feature_layers(self) -> tuple:
    return self.eagle3.feature_layers


def check_target(cfg: PEagleConfig, target_cfg, name: str = "peagle") -> None:
  """One ValueError line where the draft cannot run on this target."""
  e = cfg.eagle3
  if e.vocab_size != target_cfg.vocab_size or e.target_d_model != target_cfg.d_model:
    raise ValueError(f"The P-EAGLE draft {name!r} was made for a target of vocabulary "
                     f"{e.vocab_size} and width {e.target_d_model}; this target has "
                     f"{target_cfg.vocab_size} and {target_cfg.d_model}. Use its own target.")
  ids = list(e.aux_layers)
  if not ids or min(ids) < 0 or max(ids) > target_cfg.n_layers:
    raise ValueError(f"The P-EAGLE draft {name!r} reads aux layers {ids}, beyond this target's "
                     f"{target_cfg.n_layers} layers (ids in [0, {target_cfg.n_layers}]). Use its "
                     "own target.")
  if not 0 <= cfg.mask_token_id < e.vocab_size:
    raise ValueError(f"The P-EAGLE draft {name!r} has mask_token_id {cfg.mask_token_id}, outside "
                     f"the vocabulary [0, {e.vocab_size}): set the mask token it was trained with.")
  if cfg.n_depths < 1:
    raise ValueError(f"The P-EAGLE draft {name!r} has {cfg.n_depths} depths; it needs >= 1.")


def mask_fused(params: dict, cfg: PEagleConfig) -> jax.Array:
  """[D] mask_hidden through the draft's fuse (norms and fc)."""
  return eagle3.fuse(params, cfg.eagle3, params["mask_hidden"][None, None])[0, 0]


def parallel_pass(params: dict, cfg: PEagleConfig, cache: KVCache, g: jax.Array,
                  tokens: jax.Array, last: jax.Array, k: int) -> tuple:
  """One pass: g [B, C, D] fused target states and tokens [B, C] (token j + 1) of the C
  positions from cache.lengths on, of which those up to `last` [B] (= n - 2) are final,
  then k - 1 mask elements at positions last + 1 .. last + k - 1. Returns (logits
  [B, k, V] of d_1..d_k, the cache holding the C + k - 1 entries written; the caller keeps
  those below last + 1)."""
  b, c = tokens.shape
  start = cache.lengths
  mask_g = jnp.broadcast_to(mask_fused(params, cfg).astype(g.dtype), (b, k - 1, g.shape[-1]))
  x = jnp.concatenate([g, mask_g], 1)  # [B, C + k - 1, D]
  toks = jnp.concatenate([tokens, jnp.full((b, k - 1), cfg.mask_token_id, tokens.dtype)], 1)
  pos_c = start[:, None] + jnp.arange(c)[None]
  pos_m = last[:, None] + 1 + jnp.arange(k - 1)[None]
  positions = jnp.concatenate([pos_c, pos_m], 1)  # [B, C + k - 1]
  slots = jnp.arange(cache.max_len)[None, None]  # [1, 1, S]
  q_slot = (start[:, None] + jnp.arange(c + k - 1)[None])[:, :, None]  # [B, C+k-1, 1]
  final_end = (last + 1)[:, None, None]  # slots < last + 1 hold the final depth-0 entries
  causal = slots <= q_slot
  is_mask = (jnp.arange(c + k - 1) >= c)[None, :, None]
  mask_slots = slots >= (start + c)[:, None, None]  # the mask elements' slots
  mask = jnp.where(is_mask, (slots < final_end) | (mask_slots & causal), causal)
  h, cache = eagle3.forward(params, cfg.eagle3, x, toks, cache, positions=positions, mask=mask)
  h0 = jnp.take_along_axis(h, (last - start)[:, None, None], axis=1)  # [B, 1, D] depth 0
  h = jnp.concatenate([h0, h[:, c:]], 1)  # [B, k, D]
  return eagle3.logits(params, cfg.eagle3, h), cache


def cod_logits(params: dict, cfg: PEagleConfig, aux: jax.Array, tokens: jax.Array,
               anchor: jax.Array, depth: jax.Array) -> jax.Array:
  """Cache-free, as speculators trains: aux [1, T, A*Dt] (g_j), tokens [1, T] (token j + 1),
  elements (anchor [M], depth [M]) -> draft-vocabulary logits [1, M, Vd]."""
  is0 = depth == 0
  pos = anchor + depth
  toks = jnp.where(is0, tokens[0, pos], cfg.mask_token_id)[None]  # [1, M]
  hid = jnp.where(is0[:, None], aux[0, pos], params["mask_hidden"][None])[None]  # [1, M, A*Dt]
  same = anchor[:, None] == anchor[None]
  mask = ((depth[None] == 0) & (anchor[:, None] >= anchor[None])) | (same & (depth[:, None] >=
                                                                            depth[None]))
  h, _ = eagle3.forward(params, cfg.eagle3, eagle3.fuse(params, cfg.eagle3, hid), toks,
                        positions=pos[None], mask=mask[None])
  return eagle3.draft_logits(params, cfg.eagle3, h)
