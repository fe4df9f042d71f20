"""Few-row passes: the head's row-count forms agree, and the loop's rounds program is
compiled with `pass_options` (its dots off YNNPACK on the CPU, its reductions on) while
its output stays the target's own."""
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.models import pass_options, transformer
from specjax.models.params import inference_layout
from tests.tiny_models import perturbed, tiny

OPTIMIZED_BACKEND = pass_options.optimized_backend  # the function itself, before the fixture


@pytest.fixture(autouse=True)
def _as_optimized_code(monkeypatch):
  """The options under test, even in the tests' -O0 processes (where they are off)."""
  monkeypatch.setattr(pass_options, "optimized_backend", lambda xla_flags=None: True)


def test_no_options_at_llvm_level_0():
  """-O0 code runs XLA's own dot loops unoptimized: the options would slow it down."""
  assert OPTIMIZED_BACKEND("")
  assert OPTIMIZED_BACKEND("--xla_backend_optimization_level=2")
  assert not OPTIMIZED_BACKEND("--xla_foo=1 --xla_backend_optimization_level=0")
  assert OPTIMIZED_BACKEND("--xla_backend_optimization_level=0 "
                           "--xla_backend_optimization_level=3")  # the last wins


# The module (the package's `generate` attribute is the function of that name).
generate_lib = importlib.import_module("specjax.decoding.compiled")


@pytest.mark.parametrize("tie", [True, False])
def test_every_head_form_gives_the_plain_product(tie):
  """Rows 1 (matrix-vector), 2..64 (multiply-and-reduce) and more (plain) give x @ W within
  float32 rounding, with and without the inference layout, under both the default and
  the few-row compile options."""
  model = tiny(vocab=301, tie_embeddings=tie)
  cfg = model.cfg
  w = model.params["embed"].T if tie else model.params["lm_head"]["kernel"]  # [D, V]
  layouts = {"canonical": model.params, "inference": inference_layout(model.params, cfg)}
  assert ("head_t" in layouts["inference"]["inference"]) == (not tie)
  rng = np.random.default_rng(0)
  for rows in (1, 2, 5, 8, 9, 33, 64, 65, 130):
    x = jnp.asarray(rng.standard_normal((1, rows, cfg.d_model)).astype(np.float32))
    want = np.asarray(x @ w)
    for name, params in layouts.items():
      for opts in ({}, pass_options.FEW_ROW_CPU):
        if opts and not pass_options._supported():
          continue
        got = jax.jit(lambda p, x: transformer.full_head(p, cfg, x),
                      compiler_options=opts or None)(params, x)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5,
                                   err_msg=f"{name} layout, {rows} rows, options {opts}")


def test_few_row_options_by_rows_and_backend():
  if jax.default_backend() != "cpu" or not pass_options._supported():
    pytest.skip("the few-row options apply to a CPU XLA that knows them")
  assert pass_options.few_row_options(1) == pass_options.FEW_ROW_CPU
  assert pass_options.few_row_options(pass_options.MAX_ROWS) == pass_options.FEW_ROW_CPU
  assert pass_options.few_row_options(pass_options.MAX_ROWS + 1) == {}


def _ynn_dots(hlo: str) -> bool:
  """Whether a compiled program sends a dot to a YNNPACK fusion."""
  return any("__ynn_fusion" in line and "dot_general" in line for line in hlo.splitlines())


def _ynn_reduces(hlo: str) -> bool:
  return any("__ynn_fusion" in line and "reduce" in line for line in hlo.splitlines())


def test_rounds_compiled_without_ynn_and_prefill_with_defaults():
  """The loop's two programs: the prefill keeps XLA's defaults (a 64-token prompt's
  products go to YNNPACK), the rounds (2 x 5 rows) get the few-row options (no dot
  does; the head's reduction does); a batch of 16 rows x 5 tokens (80 rows) keeps the
  defaults. The output stays the target's greedy output in every case."""
  if jax.default_backend() != "cpu" or not pass_options._supported():
    pytest.skip("the few-row options apply to a CPU XLA that knows them")
  target = tiny(vocab=97, layers=2)
  draft = perturbed(target, 0.05)
  rng = np.random.default_rng(1)
  for batch in (2, 16):
    prompts = [rng.integers(0, 97, 64).tolist() for _ in range(batch)]
    generate_lib._COMPILED.clear()
    spec = specjax.generate(target, prompts, 12, draft=draft, k=4, eos_ids=())
    alone = specjax.generate(target, prompts, 12, eos_ids=())
    assert spec.tokens == alone.tokens
    assert 0 < spec.stats.acceptance_rate < 1  # partial acceptance is exercised
    loops = list(generate_lib._COMPILED.values())
    spec_loop = loops[0]
    assert _ynn_dots(spec_loop.prefill.as_text())
    rounds = spec_loop.rounds.as_text()
    assert _ynn_dots(rounds) == (batch * 5 > pass_options.MAX_ROWS)
    assert _ynn_reduces(rounds)
