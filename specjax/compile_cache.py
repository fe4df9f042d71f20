"""JAX's persistent compilation cache, on by default, so only a setting's first process
pays XLA's compile: later processes load the programs from disk.

Where: $SPECJAX_COMPILE_CACHE, default `<cache root>/xla` (`specjax.paths.cache_root()`:
$SPECJAX_CACHE or ~/.cache/specjax). Off: SPECJAX_COMPILE_CACHE=off (or 0, false, no).
What jax is told from outside wins: JAX_ENABLE_COMPILATION_CACHE=false in the environment
(the tests set it: tests/conftest.py) or jax's own cache settings keep theirs. Every
program is cached, however small or quick to compile (jax's defaults skip those under
1 s); the directory is bounded (8 GiB, least recently used entries evicted). A directory
that cannot be written is one warning line; decoding goes on uncached.

`enable()` sets this up once per process, lazily: the public `specjax.generate` and the
scripts call it; `specjax.decoding` never does.
"""
from __future__ import annotations

import logging
import os
import tempfile
from typing import Mapping, Optional

from specjax import paths

ENV = "SPECJAX_COMPILE_CACHE"
JAX_ENV = "JAX_ENABLE_COMPILATION_CACHE"
OFF = ("off", "0", "false", "no", "none")
# jax's thresholds for writing an entry, set to "everything" unless the environment sets
# them; and a size bound, which also makes jax lock the directory around each read and write
# (without one it writes entries in place, and a second process could read half a file).
THRESHOLDS = {"jax_persistent_cache_min_compile_time_secs": 0.0,
              "jax_persistent_cache_min_entry_size_bytes": -1,
              "jax_compilation_cache_max_size": 8 << 30}  # least recently used go first
_STATE: dict = {}  # "dir": the directory enable() chose (None: off), once decided
_log = logging.getLogger(__name__)


def _false(value: str) -> bool:
  return value.strip().lower() in OFF


def choose(environ: Mapping[str, str], jax_dir: Optional[str] = None,
           jax_enabled: bool = True) -> tuple[Optional[str], str]:
  """(the cache directory to use or None, why): from the environment and what jax was
  already told (its cache directory, its enable flag). Pure: `enable` acts on it."""
  if (jax_env := environ.get(JAX_ENV)) and _false(jax_env):
    return None, f"{JAX_ENV}={jax_env}"
  if not jax_enabled:  # jax reads that variable at import; a later update wins
    return None, "jax_enable_compilation_cache is off"
  if jax_dir:
    return jax_dir, "jax_compilation_cache_dir"
  own = environ.get(ENV, "").strip()
  if own and _false(own):
    return None, f"{ENV}={own}"
  if own:
    return os.path.abspath(os.path.expanduser(own)), ENV
  return os.path.join(paths.cache_root(), "xla"), "default"


def unwritable(path: str) -> Optional[str]:
  """Why files cannot be written in `path` (created if missing), or None if they can."""
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix=".probe"):
      pass
  except OSError as e:
    return e.strerror or str(e)
  return None


def enable() -> Optional[str]:
  """Turns the persistent cache on (once per process); the directory in use, or None."""
  if "dir" in _STATE:
    return _STATE["dir"]
  import jax
  path, why = choose(os.environ, jax.config.jax_compilation_cache_dir,
                     jax.config.jax_enable_compilation_cache)
  if path is not None and why != "jax_compilation_cache_dir":
    problem = unwritable(path)
    if problem:
      _log.warning("specjax: the compilation cache %s cannot be written (%s); compiling "
                   "without it (set %s to another directory, or to off)", path, problem, ENV)
      path = None
    else:
      for name, value in THRESHOLDS.items():
        if name.upper() not in os.environ:
          jax.config.update(name, value)
      jax.config.update("jax_compilation_cache_dir", path)
  _STATE["dir"] = path
  return path


def in_use() -> Optional[str]:
  """The directory `enable` chose (None: off, or `enable` not called in this process)."""
  return _STATE.get("dir")
