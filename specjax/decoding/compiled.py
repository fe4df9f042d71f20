"""The loop's two programs, compiled ahead of time once per signature, kept in a bounded
least-recently-used table so a long-lived process does not keep every program."""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any

import jax

from specjax.decoding.loop import prefill, rounds
from specjax.models import pass_options

MAX_PROGRAMS = 64  # compiled (prefill, rounds) pairs kept in one process
_COMPILED: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()


@dataclasses.dataclass(frozen=True)
class CompiledLoop:
  """The prefill (XLA's defaults: many rows per pass) and the rounds (`pass_options` for
  their B x (k + 1) rows)."""
  prefill: Any
  rounds: Any

  def timed(self, decoder, drafter, prompt, lens, max_new, key):
    """Runs both programs as `loop.run` does, each to completion: (final state, prefill
    seconds, total seconds). The closed form of a round's speed models the rounds alone."""
    start = time.perf_counter()
    state = jax.block_until_ready(self.prefill(decoder, drafter, prompt, lens, max_new, key))
    prefill_s = time.perf_counter() - start
    state = jax.block_until_ready(self.rounds(decoder, drafter, state, lens, max_new))
    return state, prefill_s, time.perf_counter() - start


def _node_types(treedef) -> tuple:
  """The classes of a treedef's nodes, nested as the tree is."""
  data = treedef.node_data()
  return (None if data is None else data[0],) + tuple(_node_types(c) for c in treedef.children())


def signature(args: tuple, statics: dict) -> tuple:
  """What a compiled loop is reused for: the args' tree with its node classes, the leaves'
  shapes, dtypes and shardings, and the static settings. The classes are listed on their
  own because two flax dataclasses with the same fields compare equal as treedefs (a
  drafter subclass that overrides `propose` would otherwise be served its parent's program
  whenever the two hashes met in the cache's table)."""
  leaves, treedef = jax.tree.flatten(args)
  return (treedef, _node_types(treedef),
          tuple((x.shape, str(x.dtype), getattr(x, "sharding", None)) for x in leaves),
          tuple(sorted(statics.items())))  # rows follow from these


def compiled_loop(args: tuple, statics: dict, rows: int) -> tuple[CompiledLoop, float]:
  """(the loop compiled for `args` and `statics`, seconds spent compiling it now: 0 when
  reused). rows: of one round's target pass (batch x (k + 1) or tree slots)."""
  sig = signature(args, statics)
  if sig in _COMPILED:
    _COMPILED.move_to_end(sig)
    return _COMPILED[sig], 0.0
  start = time.perf_counter()
  pre = prefill.lower(*args, **{n: v for n, v in statics.items() if n != "verifier"}).compile()
  decoder, drafter, _, lens, max_new, _ = args
  lowered = rounds.lower(decoder, drafter, pre.out_info, lens, max_new,  # the state's avals
                         **{n: v for n, v in statics.items() if n != "max_len"})
  loop = CompiledLoop(prefill=pre, rounds=pass_options.compile_lowered(lowered, rows))
  _COMPILED[sig] = loop
  while len(_COMPILED) > MAX_PROGRAMS:
    _COMPILED.popitem(last=False)
  return loop, time.perf_counter() - start
