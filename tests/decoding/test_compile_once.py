"""Compile once: traced settings share one program, the in-process table stays bounded in
a long process, and jax's persistent cache (`specjax.compile_cache`) is chosen, refused
and reused as documented.

This module runs with jax's persistent cache off (the fixture below: the counts it
asserts are this process's own, whatever cache `tests/run_files.py` shares between files);
the tests that need it on run fresh subprocesses with their own cache directory.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import compile_cache
from specjax.apps.card import format_compile
from specjax.decoding import compiled
from specjax.sampling import SamplingParams, warp

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT, STUB = os.path.dirname(TESTS), os.path.join(TESTS, "stub")
sys.path.insert(0, STUB)
from stub_model import ragged_prompts, reference_greedy, stub, stub_draft  # noqa: E402

TARGET, DRAFT = stub(), stub_draft()
PROMPTS = ragged_prompts(3, seed=1)


@pytest.fixture(autouse=True, scope="module")
def _no_persistent_cache():
  was = jax.config.jax_enable_compilation_cache
  jax.config.update("jax_enable_compilation_cache", False)
  yield
  jax.config.update("jax_enable_compilation_cache", was)


def _run(prompts=PROMPTS[:2], n=12, k=3, **kw):
  return specjax.generate(TARGET, prompts, n, draft=DRAFT, k=k, eos_ids=(), **kw)


# ------------------------------------------------------------------------ one program

def test_traced_settings_share_one_program():
  """max_new_tokens (in one cache bucket), temperature, top_k, top_p and the seed are
  traced: after the first call none of these compiles, and the table does not grow."""
  _run(temperature=0.7, top_p=0.9)
  resident = compiled.resident_programs()
  for kw in (dict(n=20, temperature=0.7, top_p=0.9), dict(temperature=1.3, top_p=0.5),
             dict(temperature=0.2, top_k=4), dict(n=31, temperature=1.0, top_k=7, top_p=0.8),
             dict(temperature=2.0, seed=5)):
    out = _run(**kw)
    assert out.stats.compiled_programs == 0 and out.stats.compile_time_s == 0.0, kw
    assert out.stats.to_dict()["compiled_programs"] == 0
    assert [len(t) for t in out.tokens] == [kw.get("n", 12)] * 2
  assert compiled.resident_programs() == resident


def test_greedy_is_the_one_static_switch():
  """temperature 0 skips the warp (argmax verification): its own program, shared by
  every greedy call whatever max_new_tokens; the output is the target's greedy tokens."""
  first = _run(temperature=0.0, n=10)
  assert first.stats.compiled_programs in (0, 2)  # 0 if an earlier test built it
  again = _run(temperature=0.0, n=25)
  assert again.stats.compiled_programs == 0
  assert again.tokens == [reference_greedy(p, 25) for p in PROMPTS[:2]]


def test_a_new_shape_compiles_two_programs():
  out = _run(prompts=PROMPTS[:3], k=2, temperature=0.9)  # batch 3, k = 2: new shapes
  d = out.stats.to_dict()
  assert d["compiled_programs"] == 2 and d["compile_time_s"] > 0
  assert d["programs_from_disk"] == 0  # this module keeps jax's persistent cache off


def test_a_loaded_loop_missing_a_function_is_compiled_again(monkeypatch, capsys):
  """A loop loaded from disk whose program fails with XLA:CPU's "NOT_FOUND: Function ...
  not found" is compiled afresh (neither table nor disk cache) with one warning line, and
  the call returns the target's tokens; the same failure from a loop compiled here, or
  another error, is raised as it is."""
  real = compiled.compiled_loop
  calls = []

  def broken(error, from_disk):
    def loop_of(args, statics, rows, fresh=False):
      calls.append(fresh)
      if fresh:
        return real(args, statics, rows, fresh=True)
      def fail(*_):
        raise jax.errors.JaxRuntimeError(error)
      return (compiled.CompiledLoop(prefill=fail, rounds=fail),
              compiled.CompileCount(programs=2, from_disk=from_disk))
    return loop_of

  monkeypatch.setattr(compiled, "compiled_loop", broken(
      "NOT_FOUND: Function broadcast_pad_fusion not found (type id: 1)", 2))
  out = _run(temperature=0.0, n=10)
  assert out.tokens == [reference_greedy(p, 10) for p in PROMPTS[:2]] and calls == [False, True]
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "compiling it again without the cache" in err[0], err
  assert "broadcast_pad_fusion" in err[0]
  for error, from_disk in (("NOT_FOUND: Function f not found", 0), ("INTERNAL: other", 2)):
    monkeypatch.setattr(compiled, "compiled_loop", broken(error, from_disk))
    with pytest.raises(jax.errors.JaxRuntimeError, match=error.split(":")[0]):
      _run(temperature=0.0, n=10)


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.7, 3, 1.0), (1.3, 0, 0.6), (0.5, 4, 0.7), (1.0, 11, 0.95), (2.0, 1, 1.0)])
def test_traced_warp_equals_the_static_warp(temperature, top_k, top_p):
  """The loop's warp (numbers as traced arrays: top-k by bisection, filters under
  lax.cond) gives the static warp's probabilities, ties in the logits included."""
  logits = jnp.round(jax.random.normal(jax.random.PRNGKey(top_k), (4, 3, 11)) * 2) / 2  # ties
  static = SamplingParams(temperature, top_k, top_p)
  want = jax.jit(lambda x: warp(x, static))(logits)
  got = jax.jit(warp)(logits, static.traced())
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-7)
  kept = np.asarray(got > 0).sum(-1)
  assert top_k == 0 or kept.min() >= min(top_k, 11) or top_p < 1.0


# ------------------------------------------------------------------------------ soak

def _rss_mib() -> float:
  with open("/proc/self/status") as f:
    return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def test_soak_many_settings_memory_stays_bounded(monkeypatch):
  """One process, 300 calls over varied k, batch, max_new_tokens, temperature, top-k,
  top-p and seeds, with the table's bound lowered to 3 so programs are evicted and
  rebuilt: no crash, the table never exceeds its bound, only a change of k or batch
  compiles, and resident memory after warm-up grows by less than 64 MiB (measured:
  under 1 MiB)."""
  monkeypatch.setattr(compiled, "MAX_PROGRAMS", 3)
  shapes = [(k, b) for k in (1, 2, 4) for b in (1, 3)]  # 6 signatures, bound 3
  rng = np.random.default_rng(0)
  prompts = ragged_prompts(3, seed=2)

  def call(k, b):
    temperature = float(rng.choice([0.3, 0.6, 0.9, 1.2, 1.5]))
    out = _run(prompts=prompts[:b], n=int(rng.integers(4, 40)), k=k, temperature=temperature,
               top_k=int(rng.choice([0, 2, 5])), top_p=float(rng.choice([1.0, 0.8, 0.5])),
               seed=int(rng.integers(1 << 20)))
    assert compiled.resident_programs() <= 3
    return out.stats.compiled_programs

  for k, b in shapes:  # warm-up: every signature once (evicting as it goes)
    call(k, b)
  warm = _rss_mib()
  built = [call(*shapes[block % len(shapes)]) for block in range(10) for _ in range(30)]
  assert sum(b > 0 for b in built) == 10  # the first call of each block only: LRU evicted it
  assert all(b == 0 for i, b in enumerate(built) if i % 30)
  grown = _rss_mib() - warm
  assert grown < 64, f"resident memory grew by {grown:.0f} MiB over 300 calls"


# ---------------------------------------------------------------- the persistent cache

def test_choose_the_cache_directory(tmp_path, monkeypatch):
  root = str(tmp_path)
  monkeypatch.setenv("SPECJAX_CACHE", root)  # the default lies under `paths.cache_root()`
  env = {}
  assert compile_cache.choose(env) == (os.path.join(root, "xla"), "default")
  assert compile_cache.choose(dict(env, SPECJAX_COMPILE_CACHE=f"{root}/c"))[0] == f"{root}/c"
  for off in ("off", "OFF", "0", "false", "no"):
    assert compile_cache.choose(dict(env, SPECJAX_COMPILE_CACHE=off))[0] is None
  # what jax was told from outside wins
  assert compile_cache.choose(dict(env, JAX_ENABLE_COMPILATION_CACHE="false")) == (
      None, "JAX_ENABLE_COMPILATION_CACHE=false")
  assert compile_cache.choose(env, jax_enabled=False)[0] is None
  assert compile_cache.choose(env, jax_dir="/elsewhere") == ("/elsewhere",
                                                             "jax_compilation_cache_dir")
  assert compile_cache.choose(dict(env, JAX_ENABLE_COMPILATION_CACHE="1"))[0] == f"{root}/xla"


def test_off_where_jax_is_told_off():
  """This module runs with jax's cache flag off (the fixture below), whatever directory
  the runner shares: enable() then keeps it off."""
  assert not jax.config.jax_enable_compilation_cache
  assert compile_cache.choose({}, jax.config.jax_compilation_cache_dir, False)[0] is None
  assert compile_cache.enable() is None


def test_unwritable_says_why(tmp_path):
  (tmp_path / "file").write_text("")
  assert compile_cache.unwritable(str(tmp_path / "ok" / "xla")) is None
  assert compile_cache.unwritable(str(tmp_path / "file" / "xla"))


_CHILD = """
import json, os, sys
import specjax
from specjax.decoding import compiled
if os.environ.get("NO_LOWERING"):  # a stored loop must come back without tracing or lowering
  def _build(*args):
    raise AssertionError("lowered a loop that was stored whole")
  compiled._build = _build
from stub_model import ragged_prompts, reference_greedy, stub, stub_draft
prompts = ragged_prompts(2, seed=1)
out = specjax.generate(stub(), prompts, 9, draft=stub_draft(), k=2, temperature=0.8, eos_ids=())
greedy = specjax.generate(stub(), prompts, 9, draft=stub_draft(), k=2, eos_ids=())
assert greedy.tokens == [reference_greedy(p, 9) for p in prompts]
s = [o.stats.to_dict() for o in (out, greedy)]
print(json.dumps({f: sum(d[f] for d in s) for f in
                  ("compiled_programs", "programs_from_disk", "compile_time_s")}))
"""


def _child(cache: str, **extra: str) -> subprocess.CompletedProcess:
  env = {n: v for n, v in os.environ.items()  # its own cache, not one the runner shares
         if n not in ("JAX_ENABLE_COMPILATION_CACHE", "JAX_COMPILATION_CACHE_DIR")}
  env.update(SPECJAX_COMPILE_CACHE=cache, PYTHONPATH=os.pathsep.join([ROOT, STUB]), **extra)
  return subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                        env=env, timeout=300, cwd=ROOT)


def test_second_process_loads_the_programs_from_disk(tmp_path):
  """Two fresh processes, one cache directory: the first compiles 4 programs and writes
  them, the second loads all 4 from disk whole, neither tracing nor lowering a loop (and
  still decodes the same tokens)."""
  cache = str(tmp_path / "xla")
  runs = []
  for second in (False, True):
    proc = _child(cache, **({"NO_LOWERING": "1"} if second else {}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
  assert runs[0]["compiled_programs"] == runs[1]["compiled_programs"] == 4
  assert runs[0]["programs_from_disk"] == 0 and runs[1]["programs_from_disk"] == 4
  assert len(os.listdir(cache)) >= 4
  assert len(os.listdir(os.path.join(cache, "specjax_loops"))) == 2  # one file a loop


def test_an_unwritable_cache_is_one_warning_line(tmp_path):
  (tmp_path / "file").write_text("")
  bad = str(tmp_path / "file" / "xla")
  proc = _child(bad)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert json.loads(proc.stdout.strip().splitlines()[-1])["programs_from_disk"] == 0
  lines = [l for l in proc.stderr.splitlines() if bad in l]
  assert len(lines) == 1 and "SPECJAX_COMPILE_CACHE" in lines[0], proc.stderr[-3000:]


def test_the_card_line():
  c = dict(compile_programs=2, compile_time_s=4.31, compile_from_disk=0, compile_cache=None)
  assert format_compile(c) == "2 programs, 4.3 s (persistent compilation cache off)"
  c.update(compile_from_disk=2, compile_cache="/c/xla", compile_time_s=0.42)
  assert format_compile(c) == "2 programs, 0.4 s (2 of them loaded from the persistent cache /c/xla)"


def test_only_faithful_signatures_are_stored():
  """A loop is stored whole only where its signature's text says everything: specjax's own
  verifier by name; a caller's rule (which may change under the same name) by address, so
  never stored; a shortened array likewise."""
  from specjax.decoding import program_store
  from specjax.decoding.verify import verify_row

  def my_rule(*args):
    return verify_row(*args)

  named = compiled._named({"verifier": verify_row, "k": 3})
  assert named == {"verifier": "specjax.decoding.verify.verify_row", "k": 3}
  assert program_store.key(repr(named)) is not None
  assert program_store.key(repr(compiled._named({"verifier": my_rule}))) is None
  assert program_store.key(repr(np.arange(5000))) is None  # numpy shortens it with "..."


def test_a_drafter_subclass_is_its_own_program():
  """A subclass with its parent's fields compares equal to it as a treedef (jit's cache
  would serve it the parent's trace whenever their hashes met in the table: a negative
  control in CI once passed that way); the classes are a static key of both programs, so
  the subclass's own `propose` runs: here it drafts token 0 always, never accepted."""
  import flax.struct
  from specjax.decoding import loop

  @flax.struct.dataclass
  class DraftsZero(type(DRAFT)):
    def propose(self, state, ctx, key):
      drafts, q, state, cache = super().propose(state, ctx, key)
      return jnp.zeros_like(drafts), q, state, cache

  wrong = DraftsZero(params=DRAFT.params, cfg=DRAFT.cfg, name=DRAFT.name)
  assert jax.tree.structure(wrong) == jax.tree.structure(DRAFT)  # what jit's cache compares
  assert loop.classes_of(TARGET, wrong) != loop.classes_of(TARGET, DRAFT)
  parent = _run(temperature=0.0)
  out = specjax.generate(TARGET, PROMPTS[:2], 12, draft=wrong, k=3, eos_ids=(),
                         temperature=0.0)
  assert out.tokens == parent.tokens  # greedy: exact whatever is drafted
  assert parent.stats.accepted.sum() > 0 and out.stats.accepted.sum() == 0
