"""The test runner (`tests/run_files.py`, what `make test` calls): a failing test fails its
file and is not rerun; a file whose process a signal kills is rerun once; a second crash,
and a file past its timeout, fail. The files run here are plain pytest files in a
temporary directory (no jax), so each run takes about a second."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_files  # noqa: E402

# Crashes its process (SIGSEGV) on the first run and passes on the next; counts its runs.
CRASH_ONCE = """
import os, signal
def test_crash_once(tmp_path_factory):
  marker = os.path.join(os.path.dirname(__file__), "runs_{name}")
  runs = int(open(marker).read()) if os.path.exists(marker) else 0
  open(marker, "w").write(str(runs + 1))
  if runs < {crashes}:
    os.kill(os.getpid(), signal.SIGSEGV)
"""


def _write(tmp_path, name, text):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def _runs(tmp_path, name):
  return int((tmp_path / f"runs_{name}").read_text())


def test_passing_and_failing_files(tmp_path, capsys):
  good = _write(tmp_path, "test_good.py", "def test_a(): pass\ndef test_b(): pass\n")
  bad = _write(tmp_path, "test_bad.py", "def test_a(): pass\ndef test_b(): assert 1 == 2\n")
  assert run_files.main([good, "--timeout", "120"]) == 0
  assert run_files.main([good, bad, "--timeout", "120"]) == 1
  out = capsys.readouterr().out
  assert "FAILED" in out and "assert 1 == 2" in out and "rerun" not in out
  assert "3 passed, 1 failed in 2 files" in out


def test_a_failed_test_is_not_rerun(tmp_path):
  bad = _write(tmp_path, "test_bad.py", "def test_a(): assert False\n")
  result = run_files.run_file(bad, [], timeout=120)
  assert result.rc == 1 and not result.ok and result.crashes == 0


def test_a_crash_is_rerun_once(tmp_path, capsys):
  once = _write(tmp_path, "test_once.py", CRASH_ONCE.format(name="once", crashes=1))
  assert run_files.main([once, "--timeout", "120"]) == 0
  assert _runs(tmp_path, "once") == 2
  out = capsys.readouterr().out
  assert "after one crash (rerun)" in out and "rerun after a crash: " in out


def test_two_crashes_fail(tmp_path):
  always = _write(tmp_path, "test_always.py", CRASH_ONCE.format(name="always", crashes=9))
  result = run_files.run_file(always, [], timeout=120)
  assert _runs(tmp_path, "always") == 2  # one rerun, no more
  assert result.rc < 0 and not result.ok and "SIGSEGV" in result.output


def test_a_hanging_file_is_killed(tmp_path):
  hang = _write(tmp_path, "test_hang.py", "import time\ndef test_a(): time.sleep(600)\n")
  result = run_files.run_file(hang, [], timeout=5)
  assert result.rc is None and not result.ok and result.seconds < 60
  assert "killed after 5 s" in result.output


def test_marker_selecting_nothing_is_not_a_failure(tmp_path):
  good = _write(tmp_path, "test_good.py", "def test_a(): pass\n")
  assert run_files.main([good, "-m", "real_model"]) == 0


def test_folders_stand_for_their_test_files(tmp_path):
  """The default run and a folder argument take test files from subfolders too (tests/stub)."""
  top = _write(tmp_path, "test_top.py", "def test_a(): pass\n")
  (tmp_path / "stub").mkdir()
  sub = _write(tmp_path / "stub", "test_sub.py", "def test_a(): pass\n")
  _write(tmp_path / "stub", "helpers.py", "X = 1\n")
  assert sorted(run_files.find_test_files([str(tmp_path)])) == sorted([top, sub])
  assert run_files.find_test_files([str(tmp_path / "stub"), sub]) == [sub]
  found = run_files.find_test_files([])
  assert os.path.join(run_files.HERE, "stub", "test_loop_stub.py") in found
  assert os.path.join(run_files.HERE, "test_run_files.py") in found


def test_files_start_slowest_first_by_the_record(tmp_path):
  """Known files by their recorded seconds, slowest first; unknown ones before them, largest
  first; --record writes a run's seconds and keeps the other files' entries."""
  files = {n: _write(tmp_path, f"test_{n}.py", "def test_a(): pass\n" + "#" * size)
           for n, size in (("a", 10), ("b", 500), ("c", 100), ("d", 50))}
  rel = lambda n: os.path.relpath(files[n], run_files.ROOT)
  order = run_files.find_test_files([str(tmp_path)], {rel("a"): 90, rel("b"): 5, rel("c"): 30})
  assert order == [files["d"], files["a"], files["c"], files["b"]]
  record = str(tmp_path / "seconds.json")
  run_files.write_seconds([run_files.FileResult((files["a"],), 0, 1.0, "cpu 7 s")], record)
  run_files.write_seconds([run_files.FileResult((files["b"],), 0, 1.0, "cpu 3 s"),
                           run_files.FileResult((files["c"],), 1, 1.0, "cpu 9 s")], record)
  assert run_files.read_seconds(record) == {rel("a"): 7, rel("b"): 3}  # c failed: not recorded



def test_short_files_share_a_process(tmp_path, capsys):
  """Files the record calls short are packed, in run order, into processes of at most the
  budget, which start longest first; long and unrecorded files run alone; a failing test in a group fails the run and
  names the group; --group 0 runs every file alone."""
  files = {n: _write(tmp_path, f"test_{n}.py", "def test_a(): pass\n") for n in "abcdef"}
  rel = lambda n: os.path.relpath(files[n], run_files.ROOT)
  record = {rel("a"): 50, rel("b"): 9, rel("c"): 8, rel("d"): 7, rel("e"): 9}  # f: unknown
  order = [files[n] for n in "fabcde"]
  groups = run_files.group_short_files(order, 30, record)
  assert groups == [(files["f"],), (files["a"],), (files["b"], files["c"], files["d"]),
                    (files["e"],)]  # short (under 30 / 3), and 9 + 8 + 7 + 9 would pass 30
  assert run_files.group_short_files(order, 0, record) == [(f,) for f in order]
  files["g"] = _write(tmp_path, "test_g.py", "def test_a(): pass\n")
  record[rel("g")] = 12  # alone (not under 30 / 3), and shorter than the group b + c + d
  groups = run_files.group_short_files([files[n] for n in "fgbcde"], 30, record)
  assert groups == [(files["f"],), (files["b"], files["c"], files["d"]), (files["g"],),
                    (files["e"],)]  # the longest process starts first
  bad = _write(tmp_path, "test_bad.py", "def test_a(): assert 1 == 2\n")
  result = run_files.run_file((files["b"], bad), [], timeout=120)
  assert result.rc == 1 and not result.ok and result.counts() == {"passed": 1, "failed": 1}
  assert result.name == f"{rel('b')} + {os.path.relpath(bad, run_files.ROOT)}"
