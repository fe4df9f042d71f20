"""Copies a Medusa training run's record into this folder and writes its table and plot.

    python experiments/medusa/collect.py --workdir=/tmp/medusa_smollm2 --out=experiments/medusa

Writes config.json, metrics.jsonl and summary.json (copied), results.md (held-out
top-1 accuracy of each head, engine alpha and tokens per pass at every evaluation) and
training.png (the same over steps, with the training loss).
"""
import json
import os
import shutil
import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "The training workdir.")
flags.DEFINE_string("out", "experiments/medusa", "Where the record goes.")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  del argv
  os.makedirs(FLAGS.out, exist_ok=True)
  for name in ("config.json", "metrics.jsonl", "summary.json"):
    src = os.path.join(FLAGS.workdir, name)
    if os.path.exists(src):
      shutil.copy(src, os.path.join(FLAGS.out, name))
  with open(os.path.join(FLAGS.workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  evals = {}
  for r in rows:  # a resumed run repeats some steps: the last row of a step counts
    if "alpha" in r or "heldout_acc_h0" in r:
      evals[r["step"]] = r
  losses = {r["step"]: r["loss"] for r in rows if "loss" in r}
  heads = sorted(int(k[len("heldout_acc_h"):]) for k in next(iter(evals.values())) if
                 k.startswith("heldout_acc_h"))
  lines = ["| step | " + " | ".join(f"head {i} acc (t+{i + 2})" for i in heads) +
           " | alpha | tokens/pass |", "|---" * (len(heads) + 3) + "|"]
  for step in sorted(evals):
    e = evals[step]
    lines.append(f"| {step} | " + " | ".join(f"{e[f'heldout_acc_h{i}']:.3f}" for i in heads) +
                 f" | {e.get('alpha', float('nan')):.3f} | {e.get('tokens_per_pass', float('nan')):.2f} |")
  with open(os.path.join(FLAGS.out, "results.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines))

  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
  steps = sorted(losses)
  a.plot(steps, [losses[s] for s in steps])
  a.set(xlabel="step", ylabel="Medusa-1 loss (sum of 0.8^i-weighted CE)", title="training loss")
  es = sorted(evals)
  for i in heads:
    b.plot(es, [evals[s][f"heldout_acc_h{i}"] for s in es], "o-", label=f"head {i} top-1 (t+{i + 2})")
  b.plot(es, [evals[s].get("alpha") for s in es], "k^--", label="engine alpha (chain)")
  b.set(xlabel="step", ylim=(0, 1), title="held-out")
  b.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(os.path.join(FLAGS.out, "training.png"), dpi=110)


if __name__ == "__main__":
  app.run(main)
