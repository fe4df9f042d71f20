"""Greedy's argmax over the vocabulary: XLA's (value, index) reduction against a max and a
masked min (`specjax.sampling.argmax`), for the row counts of decode, verify and tree passes.

    python experiments/pass_cost/argmax_forms.py --out=experiments/pass_cost/argmax_forms

Times [1, T, V] float32 logits (V = 49,152, SmolLM2's vocabulary) -> [1, T] ids for T in
--ts, each compiled as the loop compiles a T-row program (`pass_options`), interleaved
(`specjax.bench.pass_cost.interleaved`); checks that both give the same ids.
Writes <out>.json and <out>.md.
"""
import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from specjax import sampling  # noqa: E402
from specjax.bench.common import write_report  # noqa: E402
from specjax.bench.pass_cost import interleaved  # noqa: E402
from specjax.models import pass_options  # noqa: E402

FORMS = {"jnp.argmax": lambda x: jnp.argmax(x, -1), "max + masked min": sampling.argmax}


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="experiments/pass_cost/argmax_forms")
  ap.add_argument("--ts", default="1,2,3,5,9,17,33")
  ap.add_argument("--vocab", type=int, default=49152)
  ap.add_argument("--rounds", type=int, default=7)
  ap.add_argument("--n", type=int, default=5)
  args = ap.parse_args()
  ts = [int(t) for t in args.ts.split(",")]
  cases = {}
  for t in ts:
    x = jnp.asarray(np.random.default_rng(t).standard_normal((1, t, args.vocab)), jnp.float32)
    outs = []
    for name, fn in FORMS.items():
      compiled = jax.jit(fn).lower(x).compile(compiler_options=pass_options.few_row_options(t) or None)
      cases[(t, name)] = (compiled, (x,))
      outs.append(np.asarray(compiled(x)))
    assert (outs[0] == outs[1]).all(), f"the forms disagree at T = {t}"
  sec = interleaved(cases, args.rounds, args.n)
  md = ["| T | " + " | ".join(f"{n} ms" for n in FORMS) + " | ratio |", "|---|---|---|---|"]
  for t in ts:
    a, b = (sec[(t, n)] * 1e3 for n in FORMS)
    md.append(f"| {t} | {a:.3f} | {b:.3f} | {a / b:.2f}x |")
  md.append("")
  md.append(f"Fastest of {args.rounds} interleaved rounds of {args.n} calls; V = {args.vocab}; "
            "the ids agree at every T.")
  write_report(args.out, {"ts": ts, "ms": {f"{t}/{n}": s * 1e3 for (t, n), s in sec.items()}},
               "\n".join(md))


if __name__ == "__main__":
  main()
