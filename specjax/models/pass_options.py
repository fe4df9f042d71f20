"""XLA compile options for programs whose passes have few rows (decode, verify, trees).

On the CPU backend, XLA (jaxlib 0.10) routes every dot through a YNNPACK fusion by
default. For products of a few rows by a large weight (a verify pass of k + 1 tokens, a
batch of decode steps) its kernels cost 2-3x their 1-row time, where XLA's own dot
(Eigen) costs about 1.4x: measured side by side, a 5-token pass of SmolLM2-135M took
2.65x a 1-token step with YNNPACK and 1.67x without ("YNNPACK off for few rows" in
`git show 0adddfe:experiments/pass_cost/README.md`). For large products (prefills of 128
tokens and more) the YNNPACK kernels are faster, so the prefill is compiled apart with the
defaults and only programs whose passes have at most `MAX_ROWS` rows get `FEW_ROW_CPU`.
Reductions stay in YNNPACK fusions: the vocabulary head of 2..64 rows is a multiply-and-reduce
(`transformer.full_head`), which YNNPACK runs 1.2-1.7x faster than any dot form tried,
and which XLA's own loops run 10-100x slower ("Head as a reduction" in that README).

The options pay off in optimized code only: at LLVM -O0 (`optimized_backend`) there are none.
Options are per compiled program (`jax.jit(..., compiler_options=)` or
`lowered.compile(compiler_options=)`): nothing global, nothing for the user to set.
An XLA that does not know the option compiles with its defaults (`compile_lowered`).
"""
from __future__ import annotations

import functools
import os
import re
from typing import Optional

import jax

# YNNPACK fusion types to enable: reductions only, so dots go to XLA's own CPU dot emitter.
FEW_ROW_CPU = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE"}
# Rows (batch x tokens) of a pass up to which FEW_ROW_CPU is faster on this CPU: a
# [M, 576] x [576, 4096] product measured 1.4x faster at M = 32, 1.4x slower at M = 128.
MAX_ROWS = 64


def few_row_options(rows: int) -> dict:
  """Compile options for a program whose passes have `rows` rows (batch x new tokens)."""
  if rows > MAX_ROWS or jax.default_backend() != "cpu" or not optimized_backend() \
      or not _supported():
    return {}
  return dict(FEW_ROW_CPU)


def optimized_backend(xla_flags: Optional[str] = None) -> bool:
  """False when XLA_FLAGS sets the backend's LLVM optimization level to 0 (the tests do,
  to compile faster): XLA's own dot loops are then unoptimized, and the few-row options
  made passes slower, not faster (Medusa's 22 rounds on SmolLM2-135M: 10.9 CPU-s with
  them, 4.0 without)."""
  flags = os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags
  level = re.findall(r"--xla_backend_optimization_level=(\d+)", flags)
  return not level or int(level[-1]) > 0


@functools.lru_cache(maxsize=None)
def _supported() -> bool:
  """Whether this XLA accepts FEW_ROW_CPU (an older or newer one may not know it)."""
  try:
    jax.jit(lambda x: x + 1, compiler_options=FEW_ROW_CPU).lower(1.0).compile()
    return True
  except Exception:  # noqa: BLE001 - any refusal means: compile with the defaults
    return False


def jit(fn, rows: int, **kwargs):
  """`jax.jit(fn, **kwargs)` with the options of a program of `rows`-row passes."""
  return jax.jit(fn, compiler_options=few_row_options(rows) or None, **kwargs)


def compile_lowered(lowered, rows: int):
  """Compiles a `jax.stages.Lowered` with the options of a program of `rows`-row passes."""
  options = few_row_options(rows)
  return lowered.compile(compiler_options=options) if options else lowered.compile()
