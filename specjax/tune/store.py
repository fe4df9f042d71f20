"""The cost store: measured pass costs as JSON files under `<cache root>/pass_costs`,
keyed on the machine, the model and what was measured, and on `COST_MODEL` (raise it
when what a pass costs changes in a way old tables would mislead).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform

import jax
import numpy as np

from specjax import paths

COST_MODEL = 3  # the version of what a stored cost means


def store_dir() -> str:
  return os.path.join(paths.cache_root(), "pass_costs")


@functools.lru_cache(maxsize=None)
def machine() -> str:
  """This host and its first device: costs measured elsewhere are not reused here."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
  except OSError:
    pass
  dev = jax.devices()[0]
  return f"{platform.node()}|{cpu}|{os.cpu_count()}|{dev.platform}|{dev.device_kind}"


def fingerprint(tree) -> str:
  """What identifies a drafter's weights by content (its class, static fields, every
  leaf's shape, dtype and a few values), so two drafts of one name are told apart."""
  leaves, treedef = jax.tree.flatten(tree)
  parts = [str(treedef)] + [f"{x.shape}{x.dtype}{float(np.asarray(x).ravel()[:64].astype(np.float64).sum())}"
                            for x in leaves if hasattr(x, "shape")]
  return hashlib.sha256("|".join(parts).encode()).hexdigest()[:20]


def key(*parts) -> str:
  parts = parts + (machine(), COST_MODEL)
  return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:20]


def get(name: str, k: str):
  """The JSON value stored at <store>/<name>-<k>.json, or None (missing or unreadable)."""
  path = os.path.join(store_dir(), f"{name}-{k}.json")
  try:
    with open(path) as f:
      return json.load(f)["value"]
  except (OSError, ValueError, KeyError):
    return None


def cached(name: str, k: str, make):
  """A JSON value stored at <store>/<name>-<k>.json (made and written when missing)."""
  value = get(name, k)
  if value is not None:
    return value
  value = make()
  put(name, k, value)
  return value


def put(name: str, k: str, value) -> None:
  """Writes (or replaces) the JSON value at <store>/<name>-<k>.json, atomically."""
  path = os.path.join(store_dir(), f"{name}-{k}.json")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f"{path}.{os.getpid()}.tmp"
  with open(tmp, "w") as f:
    json.dump({"machine": machine(), "value": value}, f)
  os.replace(tmp, path)
