"""A draft vocabulary: a draft head that scores a subset of the target's tokens.

Axes: Vd draft vocabulary, V target vocabulary.

As vllm-project/speculators and the EAGLE-3 authors define it, a draft with its own,
smaller vocabulary carries two buffers:

    d2t: [Vd] int offsets, target_id = draft_id + d2t[draft_id]
    t2d: [V] bool, True where a target id is in the draft vocabulary

(speculators' `train/vocab_mapping.build_vocab_mappings_from_distribution`: the Vd most
frequent target ids, sorted, so d2t is non-decreasing and non-negative). A draft's
logits over Vd map onto the target's vocabulary with every other id at the float32
minimum: after the one warp (`specjax.sampling.warp`) those ids have q = 0, so the
acceptance rule min(1, p/q) and the residual norm(max(0, p - q)) stay exact.

Host checks (`check_vocab`) run on concrete arrays where a draft is loaded or built, and
raise one clear ValueError line; the mapping functions are pure and jit-compatible.
"""
from __future__ import annotations

from typing import Mapping, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

NEG = float(np.finfo(np.float32).min)  # the logit of an id outside the draft vocabulary


def target_ids(d2t) -> np.ndarray:
  """[Vd] int32 target ids of the draft ids (draft_id + d2t[draft_id]), on the host."""
  d2t = np.asarray(d2t).astype(np.int64)
  return (np.arange(d2t.shape[0]) + d2t).astype(np.int32)


def check_vocab(d2t, t2d, target_vocab_size: int, draft_vocab_size: Optional[int] = None,
                what: str = "draft") -> np.ndarray:
  """Validates a draft vocabulary against the target's; returns its target ids [Vd] int32.

  Raises one ValueError line for: t2d of the wrong length or not a mask, d2t of the
  wrong length, a mapped id outside [0, V), a target id mapped twice, or d2t and t2d
  that disagree (t2d must be True exactly at the mapped ids)."""
  d2t, t2d = np.asarray(d2t), np.asarray(t2d)
  if d2t.ndim != 1 or not np.issubdtype(d2t.dtype, np.integer):
    raise ValueError(f"The {what}'s d2t must be a 1-D integer array of offsets "
                     f"(target_id = draft_id + d2t[draft_id]); got {d2t.dtype} {d2t.shape}.")
  if draft_vocab_size is not None and d2t.shape[0] != draft_vocab_size:
    raise ValueError(f"The {what}'s d2t has {d2t.shape[0]} entries but its draft vocabulary "
                     f"has {draft_vocab_size} ids: the checkpoint's d2t and head disagree.")
  if t2d.ndim != 1 or t2d.shape[0] != target_vocab_size:
    raise ValueError(f"The {what}'s t2d has shape {t2d.shape} but the target's vocabulary has "
                     f"{target_vocab_size} ids: this draft was built for another target "
                     "(or another tokenizer); use the draft made for this target.")
  if t2d.dtype != np.bool_ and not np.isin(t2d, (0, 1)).all():
    raise ValueError(f"The {what}'s t2d must be a boolean mask over the target vocabulary; "
                     f"it holds values other than 0/1 ({t2d.dtype}).")
  ids = np.arange(d2t.shape[0], dtype=np.int64) + d2t.astype(np.int64)
  bad = np.nonzero((ids < 0) | (ids >= target_vocab_size))[0]
  if bad.size:
    raise ValueError(f"The {what}'s d2t maps draft id {int(bad[0])} to target id "
                     f"{int(ids[bad[0]])}, outside the target's vocabulary [0, "
                     f"{target_vocab_size}): d2t is malformed or made for another target.")
  if np.unique(ids).size != ids.size:
    raise ValueError(f"The {what}'s d2t maps {ids.size - np.unique(ids).size} draft ids onto "
                     "target ids already taken: each target id may appear once.")
  mask = t2d.astype(bool)
  if mask.sum() != ids.size or not mask[ids].all():
    raise ValueError(f"The {what}'s d2t and t2d disagree: t2d marks {int(mask.sum())} target "
                     f"ids, d2t maps {ids.size} ({int((~mask[ids]).sum())} of them unmarked); "
                     "they must name the same ids.")
  return ids.astype(np.int32)


def to_target_logits(draft_logits: jax.Array, ids: jax.Array, vocab_size: int) -> jax.Array:
  """draft_logits [..., Vd] -> float32 logits [..., V]: id ids[j] gets draft logit j,
  every id outside the draft vocabulary the float32 minimum (probability 0 after warp)."""
  full = jnp.full(draft_logits.shape[:-1] + (vocab_size,), NEG, jnp.float32)
  return full.at[..., ids].set(draft_logits.astype(jnp.float32))


def to_target_probs(draft_probs: jax.Array, ids: jax.Array, vocab_size: int) -> jax.Array:
  """draft_probs [..., Vd] -> probabilities [..., V], zero outside the draft vocabulary."""
  full = jnp.zeros(draft_probs.shape[:-1] + (vocab_size,), draft_probs.dtype)
  return full.at[..., ids].set(draft_probs)


def vocab_from_frequencies(counts: Union[Mapping[int, int], np.ndarray], draft_vocab_size: int,
                           target_vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
  """(d2t [Vd] int64, t2d [V] bool) of the draft_vocab_size most frequent target ids.

  counts: {target id: count} or a [V] array of counts. As speculators builds it: ids by
  count descending, ties by id; fewer than Vd ids seen -> the lowest unseen ids fill
  up; the chosen ids sorted."""
  if not 0 < draft_vocab_size <= target_vocab_size:
    raise ValueError(f"draft_vocab_size must be in [1, {target_vocab_size}] (the target's "
                     f"vocabulary), got {draft_vocab_size}.")
  if not isinstance(counts, Mapping):
    arr = np.asarray(counts)
    counts = {int(i): int(arr[i]) for i in np.nonzero(arr)[0]}
  bad = [i for i in counts if not 0 <= int(i) < target_vocab_size]
  if bad:
    raise ValueError(f"Token frequencies name id {bad[0]}, outside the target's vocabulary "
                     f"[0, {target_vocab_size}).")
  chosen = sorted(counts, key=lambda i: (-counts[i], int(i)))[:draft_vocab_size]
  chosen = [int(i) for i in chosen]
  taken = set(chosen)
  fill = (i for i in range(target_vocab_size) if i not in taken)
  while len(chosen) < draft_vocab_size:
    chosen.append(next(fill))
  ids = np.sort(np.asarray(chosen, np.int64))
  t2d = np.zeros((target_vocab_size,), bool)
  t2d[ids] = True
  return ids - np.arange(draft_vocab_size, dtype=np.int64), t2d
