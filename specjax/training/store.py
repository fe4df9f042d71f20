"""Pools on disk: .npz files in the workdir, built once and reused (so a resumed run
trains on exactly the same rows), and the live width of padded rows.

Axes: B rows, L sequence length.
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np


def save_pool(path: str, pool: dict) -> None:
  tmp = path + ".tmp.npz"
  np.savez(tmp, **pool)
  os.replace(tmp, path)


def load_pool(path: str) -> dict:
  try:
    with np.load(path) as f:
      return {k: f[k] for k in f.files}
  except Exception as e:  # noqa: BLE001 - re-raised with the path
    raise ValueError(f"Data pool {path} is unreadable ({e}); delete it to regenerate it.") from e


def cached_pool(path: Optional[str], make) -> dict:
  """Loads the pool at `path` if it exists, else builds it with make() and saves it."""
  if path and os.path.exists(path):
    return load_pool(path)
  pool = make()
  if path:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_pool(path, pool)
  return pool



def trim(batch: dict, multiple: int = 64) -> dict:
  """Drops trailing all-padding columns, keeping a multiple of `multiple` (few shapes to
  compile) and at least the token after the last masked position."""
  if not multiple:
    return batch
  n = live_width(batch["mask"], multiple)
  return {k: v[:, :n] for k, v in batch.items()}


def live_width(mask: np.ndarray, multiple: int = 64) -> int:
  """Columns of [B, L] rows the losses read: through the token after the last masked
  position, rounded up to a multiple of `multiple` (at most L)."""
  cols = np.nonzero(mask.any(0))[0]
  n = int(cols[-1]) + 2 if len(cols) else 1
  return min(-(-n // multiple) * multiple, mask.shape[1])

