"""Runs the test suite one test file per process, `--jobs` processes at a time (`make test`).

Why not one long-lived pytest-xdist worker per core: in 4 of about 15 clean-clone runs and
once in CI, XLA's CPU compiler crashed (SIGSEGV or SIGABRT inside `backend_compile_and_load` or the
executable's serialisation), always in a worker 11-14 minutes and hundreds of compiled
programs into the run, and xdist's `--dist loadfile` scheduler then waited forever for the
replaced worker (pytest-xdist#784, #1323; experiments/test_run/ in git history before 69a5cc7), so CI ran into its limit.
Here each file starts in a fresh interpreter, so no process accumulates more than one
file's programs; a file that runs past `--timeout` is killed and reported; and a file
whose process a signal kills (a crash in XLA, not a failed assertion) is run once more,
and said so. A file with a failing test is never rerun.

  python tests/run_files.py [-m MARKEXPR] [--jobs N] [--timeout S] [--record] [files or folders ...]

Files start slowest first by tests/file_seconds.json (`--record` rewrites it from a run), so
the two jobs end together. Files that the record says are short share a process, up to
`--group` CPU seconds a process: each process pays about 2.5 CPU-s to start pytest and
import jax before its first test, about a tenth of the suite when every file paid it. The
conftest drops jax's compiled programs after each file, as a file's own process would.

Prints one line per file as it finishes, the whole output of any file that failed, and
a total; exits 1 if any file failed.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SECONDS = os.path.join(HERE, "file_seconds.json")  # CPU seconds per file, for the order
# What pytest's last line counts ("== 12 passed, 1 skipped in 3.4s =="; "2 errors"), in the
# order of the total, whichever file ends first.
KINDS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "deselected")
_COUNT = re.compile(rf"(\d+) ({'|'.join(KINDS)})s?\b")
_CPU = re.compile(r"^cpu (\d+) s$", re.M)  # tests/conftest.py's pytest_terminal_summary
NO_TESTS_COLLECTED = 5  # pytest's exit code when the marker expression selects nothing
# Files that mostly run programs rather than compile them: conftest.py keeps XLA's -O2 for
# a process that runs only these, so they never join a group.
RUN_HEAVY = ("test_exact_sampling.py", "test_tree_sampling.py")
# Set for the files' processes: conftest.py ends each with os._exit once pytest has
# reported, instead of the interpreter's teardown (0.7 s a process of jax's programs).
FAST_EXIT = "SPECJAX_TESTS_FAST_EXIT"


@dataclasses.dataclass
class FileResult:
  """One process's run of one file or of a group of short files (`paths`). rc: pytest's
  exit code, negative for a signal, None for a timeout."""
  paths: tuple
  rc: int | None
  seconds: float
  output: str
  crashes: int = 0  # runs before this one that a signal killed

  @property
  def ok(self) -> bool:
    return self.rc in (0, NO_TESTS_COLLECTED)

  @property
  def cpu(self):
    """CPU seconds the file's process reported (None: no tests/conftest.py line)."""
    found = _CPU.findall(self.output)
    return int(found[-1]) if found else None

  def counts(self) -> dict:
    tail = self.output.strip().splitlines()[-1:] or [""]
    return {kind: int(n) for n, kind in _COUNT.findall(tail[0])}


  @property
  def name(self) -> str:
    return " + ".join(os.path.relpath(p, ROOT) for p in self.paths)


def _run_once(paths: tuple, pytest_args: list, timeout: float) -> FileResult:
  cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *pytest_args,
         *paths]
  start = time.perf_counter()
  # Own process group, so a timeout also ends the subprocesses a test started.
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True, env=dict(os.environ, **{FAST_EXIT: "1"}))
  try:
    out, _ = proc.communicate(timeout=timeout)
    rc = proc.returncode
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    out += f"\n[run_files] killed after {timeout:.0f} s (--timeout)\n"
    rc = None
  return FileResult(tuple(paths), rc, time.perf_counter() - start, out)


def run_file(paths, pytest_args: list, timeout: float) -> FileResult:
  """Runs one file (a path) or a group (a tuple of paths) in one process; once more if a
  signal killed the first run (XLA crashed)."""
  paths = (paths,) if isinstance(paths, str) else tuple(paths)
  result = _run_once(paths, pytest_args, timeout)
  if result.rc is not None and result.rc < 0:
    first = result
    result = _run_once(paths, pytest_args, timeout)
    result.crashes = 1
    result.output = (f"[run_files] first run killed by {signal.Signals(-first.rc).name} after "
                     f"{first.seconds:.0f} s; its output:\n{first.output}\n"
                     f"[run_files] second run:\n{result.output}")
  return result


def _describe(result: FileResult) -> str:
  counts = ", ".join(f"{n} {kind}" for kind, n in result.counts().items()) or "no summary"
  if result.rc is None:
    status = "TIMEOUT"
  elif result.rc < 0:
    status = f"CRASH ({signal.Signals(-result.rc).name})"
  else:
    status = "ok" if result.ok else "FAILED"
  crashed = ", after one crash (rerun)" if result.crashes else ""
  cpu = "" if result.cpu is None else f" (cpu {result.cpu} s)"
  return (f"{status:<8} {result.name:<40} {counts} in "
          f"{result.seconds:.0f} s{cpu}{crashed}")


def _tests_under(folder: str) -> list:
  """test_*.py files in `folder` and its subfolders (tests/stub/ ...)."""
  return [os.path.join(root, f) for root, _, files in os.walk(folder)
          for f in files if f.startswith("test_") and f.endswith(".py")]


def read_seconds(path: str = SECONDS) -> dict:
  """{file relative to the repository: CPU seconds} of a recorded run ({} without one)."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError):
    return {}


def write_seconds(results: list, path: str = SECONDS) -> None:
  """Records each passing file's CPU seconds (`--record`, which runs every file alone),
  keeping the other files' entries; a group's run is not any one file's."""
  known = read_seconds(path)
  known.update({os.path.relpath(r.paths[0], ROOT): r.cpu for r in results
                if r.ok and r.cpu and len(r.paths) == 1})
  with open(path, "w", encoding="utf-8") as f:
    json.dump(dict(sorted(known.items())), f, indent=1)
    f.write("\n")


def find_test_files(paths: list, seconds: dict | None = None) -> list:
  """The test files to run (a folder stands for the test files under it; default: all of
  tests/), slowest first, so the last files to start are short ones and the jobs end
  together: by the CPU seconds `seconds` records (default: tests/file_seconds.json), files
  it does not know first (they may be long), largest first."""
  if not paths:
    paths = [HERE]
  missing = [p for p in paths if not os.path.exists(p)]
  if missing:
    raise SystemExit(f"run_files: no such test file: {', '.join(missing)}")
  seconds = read_seconds() if seconds is None else seconds
  files = {os.path.abspath(f) for p in paths for f in (_tests_under(p) if os.path.isdir(p) else [p])}
  known = lambda f: seconds.get(os.path.relpath(f, ROOT))
  return sorted(files, key=lambda f: (known(f) is not None, -(known(f) or os.path.getsize(f))))


def group_short_files(files: list, budget: float, seconds: dict | None = None) -> list:
  """`files` (in run order) as the processes to run, longest first by recorded seconds
  (unrecorded first), so the last to start are short and both jobs end together: a tuple
  of paths each. Files whose recorded CPU seconds are under `budget` / 3 join the group
  after them in order until it would pass `budget`; longer and unrecorded files run
  alone, as do RUN_HEAVY files. budget 0: every file alone, in the given order."""
  seconds = read_seconds() if seconds is None else seconds
  groups, open_group, total = [], [], 0.0
  for f in files:
    cost = seconds.get(os.path.relpath(f, ROOT))
    if not budget or cost is None or cost >= budget / 3 or f.endswith(RUN_HEAVY):
      groups.append((f,))
      continue
    if open_group and total + cost > budget:
      groups.append(tuple(open_group))
      open_group, total = [], 0.0
    open_group.append(f)
    total += cost
  if open_group:
    groups.append(tuple(open_group))
  if not budget:
    return groups
  costs = [[seconds.get(os.path.relpath(f, ROOT)) for f in g] for g in groups]
  order = sorted(range(len(groups)),
                 key=lambda i: (None not in costs[i], -sum(c or 0 for c in costs[i]), i))
  return [groups[i] for i in order]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("files", nargs="*",
                      help="test files or folders (default: every tests/**/test_*.py)")
  parser.add_argument("-m", dest="markers", default=None, help="pytest marker expression")
  parser.add_argument("--jobs", type=int, default=2, help="files run at once (default 2)")
  parser.add_argument("--timeout", type=float, default=1200.0,
                      help="seconds one file may run before it is killed (default 1200)")
  parser.add_argument("--shared-cache", action="store_true",
                      help="share one fresh jax compilation cache between the run's files (off "
                           "by default: two files that compiled the same program at the same "
                           "moment read a broken entry, 'NOT_FOUND: Function ... not found', and "
                           "files share few programs, so it saved little)")
  parser.add_argument("--group", type=float, default=120.0,
                      help="CPU seconds of short files (by the record) that share one process; "
                           "files under a third of it are short (default 120; 0: one process a "
                           "file)")
  parser.add_argument("--record", action="store_true",
                      help="write each passing file's CPU seconds to tests/file_seconds.json, "
                           "the order later runs start the files in (slowest first)")
  args = parser.parse_args(argv)
  if args.jobs < 1 or args.timeout <= 0 or args.group < 0:
    parser.error("--jobs must be at least 1, --timeout positive and --group at least 0")
  pytest_args = ["-m", args.markers] if args.markers else []
  files = find_test_files(args.files)
  groups = group_short_files(files, 0.0 if args.record else args.group)
  shared = share_compilation_cache() if args.shared_cache else None
  print(f"run_files: {len(files)} files in {len(groups)} processes, {args.jobs} at a time"
        + (f", -m {args.markers!r}" if args.markers else "")
        + (f", compilation cache shared in {shared}" if shared else ""), flush=True)
  try:
    return _run_all(groups, pytest_args, args)
  finally:
    if shared:
      shutil.rmtree(shared, ignore_errors=True)


def share_compilation_cache() -> str:
  """A fresh directory for jax's persistent compilation cache (and specjax's stored
  loops), set in the environment the files' processes inherit: the tests' tiny programs
  are mostly compile time, and many files compile the same ones. The run starts empty
  and deletes it at the end, so no run reads another's programs."""
  path = tempfile.mkdtemp(prefix="specjax-tests-xla-")
  os.environ.update(JAX_ENABLE_COMPILATION_CACHE="true", JAX_COMPILATION_CACHE_DIR=path,
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1",
                    # bounded, so jax locks the directory: two files never read a half-written entry
                    JAX_COMPILATION_CACHE_MAX_SIZE=str(8 << 30))
  return path


def _run_all(groups: list, pytest_args: list, args) -> int:

  start, lock, results = time.perf_counter(), threading.Lock(), []

  def job(path):
    result = run_file(path, pytest_args, args.timeout)
    with lock:
      results.append(result)
      print(f"[{time.perf_counter() - start:5.0f} s] {_describe(result)}", flush=True)
      skips = [l for l in result.output.splitlines() if l.startswith("SKIPPED")]
      for line in skips:
        print(f"           {line}", flush=True)
    return result

  with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
    list(pool.map(job, groups))

  if args.record:
    write_seconds(results)
  failed = [r for r in results if not r.ok]
  for r in failed:
    print(f"\n{'=' * 30} {r.name} {'=' * 30}\n{r.output}", flush=True)
  totals = {kind: sum(r.counts().get(kind, 0) for r in results) for kind in KINDS}
  totals = {kind: n for kind, n in totals.items() if n}
  crashed = [r.name for r in results if r.crashes]
  cpu = sum(r.cpu or 0 for r in results)
  print(f"\nrun_files: {', '.join(f'{n} {k}' for k, n in totals.items())} in "
        f"{sum(len(r.paths) for r in results)} files, {time.perf_counter() - start:.0f} s wall, cpu {cpu} s"
        + (f"; rerun after a crash: {', '.join(crashed)}" if crashed else "")
        + (f"; FAILED: {', '.join(r.name for r in failed)}" if failed else ""),
        flush=True)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
