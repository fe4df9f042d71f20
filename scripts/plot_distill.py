"""Plots a distillation run's curves from its workdir's metrics.jsonl.

    python scripts/plot_distill.py --workdir=/tmp/distill_smollm2
    python scripts/plot_distill.py --workdir=DIR --out=experiments/distill_smollm2/selfgen/training.png

Left: the training loss; right: the held-out acceptance rate alpha and top-1 agreement
measured with the real speculative engine every `eval.every` steps (the acceptance
curve over training). Writes DIR/training.png unless --out is given.
"""
import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from specjax.training.plots import plot_training  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "Distillation workdir (holds metrics.jsonl).",
                               required=True)
_OUT = flags.DEFINE_string("out", None, "PNG path (default: WORKDIR/training.png).")


def main(argv):
  del argv
  out = _OUT.value or os.path.join(_WORKDIR.value, "training.png")
  try:
    plot_training(_WORKDIR.value, out)
  except ValueError as e:
    sys.exit(f"error: {e}")
  print(out)


if __name__ == "__main__":
  app.run(main)
