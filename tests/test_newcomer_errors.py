"""What a newcomer meets first: clear one-line errors, honest fallbacks, help, packaging.

Draft specs that name their grammar, a card that never silently swaps the draft it
was asked for, every script's `--config.FIELD` checked in one line and its fields in
`--help`, setup.py without warnings (assets and data still shipped), the specjax cache
under a temporary directory, and a corrupt checkpoint that leaves no orphaned orbax
tasks behind. All on toy models or subprocesses of a second or two.
"""
from __future__ import annotations

import asyncio
import gc
import inspect
import os
import subprocess
import sys
import threading
import time

import jax.numpy as jnp
import pytest

import specjax
from specjax.errors import LoadError
from specjax.training import toy
from tiny_models import tiny

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------- draft specs

@pytest.fixture(scope="module")
def target():
  return toy.toy_target(vocab_size=64, n_layers=2)


@pytest.mark.parametrize("spec,problem", [
    ("ngram:x", "the n-gram size 'x' is not a positive integer"),
    ("ngram:", "the n-gram size '' is not a positive integer"),
    ("ngram:0", "the n-gram size must be >= 1"),
    ("early_exit:9", "between 1 and 1"),
    ("early_exit:", "between 1 and 1"),
    ("ngrm:3", "unknown drafter kind 'ngrm'"),
])
def test_bad_draft_spec_names_the_spec_and_the_grammar(target, spec, problem):
  with pytest.raises(ValueError) as e:
    specjax.generate(target, [[1, 2, 3]], 4, draft=spec, k=2)
  msg = str(e.value)
  assert msg.startswith(f"Drafter spec {spec!r}: ") and problem in msg, msg
  assert "'ngram:N'" in msg and "'early_exit:N'" in msg and "model source" in msg, msg
  assert "\n" not in msg


def test_good_draft_specs_still_parse(target):
  from specjax.decoding.drafters import EarlyExitDrafter, NgramDrafter
  from specjax.api import resolve_drafter
  assert resolve_drafter("ngram", target) == NgramDrafter(n=3)
  assert resolve_drafter("ngram:2", target) == NgramDrafter(n=2)
  assert resolve_drafter("early_exit:1", target) == EarlyExitDrafter(n_layers=1)


# ----------------------------------------------------------------------- the card

def test_card_fails_loudly_for_a_draft_it_cannot_load():
  """A mistyped draft is an error, not a silent fallback to n-gram lookup."""
  from specjax.apps import card
  with pytest.raises(LoadError, match="no-such-draft: unknown model"):
    card.load_draft("no-such-draft", fallback="ngram:3")
  # A spec, even a mistyped one, goes to the draft-spec grammar, whose error names it.
  with pytest.raises(ValueError, match="unknown drafter kind 'ngrm'.*A draft is"):
    card.load_draft("ngrm:3", fallback="ngram:3")


def test_card_loads_a_combined_draft_once():
  """'<draft>+ngram:N': the base loaded (once) by the card, prompt lookup put in front;
  a bad lookup part is one clear error."""
  from specjax.apps import card
  from specjax.decoding.drafters import EarlyExitDrafter, LookupFirstDrafter
  target = tiny("llama", seed=0)
  label, draft, warning = card.load_draft("early_exit:1+ngram:2", target=target)
  assert (label, warning) == ("early_exit:1+ngram:2", None)
  assert draft == LookupFirstDrafter(base=EarlyExitDrafter(n_layers=1), n=2)
  with pytest.raises(ValueError, match="the lookup last"):
    card.load_draft("early_exit:1+lookup", target=target)


def test_card_fallback_for_a_registry_draft_is_a_warning_line(monkeypatch):
  """Only a registry draft missing from this install falls back, and the card says so."""
  from specjax.apps import card
  from specjax.decoding.drafters import NgramDrafter
  from specjax.loading import registry

  def missing():
    raise LoadError("tiny-missing-draft: the shipped draft is missing; reinstall specjax.")
  monkeypatch.setitem(registry.REGISTRY, "tiny-missing-draft", missing)
  label, draft, warning = card.load_draft("tiny-missing-draft", fallback="ngram:3")
  assert (label, draft) == ("ngram:3", NgramDrafter(n=3))
  assert "tiny-missing-draft" in warning and "'ngram:3' instead" in warning
  with pytest.raises(LoadError, match="shipped draft is missing"):
    card.load_draft("tiny-missing-draft", fallback="")
  # A combined draft whose base falls back measures the fallback alone, and says so.
  label, draft, combined_warning = card.load_draft("tiny-missing-draft+ngram:3", fallback="ngram:3")
  assert (label, draft) == ("ngram:3", NgramDrafter(n=3)) and "tiny-missing-draft" in combined_warning
  fields = {"prompt": "p", "output": "o", "target": "t", "draft": label, "k": 4,
            "temperature": 0.0, "new_tokens": 8, "target_passes": 5, "draft_passes": 16,
            "acceptance_rate": 0.5, "tokens_per_pass": 1.5, "closed_form_tokens_per_pass": 1.9,
            "speculative_tokens_per_s": 10.0, "warning": warning}
  text = card.format_card(fields)
  assert any(line.startswith("WARNING") and "tiny-missing-draft" in line
             for line in text.splitlines()), text


@pytest.mark.parametrize("speedup,word", [(0.62, "below 1"), (1.4, "above 1")])
def test_card_explains_its_speedup_from_the_measured_costs(speedup, word):
  from specjax.apps import card
  c = {"k": 4, "tokens_per_pass": 1.32, "speedup": speedup, "round_in_steps": 2.0,
       "verify_share": 0.9}
  note = card.speedup_note(c)
  assert note.startswith(f"speedup {word}") and "\n" not in note
  assert "took 2.00 target-alone steps" in note and "1.80 of them the verify pass" in note
  assert "kept 1.32 tokens (1.32 / 2.00 = 0.66)" in note
  assert ("must keep more than 2.00 tokens" in note) == (speedup < 1)
  assert "(4 draft steps + one 5-token verify pass)" in note
  assert card.speedup_note({"speedup": None}) is None
  # a parallel draft (DFlash): one draft pass a round, whatever k
  block = card.speedup_note(dict(c, k=8, target_passes=36, draft_passes=35))
  assert "(1 draft pass + one 9-token verify pass)" in block


# ----------------------------------------------------------------------- script configs

def _script(name: str, *flags: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, JAX_PLATFORMS="cpu", HF_HUB_OFFLINE="1")
  return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), *flags], cwd=ROOT,
                        env=env, capture_output=True, text=True, timeout=300)


# (script, flags choosing a config, a field of that config, one of its defaults in --help)
SCRIPTS = [
    ("speculate.py", [], "max_new_tokens", "k='auto'"),
    ("benchmark.py", [], "prompts.source", "max_new_tokens="),
    ("acceptance_curves.py", ["--workdir=/nonexistent"], "ks", "ks="),
    ("distill.py", ["--config=configs/distill.py:tiny", "--workdir=/nonexistent"],
     "num_steps", "num_steps="),
    ("eval_draft.py", ["--config=configs/distill.py:tiny"], "num_steps", "num_steps="),
    ("export_hf.py", ["--config=configs/distill.py:tiny", "--workdir=/nonexistent"],
     "num_steps", "num_steps="),
    ("distill_medusa.py", ["--config=configs/distill.py:medusa_tiny", "--workdir=/nonexistent"],
     "medusa.n_heads", "num_steps="),
    ("generate_data.py", ["--config=configs/generate_data.py:tiny"], "filters.ngram",
     "num_pairs="),
]


@pytest.mark.parametrize("script,flags,field,default", SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_unknown_config_field_is_one_line_naming_the_valid_ones(script, flags, field, default):
  proc = _script(script, *flags, "--config.kk=6")
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1, proc.stderr
  assert lines[0].startswith("error: --config.kk: ") and "no field 'kk'" in lines[0]
  assert field.split(".")[0] in lines[0], lines[0]  # the valid fields are listed
  nested = _script(script, *flags, f"--config.{field}x=1")
  assert nested.returncode == 2 and "Traceback" not in nested.stderr
  assert "did you mean" in nested.stderr and field in nested.stderr, nested.stderr


@pytest.mark.parametrize("script,spec", [("distill.py", "configs/distill.py:nope"),
                                         ("distill_medusa.py", "configs/distill.py:medusa_tinyy"),
                                         ("generate_data.py", "configs/generate_data.py:nope")])
def test_config_argument_the_config_rejects_is_one_line(script, spec):
  proc = _script(script, f"--config={spec}", "--workdir=/nonexistent")
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(f"error: --config={spec}: "), proc.stderr
  assert "is not a variant" in lines[0] and "give one of" in lines[0] and "tiny" in lines[0], lines[0]


@pytest.mark.parametrize("script,flags,field,default", SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_help_lists_the_config_fields_with_defaults(script, flags, field, default):
  proc = _script(script, "--help")
  assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  text = " ".join(proc.stdout.split())  # absl wraps the help text
  assert "--config:" in text and "--config.FIELD=VALUE" in text, proc.stdout
  assert default in text, proc.stdout


@pytest.mark.parametrize("script", ["export_hf.py", "eval_draft.py"])
def test_workdir_without_a_checkpoint_is_one_line(tmp_path, script):
  """A workdir no run has trained in: one line naming it and what to do, before any pool
  is sampled into it."""
  work = tmp_path / "not_a_run"
  proc = _script(script, "--config=configs/distill.py:tiny", f"--workdir={work}",
                 *(["--asset=" + str(tmp_path / "a")] if script == "export_hf.py" else []))
  assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: --workdir="), proc.stderr
  assert "holds no best checkpoint" in lines[0] and "scripts/distill.py" in lines[0]
  assert not work.exists()  # nothing was written there


def test_missing_config_file_is_one_line():
  proc = _script("speculate.py", "--config=configs/no_such_config.py")
  assert proc.returncode == 2 and "Traceback" not in proc.stderr
  assert proc.stderr.strip() == ("error: --config=configs/no_such_config.py: no such config "
                                 "file; the configs are in configs/.")


# ----------------------------------------------------------------------- packaging, cache

def test_setup_builds_without_warnings_and_ships_assets_and_data(tmp_path):
  proc = subprocess.run([sys.executable, "setup.py", "-q", "build",
                         f"--build-base={tmp_path}"], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "absent from the `packages` configuration" not in proc.stderr, proc.stderr[-3000:]
  assert "_Warning" not in proc.stderr, proc.stderr[-3000:]
  lib = tmp_path / "lib" / "specjax"
  for name in ("smollm2-135m-draft", "smollm2-135m-draft-templated", "smollm2-135m-draft-lm"):
    for f in ("config.json", "model.safetensors", "specjax_draft.json"):
      assert (lib / "assets" / name / f).is_file(), (name, f)
  for split in ("train", "train_extra", "heldout"):
    assert (lib / "data" / f"prompts_{split}.jsonl").is_file(), split


def test_specjax_cache_is_a_temporary_directory_in_tests(specjax_cache):
  from specjax.paths import cache_root
  assert cache_root() == specjax_cache == os.environ["SPECJAX_CACHE"]
  assert not specjax_cache.startswith(os.path.join(os.path.expanduser("~"), ".cache"))


# ----------------------------------------------------------------------- checkpoints

def _asyncio_objects():
  return [o for o in gc.get_objects()
          if isinstance(o, (asyncio.Future, asyncio.AbstractEventLoop)) or inspect.iscoroutine(o)]


def _inert(o) -> bool:
  """Whether an asyncio object can run nothing more: a done future or task, a coroutine
  that returned, raised or never started (no loop knows it), a closed loop with no
  callback waiting on it. An inert one still referenced (a traceback's frame, an orbax
  object) is plain garbage; a live one (a pending task, a suspended coroutine) is what a
  later collection finalizes in another test."""
  if isinstance(o, asyncio.Future):
    return o.done()
  if isinstance(o, asyncio.AbstractEventLoop):
    return o.is_closed() and not getattr(o, "_ready", ()) and not getattr(o, "_scheduled", ())
  return inspect.getcoroutinestate(o) in (inspect.CORO_CLOSED, inspect.CORO_CREATED)


def _described(o) -> str:
  """repr, state and who holds it: the diagnosis a failure needs."""
  state = (inspect.getcoroutinestate(o) if inspect.iscoroutine(o)
           else getattr(o, "_state", None) or ("closed" if o.is_closed() else "open"))
  held_by = sorted({type(r).__name__ for r in gc.get_referrers(o)} - {"list"})
  return f"{o!r:.90} ({state}; held by {held_by})"


@pytest.mark.parametrize("read_in_flight", [False, True], ids=["all_garbage", "read_in_flight"])
def test_corrupt_checkpoint_leaves_no_orphaned_orbax_tasks(tmp_path, capfd, caplog, monkeypatch,
                                                           read_in_flight):
  """orbax closes its event loop at the first failed read while its other reads are in
  flight (tensorstore's thread pool, to_thread); they must finish inside the failure path,
  not call back into the closed loop ("RuntimeError: Event loop is closed") or leave
  pending tasks that a later collection finalizes inside whatever test runs then.
  Inert objects may outlive the restore (CI once saw its coroutines and closed loop still
  referenced); live ones may not. With the drain off, read_in_flight fails here on pending
  futures and tasks (checked by hand: `_DrainingLoop._drain` a no-op).

  all_garbage: every data file overwritten (whether a read is still in flight at the first
  error is a race). read_in_flight: deterministic; the OCDBT manifest, which every array
  read opens first, is a FIFO that blocks until a writer opens it after the array metadata
  read has already failed, so an array read is certainly pending when orbax gives up.
  """
  from specjax.training import CheckpointError, Checkpointer
  state = {"a": jnp.arange(300.0), "b": jnp.ones((8, 8)), "c": {"d": jnp.zeros(5)}}
  ckpt = Checkpointer(str(tmp_path))
  ckpt.save(3, state)
  ckpt.restore(state)  # a restore that worked first: its loops and pools exist before
  ckpt.close()
  default = tmp_path / "checkpoints" / "3" / "default"
  for root, _, files in os.walk(tmp_path / "checkpoints" / "3"):
    for f in files:
      if not f.startswith("_"):
        with open(os.path.join(root, f), "wb") as fh:
          fh.write(b"not a checkpoint")
  manifest, woke, writer = str(default / "manifest.ocdbt"), threading.Event(), None
  if read_in_flight:
    if not hasattr(os, "mkfifo"):
      pytest.skip("needs a POSIX FIFO")
    os.remove(manifest)
    os.mkfifo(manifest)

    def write_garbage():
      time.sleep(0.5)  # the array metadata read fails long before
      woke.set()
      fd = os.open(manifest, os.O_WRONLY)  # the blocked array read goes on from here
      try:
        os.write(fd, b"not a checkpoint")
      except BrokenPipeError:
        pass
      finally:
        os.close(fd)
    writer = threading.Thread(target=write_garbage, daemon=True)
  gc.collect()
  before = {id(o) for o in _asyncio_objects()}  # earlier tests in this process may hold theirs
  unraisable = []  # a tensorstore read calling back into a closed loop reports here
  monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(repr(u.exc_value)))
  ckpt, policy = Checkpointer(str(tmp_path)), asyncio.get_event_loop_policy()
  try:
    if writer is not None:
      writer.start()
    with pytest.raises(CheckpointError, match="corrupt") as err:
      ckpt.restore(state)
    waited_for_the_read = woke.is_set()
    new = [o for o in _asyncio_objects() if id(o) not in before]
    live = [_described(o) for o in new if not _inert(o)]
  finally:
    ckpt.close()
    if writer is not None:
      os.close(os.open(manifest, os.O_RDONLY | os.O_NONBLOCK))  # frees a writer still blocked
      writer.join(5)
  assert not live, live[:5]
  assert "\n" not in str(err.value)
  assert asyncio.get_event_loop_policy() is policy  # the drain is scoped to the restore
  if read_in_flight:
    assert waited_for_the_read, "restore raised while an array read was still in flight"
  gc.collect()
  assert not unraisable, unraisable
  out, errs = capfd.readouterr()
  assert "Event loop is closed" not in out + errs + caplog.text, (errs + caplog.text)[-2000:]
  assert not [r for r in caplog.records if r.name in ("asyncio", "concurrent.futures")], caplog.text


# ----------------------------------------------------------------------- memory

def test_caches_that_cannot_fit_are_one_line_before_compiling():
  """16 rows of a 16M-slot cache need 48 GiB of KV cache: refused by name (batch size and
  cache length) before any program is built; the same model at 1 row and 40 tokens runs."""
  from specjax.decoding import compiled, plan
  model = tiny(max_positions=1 << 24)
  before = compiled.compile_totals().programs
  with pytest.raises(ValueError) as e:
    specjax.generate(model, [[1, 2, 3]] * 16, max_new_tokens=(1 << 24) - 64)
  line = str(e.value)
  assert "\n" not in line and "a batch of 16 rows with a cache of 16777216 positions" in line
  assert "do not fit in memory" in line
  assert compiled.compile_totals().programs == before  # nothing compiled
  from specjax.models.interface import as_decoder
  need = plan.cache_bytes(as_decoder(model), 16, 1 << 24)
  assert need == 2 * 3 * 16 * 2 * 8 * (1 << 24) * 4 + 16 * 4  # L x (keys, values), lengths
  plan.check_memory(need, 16, 1 << 24, available=need)  # exactly fits: no error
  with pytest.raises(ValueError, match="per device"):
    plan.check_memory(need, 16, 1 << 24, available=need - 1)
  plan.check_memory(need, 16, 1 << 24, devices=2, available=need // 2)  # split over a mesh
  assert len(specjax.generate(model, [[1, 2, 3]], max_new_tokens=4).tokens[0]) == 4
