"""The vocabulary head of R rows in every form tried, under both few-row compile options.

    python experiments/pass_cost/head_forms.py --out=experiments/pass_cost/head_forms

Times x [1, R, D] -> logits [1, R, V] on the embedded target's tied [V, D] embedding for
R in --rows, interleaved (`specjax.bench.pass_cost.interleaved`), in the forms the
library has used or tried:
  matvec      one matrix-vector product per row on [V, D] (the 1-row form);
  gemm_io     x @ [D, V], a transposed copy of the embedding (the 3-8-row form until
              2026-12-03, 113 MB extra);
  weight_lhs  ([V, D] @ x^T)^T with the transpose kept apart (9-64 rows until then);
  reduce      a multiply-and-reduce over D (`transformer.head_reduce`, 2-64 rows now);
each compiled with YNNPACK fusion off (the few-row options until 2026-12-03), with
reductions only (`pass_options.FEW_ROW_CPU` now) and with XLA's defaults.
Writes <out>.json and <out>.md.
"""
import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from specjax.bench.common import write_report  # noqa: E402
from specjax.bench.pass_cost import interleaved  # noqa: E402
from specjax.loading import load_model  # noqa: E402
from specjax.models import pass_options, transformer as tf  # noqa: E402

OPTIONS = {"ynn_off": {"xla_cpu_experimental_ynn_fusion_type": ""},  # the few-row options before
           "ynn_reduce": pass_options.FEW_ROW_CPU, "defaults": {}}


def _matvec(w_t, x):
  flat = x.reshape(-1, 1, x.shape[-1])
  return jnp.concatenate([tf.matmul_t(flat[r], w_t) for r in range(flat.shape[0])], 0)


def _weight_lhs(w_t, x):
  rows = x.reshape(-1, x.shape[-1])
  return jax.lax.optimization_barrier(w_t @ rows.T).T


FORMS = {
    "matvec": lambda w_t, w_io, x: _matvec(w_t, x),
    "gemm_io": lambda w_t, w_io, x: x @ w_io,
    "weight_lhs": lambda w_t, w_io, x: _weight_lhs(w_t, x),
    "reduce": lambda w_t, w_io, x: tf.head_reduce(x, w_t),
}


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="experiments/pass_cost/head_forms")
  ap.add_argument("--rows", default="1,2,3,5,9,17,33,64")
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--n", type=int, default=3)
  args = ap.parse_args()
  target = load_model("smollm2-135m")
  w_t = target.params["embed"]  # [V, D]
  w_io = jnp.asarray(np.asarray(w_t).T)  # [D, V]
  rows = [int(r) for r in args.rows.split(",")]
  cases = {}
  for r in rows:
    x = jnp.asarray(np.random.default_rng(r).standard_normal((1, r, w_t.shape[1])), jnp.float32)
    for form, fn in FORMS.items():
      if form == "matvec" and r > 9:
        continue  # R weight reads: already the slowest at 9 rows
      for opt, o in OPTIONS.items():
        if form == "reduce" and opt == "ynn_off" and r > 3:
          continue  # XLA's own loops materialise [V, R, D]: 0.1-3 s per call, and it slows the rest
        compiled = jax.jit(fn).lower(w_t, w_io, x).compile(compiler_options=o or None)
        cases[(r, form, opt)] = (compiled, (w_t, w_io, x))
  sec = interleaved(cases, args.rounds, args.n)
  cols = [(f, o) for f in FORMS for o in OPTIONS]
  md = ["| rows | " + " | ".join(f"{f} / {o}" for f, o in cols) + " |",
        "|---" * (len(cols) + 1) + "|"]
  for r in rows:
    cells = [f"{sec[(r, f, o)] * 1e3:.2f}" if (r, f, o) in sec else "-" for f, o in cols]
    md.append(f"| {r} | " + " | ".join(cells) + " |")
  md.append("")
  md.append(f"ms per call, fastest of {args.rounds} interleaved rounds of {args.n} calls; "
            f"[V, D] = {list(w_t.shape)}.")
  write_report(args.out, {"rows": rows, "ms": {f"{r}/{f}/{o}": s * 1e3 for (r, f, o), s in
                                               sec.items()}}, "\n".join(md))


if __name__ == "__main__":
  main()
