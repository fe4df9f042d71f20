"""Where a decode loop's time goes, op by op, from XLA's own trace.

    PYTHONPATH=. python experiments/pass_cost/profile_loop.py --batch=32 --out=/tmp/profile_b32

Runs `specjax.generate` on the embedded target once to compile, then once under
`jax.profiler.trace`, reads the trace back (`jax.profiler.ProfileData`) and sums the
time of every XLA op that ran at least steps / 2 times (the loop body: the prefill's
ops run once), per step, grouped by op kind and the JAX source op it came from.
Writes ops.md (the grouped table and the 15 costliest single ops) and ops.json.
"""
import collections
import glob
import json
import os
import re
import tempfile

from absl import app, flags
import jax
import numpy as np

_BATCH = flags.DEFINE_integer("batch", 32, "Rows per generate call.")
_NEW = flags.DEFINE_integer("new_tokens", 33, "Tokens generated (the loop runs one round each).")
_PROMPT = flags.DEFINE_integer("prompt_tokens", 100, "Random prompt length.")
_DRAFT = flags.DEFINE_string("draft", None, "A drafter spec (default: the target alone).")
_K = flags.DEFINE_integer("k", 4, "Tokens drafted per round, with --draft.")
_OUT = flags.DEFINE_string("out", "/tmp/profile", "Output directory.")


def _op_index(hlo: str) -> dict:
  """op name -> (its HLO line head, the JAX op_name it came from)."""
  index = {}
  for m in re.finditer(r"\n\s*(?:ROOT )?%([\w.-]+) = ([^\n]*)", hlo):
    meta = re.search(r'op_name="([^"]*)"', m.group(2))
    index[m.group(1)] = (m.group(2)[:80], meta.group(1) if meta else "")
  return index


def main(argv):
  del argv
  import importlib
  import specjax
  compiled = importlib.import_module("specjax.decoding.compiled")
  target = specjax.load_model("smollm2-135m")
  rng = np.random.default_rng(0)
  prompts = [rng.integers(100, 20000, _PROMPT.value).tolist() for _ in range(_BATCH.value)]
  kw = dict(eos_ids=(), temperature=0.0, draft=_DRAFT.value, k=_K.value)
  specjax.generate(target, prompts, _NEW.value, **kw)  # compile
  trace_dir = tempfile.mkdtemp(prefix="specjax_profile_")
  with jax.profiler.trace(trace_dir):
    result = specjax.generate(target, prompts, _NEW.value, **kw)
  steps = int(result.stats.rounds.max())
  hlo = list(compiled._COMPILED.values())[-1].rounds.as_text()  # the rounds just run
  index = _op_index(hlo)
  space = jax.profiler.ProfileData.from_file(
      glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)[0])
  total, count = collections.Counter(), collections.Counter()
  for plane in space.planes:
    for line in plane.lines:
      if not line.name.startswith("tf_XLAEigen"):  # XLA's compute threads
        continue
      for ev in line.events:
        if ev.name.startswith(("ThunkExecutor", "SlinkyThreadPool", "end:")):
          continue
        total[ev.name] += ev.duration_ns
        count[ev.name] += 1
  loop = {name: ns for name, ns in total.items() if count[name] >= steps / 2}
  groups = collections.Counter()
  for name, ns in loop.items():
    source = re.sub(r"\d+", "", index.get(name, ("", ""))[1]).replace("jit(run)/", "")
    groups[(re.sub(r"\.\d+$", "", name), source[-60:])] += ns
  ms = lambda ns: ns / 1e6 / steps
  lines = [f"Batch {_BATCH.value}, prompt {_PROMPT.value} tokens, {steps} rounds"
           f"{', draft ' + _DRAFT.value + f', k = {_K.value}' if _DRAFT.value else ''}; "
           f"wall {1e3 * result.stats.wall_time_s / steps:.1f} ms per round (prefill included); "
           f"loop ops {ms(sum(loop.values())):.1f} ms per round (both threads' op time summed).",
           "", "| ms per round | op kind | from |", "|---|---|---|"]
  lines += [f"| {ms(ns):.2f} | {kind} | `{src}` |" for (kind, src), ns in groups.most_common(15)]
  lines += ["", "Costliest single ops:", "", "| ms per round | op | HLO |", "|---|---|---|"]
  for name, ns in sorted(loop.items(), key=lambda kv: -kv[1])[:15]:
    lines.append(f"| {ms(ns):.2f} | {name} | `{index.get(name, ('?', ''))[0][:70]}` |")
  os.makedirs(_OUT.value, exist_ok=True)
  with open(os.path.join(_OUT.value, "ops.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  with open(os.path.join(_OUT.value, "ops.json"), "w") as f:
    json.dump({"batch": _BATCH.value, "steps": steps, "draft": _DRAFT.value,
               "groups_ms": [[k, s, ms(v)] for (k, s), v in groups.most_common()],
               "load_avg": os.getloadavg()[0]}, f, indent=1)
  print("\n".join(lines))


if __name__ == "__main__":
  app.run(main)
