"""The pass-cost probe: c(T) of the embedded target and its parts, beside measured floors.

    python experiments/pass_cost/probe.py --out=experiments/pass_cost/results

Writes <out>.json (every figure) and <out>.md (the table). See `specjax.bench.pass_cost`.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import pass_cost  # noqa: E402
from specjax.apps.common import write_report  # noqa: E402
from specjax.loading import load_model  # noqa: E402


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="experiments/pass_cost/results")
  ap.add_argument("--ts", default="1,2,3,5,9,17,33")
  ap.add_argument("--rounds", type=int, default=7)
  ap.add_argument("--n", type=int, default=3)
  ap.add_argument("--context_len", type=int, default=112)
  ap.add_argument("--max_len", type=int, default=256)
  args = ap.parse_args()
  target = load_model("smollm2-135m")
  r = pass_cost.probe(target, ts=[int(t) for t in args.ts.split(",")], rounds=args.rounds,
                      n=args.n, context_len=args.context_len, max_len=args.max_len)
  md = pass_cost.markdown(r)
  write_report(args.out, r, md)


if __name__ == "__main__":
  main()
