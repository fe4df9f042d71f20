"""DFlash (block diffusion) drafts: one pass predicts a whole block of tokens.

Axes: B batch, T context positions, A anchors, N block size, S cache slots, L aux layers,
D width, K kv heads, E head dim, V target vocabulary, Vd draft vocabulary.

As vllm-project/speculators defines it (`speculators.models.dflash`): a small Qwen3-style
transformer whose input is a block of N tokens at positions a .. a + N - 1: the anchor
(the last final token, at position a) and N - 1 copies of `mask_token_id`. Every draft
layer attends, besides the block itself (bidirectionally), to the *context*: the target's
aux hidden states at positions < a (layers `aux_layer_ids`, concatenated [.., L*D]),
projected once, c = hidden_norm(fc(h)), and turned into that layer's keys and values
(k_norm(k_proj(c)) with the rotary embedding of the context position, v_proj(c)); the
context never passes through the draft's blocks. The block's final states go through
the draft's norm and lm_head (a draft vocabulary of Vd ids, d2t/t2d, or the target's
head). Slot i of the block predicts the token at position a + i (a + i + 1 with
`sample_from_anchor`), so one pass gives N - 1 (N) drafts, each conditioned on the
context only.

Aux layer ids are speculators' (and vLLM's): id i is the input of target layer i, i.e.
Hugging Face's hidden_states[i] (0 the embeddings); specjax collects layer *outputs*,
so the drafter reads target layers i - 1 (`feature_layers`). Sliding-window draft layers
(`windows`) see the context within W positions of the anchor and the block causally
unless `window_non_causal`.

Params: the Llama layout of `specjax.models.params` for the draft layers
("layers", "final_norm", "lm_head" {"kernel": [D, Vd]}) plus

    "embed": [V, D]            the target's embeddings (shared, frozen)
    "fc": {"kernel": [L*D, D]}, "hidden_norm": {"scale": [D]}
    "draft_ids": [Vd] int32    target ids of the draft vocabulary (absent: Vd = V)

Inference keeps the context's keys and values in a `KVCache` (`write_context`, one
entry per final position) and runs the block over it (`block_logits`); training and
parity tests use the cache-free `anchored_logits`.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from specjax.models import draft_vocab
from specjax.models.cache import KVCache, write_keys, write_values
from specjax.models.config import ModelConfig
from specjax.models.transformer import attend, embed, mlp, norm, project_qkv


@dataclasses.dataclass(frozen=True)
class DFlashConfig:
  """Static config of a DFlash draft.

  layers: the draft blocks' config (llama family, qk_norm; vocab_size = the target's).
  block_size: N, the positions of one pass (anchor included).
  aux_layer_ids: speculators' target layer ids (Hugging Face hidden_states indices).
  mask_token_id: the token filling the block after the anchor.
  sample_from_anchor: slot 0 predicts too (N drafts instead of N - 1).
  windows: per draft layer, 0 (full attention) or its sliding window W.
  window_non_causal: sliding layers attend within the block bidirectionally too.
  draft_vocab_size: Vd (= layers.vocab_size without a draft vocabulary).
  """
  layers: ModelConfig
  block_size: int
  aux_layer_ids: tuple
  mask_token_id: int
  sample_from_anchor: bool = False
  windows: tuple = ()
  window_non_causal: bool = False
  draft_vocab_size: int = 0

  @property
  def feature_layers(self) -> tuple:
    """The target layers (specjax indices: layer outputs) whose outputs are the context."""
    return tuple(int(i) - 1 for i in self.aux_layer_ids)

  @property
  def first_slot(self) -> int:
    """The block slot of the first draft."""
    return 0 if self.sample_from_anchor else 1

  @property
  def n_drafts(self) -> int:
    """Drafts one pass proposes (speculators' speculative_tokens)."""
    return self.block_size - self.first_slot

  def window(self, i: int) -> int:
    return self.windows[i] if self.windows else 0


def check_target(cfg: DFlashConfig, target_cfg: ModelConfig, name: str = "dflash") -> None:
  """One ValueError line where the draft cannot run on this target."""
  lc = cfg.layers
  if lc.d_model != target_cfg.d_model:
    raise ValueError(f"The DFlash draft {name!r} has hidden size {lc.d_model} but the target "
                     f"has {target_cfg.d_model}: it was built for another target; use the "
                     "draft made for this one.")
  if lc.vocab_size != target_cfg.vocab_size:
    raise ValueError(f"The DFlash draft {name!r} is for a vocabulary of {lc.vocab_size} ids but "
                     f"the target has {target_cfg.vocab_size}: it was built for another target "
                     "(or tokenizer); use the draft made for this one.")
  ids = [int(i) for i in cfg.aux_layer_ids]
  if not ids or len(set(ids)) != len(ids) or min(ids) < 0 or max(ids) > target_cfg.n_layers:
    raise ValueError(f"The DFlash draft {name!r} reads target layer ids {ids} but the target has "
                     f"{target_cfg.n_layers} layers (distinct ids in [0, {target_cfg.n_layers}]): "
                     "it was built for a deeper target; use the draft made for this one.")
  if not 0 <= cfg.mask_token_id < lc.vocab_size:
    raise ValueError(f"The DFlash draft {name!r} has mask_token_id {cfg.mask_token_id}, outside "
                     f"the vocabulary [0, {lc.vocab_size}): set the mask token the draft was "
                     "trained with.")
  if cfg.n_drafts < 1:
    raise ValueError(f"The DFlash draft {name!r} has block_size {cfg.block_size}: a block must "
                     "hold the anchor and at least one mask position (block_size >= 2).")


def context(params: dict, cfg: DFlashConfig, feats: jax.Array) -> jax.Array:
  """Target aux features [B, T, L*D] -> the draft's context states c [B, T, D]."""
  x = feats.astype(params["fc"]["kernel"].dtype) @ params["fc"]["kernel"]
  return norm(params["hidden_norm"], cfg.layers, x)


def _context_kv(params: dict, cfg: DFlashConfig, feats: jax.Array, positions: jax.Array):
  """Per draft layer, the context's keys and values [B, T, K, E] at `positions` [B, T]."""
  c = context(params, cfg, feats)
  out = []
  for p in params["layers"]:
    _, k, v = project_qkv(p["attn"], cfg.layers, c, positions)
    out.append((k, v))
  return out


def write_context(params: dict, cfg: DFlashConfig, cache: KVCache, feats: jax.Array,
                  starts: jax.Array) -> KVCache:
  """Writes the context entries of feats [B, T, L*D] (positions starts[b] + 0..T-1) into
  the cache's slots from starts[b]; lengths are left to the caller."""
  positions = starts[:, None] + jnp.arange(feats.shape[1], dtype=jnp.int32)[None]
  kv = _context_kv(params, cfg, feats, positions)
  return cache.replace(k=tuple(write_keys(kb, k, starts) for kb, (k, _) in zip(cache.k, kv)),
                       v=tuple(write_values(vb, v, starts) for vb, (_, v) in zip(cache.v, kv)))


def draft_head(params: dict, cfg: DFlashConfig, x: jax.Array) -> jax.Array:
  """Block states [..., D] -> float32 logits over the draft vocabulary [..., Vd]."""
  return (norm(params["final_norm"], cfg.layers, x) @ params["lm_head"]["kernel"]).astype(
      jnp.float32)


def to_target(params: dict, cfg: DFlashConfig, logits: jax.Array) -> jax.Array:
  """Draft-vocabulary logits [..., Vd] -> [..., V], ids outside it at the float32 minimum."""
  if "draft_ids" not in params:
    return logits
  return draft_vocab.to_target_logits(logits, params["draft_ids"], cfg.layers.vocab_size)


def block_tokens(cfg: DFlashConfig, anchor: jax.Array) -> jax.Array:
  """anchor [...] -> the block [..., N]: the anchor, then mask tokens."""
  mask = jnp.full(anchor.shape + (cfg.block_size - 1,), cfg.mask_token_id, jnp.int32)
  return jnp.concatenate([anchor[..., None].astype(jnp.int32), mask], -1)


def _layers(params: dict, cfg: DFlashConfig, x: jax.Array, positions: jax.Array, kv_of, mask_of):
  """The draft blocks over the block's states x [B, N, D]. kv_of(i, k, v) -> (keys, values,
  cache_layout): layer i's context and block entries; mask_of(i) -> [B, N, S]."""
  for i, p in enumerate(params["layers"]):
    q, k, v = project_qkv(p["attn"], cfg.layers, norm(p["attn_norm"], cfg.layers, x), positions)
    keys, values, cache_layout = kv_of(i, k, v)
    x = x + attend(p["attn"], cfg.layers, q, keys, values, mask_of(i), cache_layout=cache_layout)
    x = x + mlp(p["mlp"], cfg.layers, norm(p["mlp_norm"], cfg.layers, x))
  return x


def _block_mask(cfg: DFlashConfig, i: int, kv_pos: jax.Array, is_ctx: jax.Array,
                anchor: jax.Array, n: int) -> jax.Array:
  """Layer i's mask [B, N, S]: context slots before the anchor (within a sliding window),
  block slots (causal on sliding layers unless window_non_causal). kv_pos [B, S] positions,
  is_ctx [B, S], anchor [B]."""
  w = cfg.window(i)
  ctx = is_ctx & (kv_pos < anchor[:, None])
  if w:
    ctx = ctx & (kv_pos >= anchor[:, None] - w)
  blk = ~is_ctx & (kv_pos >= anchor[:, None]) & (kv_pos < anchor[:, None] + n)
  q_pos = anchor[:, None] + jnp.arange(n)[None]  # [B, N]
  blk = jnp.broadcast_to(blk[:, None], (blk.shape[0], n, blk.shape[1]))
  if w and not cfg.window_non_causal:
    blk = blk & (kv_pos[:, None] <= q_pos[:, :, None])
  return ctx[:, None] | blk


def block_logits(params: dict, cfg: DFlashConfig, cache: KVCache, anchor: jax.Array) -> jax.Array:
  """One draft pass: the block after anchor [B] at positions cache.lengths + 0..N-1 over
  the cached context (slots < lengths) -> float32 logits [B, N, V] on the target's
  vocabulary (ids outside a draft vocabulary at the float32 minimum)."""
  n, a = cfg.block_size, cache.lengths
  positions = a[:, None] + jnp.arange(n, dtype=jnp.int32)[None]  # [B, N]
  x = embed(params, cfg.layers, block_tokens(cfg, anchor), positions)
  slots = jnp.broadcast_to(jnp.arange(cache.max_len)[None], (a.shape[0], cache.max_len))
  is_ctx = slots < a[:, None]  # slots from the anchor on hold the block (written below)
  kv_of = lambda i, k, v: (write_keys(cache.k[i], k, a), write_values(cache.v[i], v, a), True)
  mask_of = lambda i: _block_mask(cfg, i, slots, is_ctx, a, n)
  x = _layers(params, cfg, x, positions, kv_of, mask_of)
  return to_target(params, cfg, draft_head(params, cfg, x))


def anchored_logits(params: dict, cfg: DFlashConfig, feats: jax.Array, tokens: jax.Array,
                    anchors: jax.Array, target_vocab: bool = False) -> jax.Array:
  """Cache-free: for each anchor a (context = positions < a of one sequence), the block
  [tokens[a], mask, ...] at positions a .. a + N - 1 -> logits [B, A, N, Vd] (draft
  vocabulary; [.., V] with target_vocab). feats [B, T, L*D], tokens [B, T], anchors [A]
  (the same for every row) or [B, A] (each row its own: training samples them)
  (what speculators' `_backbone_forward` computes per anchor; training and parity)."""
  b, t = tokens.shape
  anchors = jnp.broadcast_to(anchors.astype(jnp.int32), (b, anchors.shape[-1]))  # [B, A]
  n, na = cfg.block_size, anchors.shape[1]
  pos_t = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  ctx_kv = _context_kv(params, cfg, feats, pos_t)  # L x ([B, T, K, E], [B, T, K, E])
  rep = lambda z: jnp.repeat(z, na, axis=0)  # [B, ...] -> [B*A, ...] (row-major: b, then a)
  anchor = anchors.reshape(-1)  # [B*A]
  positions = anchor[:, None] + jnp.arange(n, dtype=jnp.int32)[None]  # [B*A, N]
  first = jnp.take_along_axis(tokens, anchors, 1).reshape(-1)  # [B*A]
  x = embed(params, cfg.layers, block_tokens(cfg, first), positions)
  kv_pos = jnp.concatenate([rep(pos_t), positions], 1)  # [B*A, T + N]
  is_ctx = jnp.concatenate([jnp.ones((b * na, t), bool), jnp.zeros((b * na, n), bool)], 1)

  def kv_of(i, k, v):
    ck, cv = ctx_kv[i]
    return jnp.concatenate([rep(ck), k], 1), jnp.concatenate([rep(cv), v], 1), False

  x = _layers(params, cfg, x, positions, kv_of,
              lambda i: _block_mask(cfg, i, kv_pos, is_ctx, anchor, n))
  logits = draft_head(params, cfg, x)
  if target_vocab:
    logits = to_target(params, cfg, logits)
  return logits.reshape(b, na, n, -1)


def init_params(cfg: DFlashConfig, key: jax.Array, embed_table: Optional[jax.Array] = None,
                std: float = 0.3) -> dict:
  """Random DFlash params (tests; training's initialisation) over the target's embeddings
  when given (else random ones)."""
  from specjax.models.params import init_params as init_layers
  lc = cfg.layers
  k1, k2, k3 = jax.random.split(key, 3)
  # the layers' stream; a random embedding only where none is given, no head (lm_head below)
  base = init_layers(dataclasses.replace(lc, tie_embeddings=True, vocab_size=(
      lc.vocab_size if embed_table is None else 1)), k1, std=std)
  vd = cfg.draft_vocab_size or lc.vocab_size
  n_aux = len(cfg.aux_layer_ids)
  params = {"embed": base["embed"] if embed_table is None else embed_table,
            "layers": base["layers"], "final_norm": base["final_norm"],
            "fc": {"kernel": std * jax.random.normal(k2, (n_aux * lc.d_model, lc.d_model)) /
                   jnp.sqrt(n_aux)},
            "hidden_norm": {"scale": jnp.ones((lc.d_model,))},
            "lm_head": {"kernel": std * jax.random.normal(k3, (lc.d_model, vd))}}
  return params
