"""The loop's two programs, compiled ahead of time once per signature, kept in a bounded
least-recently-used table so a long-lived process does not keep every program.

The signature holds shapes, dtypes, shardings and the static settings only: max_new_tokens,
the seed and the sampling numbers (`sampling.TracedSampling`) are traced arguments, so
calls that differ only in them reuse one program. What each call compiled (programs,
seconds in lower + compile, how many jax loaded from its persistent compilation cache) is
returned with the program and summed for the process (`compile_totals`). Where jax's
persistent cache is on, a new signature's loop is also stored whole (`program_store`), so
a later process loads it without tracing, lowering or compiling.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import re
import sys
import time
from typing import Any

import jax

from specjax.decoding import program_store
from specjax.decoding.loop import classes_of, prefill, rounds
from specjax.models import pass_options

MAX_PROGRAMS = 64  # compiled (prefill, rounds) pairs kept in one process
_COMPILED: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
_CACHE_HIT = "/jax/compilation_cache/cache_hits"  # jax.monitoring's event for a disk hit


@dataclasses.dataclass(frozen=True)
class CompileCount:
  """Programs built (lowered and compiled, or loaded from jax's persistent cache), the
  seconds spent in lower + compile, and how many of them came from the persistent cache."""
  programs: int = 0
  seconds: float = 0.0
  from_disk: int = 0

  def __add__(self, other: "CompileCount") -> "CompileCount":
    return CompileCount(self.programs + other.programs, self.seconds + other.seconds,
                        self.from_disk + other.from_disk)


_TOTALS = [CompileCount()]  # this process's sum over `compiled_loop` calls
_DISK_HITS = [0]  # persistent-cache hits seen by the listener below


def _count_disk_hits(event: str, **_) -> None:
  if event == _CACHE_HIT:
    _DISK_HITS[0] += 1


jax.monitoring.register_event_listener(_count_disk_hits)


def compile_totals() -> CompileCount:
  """What every `compiled_loop` call of this process compiled, summed."""
  return _TOTALS[0]


def resident_programs() -> int:
  """Compiled loops held in the in-process table now (at most `MAX_PROGRAMS`)."""
  return len(_COMPILED)


@dataclasses.dataclass(frozen=True)
class CompiledLoop:
  """The prefill (XLA's defaults: many rows per pass) and the rounds (`pass_options` for
  their B x (k + 1) rows)."""
  prefill: Any
  rounds: Any

  def timed(self, decoder, drafter, prompt, lens, max_new, key, sampling):
    """Runs both programs as `loop.run` does, each to completion: (final state, prefill
    seconds, total seconds). The closed form of a round's speed models the rounds alone."""
    start = time.perf_counter()
    state = jax.block_until_ready(
        self.prefill(decoder, drafter, prompt, lens, max_new, key, sampling))
    prefill_s = time.perf_counter() - start
    state = jax.block_until_ready(self.rounds(decoder, drafter, state, lens, max_new, sampling))
    return state, prefill_s, time.perf_counter() - start


def signature(args: tuple, statics: dict) -> tuple:
  """What a compiled loop is reused for: the args' tree with the classes of its nodes
  (`loop.classes_of`: equal treedefs may hold different classes), the leaves' shapes,
  dtypes and shardings, and the static settings."""
  leaves, treedef = jax.tree.flatten(args)
  return (treedef, classes_of(*args[:2]),
          tuple((x.shape, str(x.dtype), getattr(x, "sharding", None)) for x in leaves),
          tuple(sorted(statics.items())))  # rows follow from these


PREFILL_STATICS = ("eos_ids", "max_len", "target_cfg", "classes")  # what `loop.prefill` reads; not k or tree
_PREFILLS: "collections.OrderedDict[tuple, Any]" = collections.OrderedDict()


def _build(args: tuple, statics: dict, rows: int, fresh: bool = False) -> tuple[CompiledLoop, int]:
  """Lowers and compiles the rounds, and the prefill unless a loop for another k or tree
  already compiled it (jax reads its persistent cache where it is on): (loop, programs
  compiled)."""
  statics = dict(statics, classes=classes_of(*args[:2]))  # jit's own cache key, too
  pre_statics = {n: statics[n] for n in PREFILL_STATICS if n in statics}
  pre_sig = signature(args, pre_statics)
  pre, built = None if fresh else _PREFILLS.get(pre_sig), 1
  if pre is None:
    pre, built = prefill.lower(*args, **pre_statics).compile(), 2
    _PREFILLS[pre_sig] = pre
    while len(_PREFILLS) > MAX_PROGRAMS:
      _PREFILLS.popitem(last=False)
  decoder, drafter, _, lens, max_new, _, sampling = args
  lowered = rounds.lower(decoder, drafter, pre.out_info, lens, max_new, sampling,  # state avals
                         **{n: v for n, v in statics.items() if n != "max_len"})
  return CompiledLoop(prefill=pre, rounds=pass_options.compile_lowered(lowered, rows)), built


def _named(statics: dict) -> dict:
  """Static settings as text: specjax's own functions by module and name (its source is
  in the store's key); any other function keeps its address, so a loop with a caller's
  rule (which may change under the same name) is never stored."""
  own = lambda v: callable(v) and getattr(v, "__module__", "").startswith("specjax.")
  return {n: f"{v.__module__}.{v.__qualname__}" if own(v) else v for n, v in statics.items()}


@contextlib.contextmanager
def _disk_cache_off(off: bool):
  """jax's persistent compilation cache off for the block (when `off`), as it was after."""
  was = jax.config.jax_enable_compilation_cache
  if off:
    jax.config.update("jax_enable_compilation_cache", False)
  try:
    yield
  finally:
    jax.config.update("jax_enable_compilation_cache", was)


def compiled_loop(args: tuple, statics: dict, rows: int,
                  fresh: bool = False) -> tuple[CompiledLoop, CompileCount]:
  """(the loop compiled for `args` and `statics`, what was compiled now: nothing when the
  table had it; loaded whole when `program_store` had it). rows: of one round's target
  pass (batch x (k + 1) or tree slots). fresh: compile it again, reading neither table
  nor disk cache (the stored loop is then replaced)."""
  options = tuple(sorted(pass_options.few_row_options(rows).items()))  # probe compile: uncounted
  sig = (signature(args, statics), options)
  if sig in _COMPILED and not fresh:
    _COMPILED.move_to_end(sig)
    return _COMPILED[sig], CompileCount()
  hits, start = _DISK_HITS[0], time.perf_counter()
  name = program_store.key(repr((signature(args, _named(statics)), rows, options)))
  stored = None if name is None or fresh else program_store.load(name)
  if stored is not None:
    loop = CompiledLoop(**stored)
    count = CompileCount(programs=2, seconds=time.perf_counter() - start, from_disk=2)
  else:
    hits, start = _DISK_HITS[0], time.perf_counter()
    with _disk_cache_off(fresh):
      loop, built = _build(args, statics, rows, fresh)
    count = CompileCount(programs=built, seconds=time.perf_counter() - start,
                         from_disk=min(built, _DISK_HITS[0] - hits))
    if name is not None:
      program_store.save(name, {"prefill": loop.prefill, "rounds": loop.rounds})
  _TOTALS[0] = _TOTALS[0] + count
  _COMPILED[sig] = loop
  while len(_COMPILED) > MAX_PROGRAMS:
    _COMPILED.popitem(last=False)
  return loop, count


# A program loaded from a disk cache that lacks one of its functions (seen on XLA:CPU, a
# second run of the main job: experiments/parallel_drafting/README.md).
_BROKEN = re.compile(r"NOT_FOUND: Function \S+ not found")


def run(args: tuple, statics: dict, rows: int) -> tuple:
  """`compiled_loop`, then `CompiledLoop.timed`: (final state, prefill s, total s, what was
  compiled). A loop loaded from disk whose program fails with "NOT_FOUND: Function ... not
  found" is compiled again without the disk caches (one warning line) and run again."""
  loop, count = compiled_loop(args, statics, rows)
  try:
    return (*loop.timed(*args), count)
  except jax.errors.JaxRuntimeError as e:
    broken = _BROKEN.search(str(e))
    if not count.from_disk or not broken:
      raise
    print(f"specjax: warning: a compiled loop loaded from the disk cache failed "
          f"({broken.group(0)}); compiling it again without the cache "
          f"(SPECJAX_COMPILE_CACHE=off turns the cache off)", file=sys.stderr, flush=True)
  loop, again = compiled_loop(args, statics, rows, fresh=True)
  return (*loop.timed(*args), count + again)
