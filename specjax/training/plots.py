"""The acceptance curve over training, drawn from a workdir's metrics.jsonl."""
from __future__ import annotations

import os

from specjax.training.evaluate import read_metrics


def plot_training(workdir: str, out: str) -> str:
  """Loss (left) and held-out alpha / top-1 agreement (right) against step; returns `out`."""
  rows = read_metrics(workdir)
  train = [r for r in rows if "loss" in r]
  evals = [r for r in rows if "alpha" in r]
  if not train and not evals:
    raise ValueError(f"{workdir}: no metrics.jsonl rows to plot; run scripts/distill.py "
                     f"--workdir={workdir} first.")
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, (ax_l, ax_a) = plt.subplots(1, 2, figsize=(10, 3.8))
  ax_l.plot([r["step"] for r in train], [r["loss"] for r in train], color="C0")
  ax_l.set(xlabel="step", ylabel="distillation loss", title="training loss")
  for key, label, color in (("alpha", "alpha (engine, held-out)", "C1"),
                            ("heldout_top1_agree", "top-1 agreement (held-out)", "C2")):
    pts = [(r["step"], r[key]) for r in evals if key in r]
    if pts:
      ax_a.plot(*zip(*pts), "o-", color=color, label=label)
  ax_a.set(xlabel="step", ylabel="rate", ylim=(0, 1), title="acceptance over training")
  ax_a.legend(loc="lower right", fontsize=8)
  for ax in (ax_l, ax_a):
    ax.grid(alpha=0.3)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  fig.savefig(out, dpi=110)
  plt.close(fig)
  return out
