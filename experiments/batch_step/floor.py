"""The machine's floor under a batched call: how fast could any implementation decode the
sweep's cases on this CPU, and so what ratio over transformers is reachable at all?

Measures, in one process, XLA's dot rate (a prefill-shaped [4096, 576] x [576, 1536] GEMM,
both threads) and the bandwidth of a read of every weight, with `pass_cost.floor_cases`,
and counts FLOPs with `pass_cost.pass_flops`; then bounds each case of a sweep's results.json
from below: the prefill at the dot rate over the prompts' real tokens (no padding), each
decode step at max(its FLOPs at the dot rate, the weights read once at the bandwidth),
attention left out. The bound is optimistic on purpose: a ratio it rules out is out of
reach for any code on this machine.

    PYTHONPATH=. python experiments/batch_step/floor.py \
        --results=experiments/batch_step/groups/results.json --out=experiments/batch_step/floor.json
"""
import json
import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "pass_cost"))
import pass_cost  # noqa: E402  (experiments/pass_cost/pass_cost.py: the floors and FLOP counts)

_RESULTS = flags.DEFINE_string("results", "experiments/batch_step/groups/results.json",
                               "A batched sweep's results.json (scripts/benchmark.py --batch).")
_OUT = flags.DEFINE_string("out", "", "Where to write the floors as JSON (none: print only).")
_REPS = flags.DEFINE_integer("repeats", 5, "Timed repetitions (the fastest counts).")


def machine(params) -> dict:
  """{"dot_gflops": the GEMM's rate, "gbytes_s": the rate of reading every weight once}."""
  cases, n_bytes, mm_flops = pass_cost.floor_cases(params, m=4096, n_cols=1536)
  sec = pass_cost.interleaved(cases, rounds=_REPS.value, n=1)
  return {"dot_gflops": mm_flops / sec["matmul"] / 1e9, "gbytes_s": n_bytes / sec["stream"] / 1e9}


def model_counts(target) -> dict:
  """Per-token FLOPs of the blocks (attention over no context) and per-row FLOPs of the
  head, and the bytes of weights a step reads."""
  cfg = target.cfg
  head = 2 * cfg.d_model * cfg.vocab_size
  return {"block_flops": pass_cost.pass_flops(cfg, 1, 0) - head, "head_flops": head,
          "weight_bytes": pass_cost.weight_bytes(target.params)}


def floors(rows: list, mach: dict, counts: dict, new_tokens: int) -> list:
  out = []
  rate, bw = mach["dot_gflops"] * 1e9, mach["gbytes_s"] * 1e9
  for r in rows:
    b, real = r["batch"], sum(r["prompt_tokens"])
    prefill = (real * counts["block_flops"] + b * counts["head_flops"]) / rate
    step = max(b * (counts["block_flops"] + counts["head_flops"]) / rate,
               counts["weight_bytes"] / bw)
    call = prefill + (new_tokens - 1) * step
    out.append({"case": r["case"], "batch": b, "real_prompt_tokens": real,
                "floor_prefill_s": prefill, "floor_step_s": step, "floor_call_s": call,
                "specjax_s": r["specjax_s"], "hf_s": r["hf_s"],
                "specjax_over_hf": r["specjax_over_hf"], "floor_over_hf": r["hf_s"] / call,
                "specjax_over_floor": r["specjax_s"] / call})
  return out


def main(argv):
  del argv
  import specjax
  res = json.load(open(_RESULTS.value))
  target = specjax.load_model(res["config"]["target"])
  mach, counts = machine(target.params), model_counts(target)
  table = floors(res["rows"], mach, counts, res["config"]["max_new_tokens"])
  print(f"dot {mach['dot_gflops']:.0f} GFLOP/s, read {mach['gbytes_s']:.1f} GB/s; "
        f"{counts['block_flops'] / 1e6:.0f} MFLOP per token in the blocks, "
        f"{counts['head_flops'] / 1e6:.0f} in the head, {counts['weight_bytes'] / 2**20:.0f} MiB of weights")
  print(f"{'case':7} {'B':>3} {'prefill s':>9} {'step ms':>8} {'call s':>7} {'specjax s':>9} "
        f"{'hf s':>6} {'specjax/hf':>10} {'floor/hf':>8} {'specjax/floor':>13}")
  for t in table:
    print(f"{t['case']:7} {t['batch']:>3} {t['floor_prefill_s']:>9.2f} {1e3 * t['floor_step_s']:>8.1f} "
          f"{t['floor_call_s']:>7.2f} {t['specjax_s']:>9.2f} {t['hf_s']:>6.2f} "
          f"{t['specjax_over_hf']:>10.2f} {t['floor_over_hf']:>8.2f} {t['specjax_over_floor']:>13.2f}")
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      json.dump({"machine": mach, "model": counts, "rows": table}, f, indent=1)


if __name__ == "__main__":
  app.run(main)
