"""Compiled loops kept on disk whole (XLA's executable and its argument structure), so a
later process with the same signature skips tracing and lowering as well as compiling.

jax's persistent compilation cache (`specjax.compile_cache`) saves XLA's compile, but each
new process still traces and lowers the loop, and the model's layers are unrolled there:
about 10% of a first process's compile for the 30-layer embedded target. A stored loop is
keyed on its signature written out (`compiled.signature`: the arguments' pytree with its
static settings, shapes, dtypes, shardings; the static settings) and on what makes one
signature lower differently: specjax's source, jax's version, the backend and its devices,
and the JAX_* / XLA_* environment. A signature whose text is not faithful (an object shown
by address, a shortened array) or that spans several devices is not stored, and any
failure to write or read a file falls back to compiling.

On wherever jax's persistent cache is (`<its directory>/specjax_loops/`); nothing here
when it is off (the tests keep it off).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import pickle
import re
import tempfile
from typing import Optional

import jax
from jax.experimental import serialize_executable

SUBDIR = "specjax_loops"
_UNFAITHFUL = re.compile(r" at 0x[0-9a-f]+|\.\.\.")  # an address, numpy's shortened arrays
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def directory() -> Optional[str]:
  """Where loops are stored: beside jax's persistent cache, if it is on."""
  path = jax.config.jax_compilation_cache_dir
  if not (path and jax.config.jax_enable_compilation_cache):
    return None
  return os.path.join(path, SUBDIR)


@functools.lru_cache(maxsize=1)
def _environment() -> str:
  """What besides a signature decides the program: the source, versions, devices, flags."""
  source = hashlib.sha256()
  for root, _, files in sorted(os.walk(_PACKAGE)):
    for name in sorted(f for f in files if f.endswith(".py")):
      with open(os.path.join(root, name), "rb") as f:
        source.update(name.encode() + f.read())
  devices = jax.devices()
  flags = sorted((n, v) for n, v in os.environ.items() if n.startswith(("JAX_", "XLA_")))
  try:
    jaxlib = importlib.metadata.version("jaxlib")
  except importlib.metadata.PackageNotFoundError:
    jaxlib = ""
  return repr((source.hexdigest(), jax.__version__, jaxlib, devices[0].platform,
               [d.device_kind for d in devices], flags))


def key(signature_text: str) -> Optional[str]:
  """The file name for a signature, or None where its text cannot be trusted."""
  if _UNFAITHFUL.search(signature_text) or len(jax.devices()) > 1:
    return None
  return hashlib.sha256((signature_text + _environment()).encode()).hexdigest()


def load(name: str) -> Optional[dict]:
  """{program name: jax.stages.Compiled} stored under `name`, or None (absent, unreadable)."""
  folder = directory()
  path = None if folder is None else os.path.join(folder, name + ".pkl")
  if path is None or not os.path.exists(path):
    return None
  try:
    with open(path, "rb") as f:
      stored = pickle.load(f)
    return {n: serialize_executable.deserialize_and_load(*parts) for n, parts in stored.items()}
  except Exception:  # a truncated or stale file: compile instead, and replace it
    return None


def save(name: str, programs: dict) -> bool:
  """Stores {program name: jax.stages.Compiled}; False where it cannot (no directory, a
  program jax cannot serialise, a file that cannot be written)."""
  folder = directory()
  if folder is None:
    return False
  try:
    blob = pickle.dumps({n: serialize_executable.serialize(c) for n, c in programs.items()})
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, delete=False, suffix=".tmp") as f:
      f.write(blob)
    os.replace(f.name, os.path.join(folder, name + ".pkl"))  # readers never see half a file
    return True
  except Exception:
    return False
