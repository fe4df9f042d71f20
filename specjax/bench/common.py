"""Helpers shared by the curves and the benchmark: drafter lookup and merged stats."""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from specjax.decoding.stats import SpecStats
from specjax.errors import LoadError

SPEC_KINDS = ("ngram", "early_exit")


def is_spec_string(draft: str) -> bool:
  """True for drafter specs such as "ngram:3" or "early_exit:8" (no model to load)."""
  return draft.partition(":")[0] in SPEC_KINDS


def load_drafts(names, allow_hub: bool = False, target=None) -> tuple[dict, list]:
  """{label: drafter for generate} and [{"row", "note"}] for the ones skipped.

  Spec strings pass through; model sources are loaded once. "asset:DIR" loads a shipped
  draft asset with its reduced output head (`specjax.loading.asset.load_asset`, the
  embeddings taken from `target`), where the registry name of the same draft gives the
  full-vocabulary export. A source that is neither a registry name nor an existing
  path is skipped (no hub lookup) unless allow_hub.
  """
  from specjax.loading import load_model
  from specjax.loading import registry
  drafts, skipped = {}, []
  for name in names:
    if is_spec_string(name):
      drafts[name] = name
      continue
    if name.startswith("asset:"):
      try:
        from specjax.loading.asset import load_asset
        path = os.path.expanduser(name[len("asset:"):])
        if not os.path.isabs(path) and not os.path.exists(path):  # relative to the repo root
          path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
              os.path.abspath(__file__)))), path)
        drafts["asset:" + os.path.basename(os.path.normpath(path))] = load_asset(path, target=target)
      except Exception as e:  # noqa: BLE001 - a draft that fails to load only skips its row
        skipped.append({"row": name, "note": f"draft asset {name!r} failed to load: {e}"})
      continue
    if not allow_hub and name not in registry.REGISTRY and not os.path.exists(
        os.path.expanduser(name)):
      skipped.append({"row": name, "note": f"draft {name!r} is not registered in "
                      f"specjax.loading.registry (known: {registry.names()}) and is not a local "
                      "path; row skipped"})
      continue
    try:
      drafts[name] = load_model(name, target=target)
    except Exception as e:  # noqa: BLE001 - a draft that fails to load only skips its row
      skipped.append({"row": name, "note": f"draft {name!r} failed to load: {e}"})
  return drafts, skipped


def merge_stats(stats: list) -> SpecStats:
  """One SpecStats over several runs (rows concatenated, wall times summed)."""
  cat = lambda f: np.concatenate([np.asarray(getattr(s, f)) for s in stats], axis=0)
  return SpecStats(k=stats[0].k, new_tokens=cat("new_tokens"), target_passes=cat("target_passes"),
                   draft_passes=cat("draft_passes"), rounds=cat("rounds"), checked=cat("checked"),
                   accepted=cat("accepted"), wall_time_s=float(sum(s.wall_time_s for s in stats)),
                   compile_time_s=float(sum(s.compile_time_s for s in stats)))


def select_rows(stats: SpecStats, rows, wall_time_s: float = 0.0) -> SpecStats:
  """The counters of some rows of a (merged) run; wall_time_s 0 when not separable."""
  idx = np.asarray(list(rows), dtype=np.int64)
  pick = lambda f: np.asarray(getattr(stats, f))[idx]
  return SpecStats(k=stats.k, new_tokens=pick("new_tokens"), target_passes=pick("target_passes"),
                   draft_passes=pick("draft_passes"), rounds=pick("rounds"),
                   checked=pick("checked"), accepted=pick("accepted"), wall_time_s=wall_time_s)


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
  return float(a / b) if a is not None and b else None
