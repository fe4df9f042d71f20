"""Side-by-side runs' table from their workdirs' metrics (the 1-layer vs 3-layer comparison
by default; any runs with --runs=label=workdir,...).

    python experiments/distill_smollm2/compare/table.py --w=/tmp/e3 --out=/tmp/e3/table
    python experiments/distill_smollm2/compare/table.py \
        --runs="1 block=/tmp/grow/l1,2 blocks=/tmp/grow/l2" --out=/tmp/grow/table

Copies each run's metrics.jsonl and config.json to OUT/<label>/ (the default runs: l1/, l3/)
and writes OUT/results.md:
per evaluation step, alpha and tokens per pass of the real engine (greedy, k = eval.k) on
the selection prompts, teacher-forced agreement there, and the mean of the last 5 logged
training losses before it; and the mean wall time of a training step.
"""
import json
import os
import shutil
import statistics

from absl import app, flags

flags.DEFINE_string("w", "/tmp/e3", "The comparison's root (workdirs l1/ and l3/).")
flags.DEFINE_list("runs", None, "label=workdir pairs (default: 1-layer=W/l1, 3-layer=W/l3).")
flags.DEFINE_string("out", None, "Where results.md and the copied metrics go.")
flags.mark_flags_as_required(["out"])
FLAGS = flags.FLAGS


def rows(workdir):
  out = {}
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    for line in f:
      if line.strip():
        r = json.loads(line)
        out.setdefault(r["step"], {}).update(r)
  return [out[s] for s in sorted(out)]


def main(argv):
  del argv
  runs = ([tuple(r.split("=", 1)) for r in FLAGS.runs] if FLAGS.runs else
          [("1-layer", os.path.join(FLAGS.w, "l1")), ("3-layer", os.path.join(FLAGS.w, "l3"))])
  table, step_s = {}, {}
  for n, work in runs:
    dst = os.path.join(FLAGS.out, os.path.basename(work) if not FLAGS.runs else
                       n.replace(" ", "_"))
    os.makedirs(dst, exist_ok=True)
    for name in ("metrics.jsonl", "config.json"):
      if os.path.exists(os.path.join(work, name)):
        shutil.copy(os.path.join(work, name), os.path.join(dst, name))
    rs = rows(work)
    with open(os.path.join(work, "config.json"), encoding="utf-8") as fh:
      log_every = json.load(fh)["log_every"]
    losses, times, prev_t = [], [], None
    for r in rs:
      if "loss" in r:
        losses.append(r["loss"])
        if prev_t is not None and "alpha" not in r:
          times.append(r["time"] - prev_t)
        prev_t = r["time"]
      if "alpha" in r:
        table.setdefault(r["step"], {})[n] = dict(
            alpha=r["alpha"], tpp=r["tokens_per_pass"], agree=r["heldout_top1_agree"],
            loss=sum(losses[-5:]) / len(losses[-5:]) if losses else float("nan"))
        prev_t = None  # the evaluation's time is not a training step's
    if times:
      step_s[n] = statistics.median(times) / log_every  # robust to a paused or resumed run
  names = [n for n, _ in runs]
  cols = [("alpha", "alpha", ".3f"), ("tokens/pass", "tpp", ".2f"), ("agreement", "agree", ".3f"),
          ("loss", "loss", ".3f")]
  lines = ["Seconds per training step (median wall time between logged steps, evaluations "
           "excluded): " + ", ".join(f"{n} {step_s[n]:.1f}" for n in names if n in step_s), "",
           "| step | " + " | ".join(f"{c} {n}" for c, _, _ in cols for n in names) + " |",
           "|---|" + "---|" * (len(cols) * len(names))]
  f = lambda d, n, k, fmt: format(d[n][k], fmt) if n in d else "-"
  for step in sorted(table):
    d = table[step]
    lines.append(f"| {step} | " + " | ".join(f(d, n, k, fmt) for _, k, fmt in cols for n in names)
                 + " |")
  text = "\n".join(lines) + "\n"
  with open(os.path.join(FLAGS.out, "results.md"), "w", encoding="utf-8") as fh:
    fh.write(text)
  print(text)


if __name__ == "__main__":
  app.run(main)
