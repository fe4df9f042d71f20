"""Where specjax writes outside a workdir: one cache root for everything it builds.

`cache_root()` is $SPECJAX_CACHE, default ~/.cache/specjax (the tests point it at a
temporary directory). Materialized draft exports, pass-cost measurements and compiled
programs live under it. Imports nothing from specjax, so every layer may use it.
"""
from __future__ import annotations

import os

CACHE_ENV = "SPECJAX_CACHE"


def cache_root() -> str:
  """$SPECJAX_CACHE, default ~/.cache/specjax (read at each call: tests set it late)."""
  return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "specjax")
