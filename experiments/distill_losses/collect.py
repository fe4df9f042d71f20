"""Alpha before and after distillation, per loss, from distillation workdirs.

    python experiments/distill_losses/collect.py --config=configs/distill.py:tiny \
        --workdirs=/tmp/dl_fkl,/tmp/dl_rkl,/tmp/dl_jsd,/tmp/dl_tvd --out=results.json

For each workdir: the draft at initialisation ("before", rebuilt exactly as the trainer
builds it) and the best-alpha checkpoint ("after"), both run through the real
speculative engine on the held-out prompts, greedy and at temperature 1, k from the
config's eval section. Prints a markdown table.
"""
import json
import os
import sys

from absl import app, flags
from ml_collections import config_flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "The distillation config (as trained).")
flags.DEFINE_list("workdirs", None, "Distillation workdirs, one per loss.")
flags.DEFINE_list("temperatures", ["0", "1"], "Evaluation temperatures.")
flags.DEFINE_string("out", None, "Write the results JSON here.")
flags.mark_flags_as_required(["config", "workdirs"])


def main(argv):
  del argv
  from specjax.training.setup import setup_target
  from specjax.training.train import engine_eval, prepare_draft, restore_draft
  base = FLAGS.config
  target, train_prompts, heldout = setup_target(base)
  ev, rows = base.eval, []
  for wd in FLAGS.workdirs:
    with open(os.path.join(wd, "config.json")) as f:
      loss = json.load(f)["loss"]["name"]
    cfg0, params0, _ = prepare_draft(base, wd, target, train_prompts, log=lambda *_: None)
    cfg1, params1 = restore_draft(base, wd, target, train_prompts, best=True)
    row = {"loss": loss, "workdir": wd}
    for t in [float(x) for x in FLAGS.temperatures]:
      for tag, c, p in (("before", cfg0, params0), ("after", cfg1, params1)):
        r = engine_eval(target, c, p, heldout, max_new_tokens=ev.max_new_tokens, k=ev.k,
                        temperature=t, seed=base.seed)
        row[f"alpha_{tag}_T{t:g}"] = r["alpha"]
        row[f"tokens_per_pass_{tag}_T{t:g}"] = r["tokens_per_pass"]
    rows.append(row)
  temps = [f"{float(x):g}" for x in FLAGS.temperatures]
  head = "| loss | " + " | ".join(f"alpha before T={t} | alpha after T={t} | tok/pass after T={t}"
                                   for t in temps) + " |"
  lines = [head, "|" + "---|" * (1 + 3 * len(temps))]
  for r in rows:
    lines.append(f"| {r['loss']} | " + " | ".join(
        f"{r[f'alpha_before_T{t}']:.3f} | {r[f'alpha_after_T{t}']:.3f} | "
        f"{r[f'tokens_per_pass_after_T{t}']:.2f}" for t in temps) + " |")
  print("\n".join(lines))
  if FLAGS.out:
    with open(FLAGS.out, "w") as f:
      json.dump({"k": ev.k, "max_new_tokens": ev.max_new_tokens, "rows": rows}, f, indent=2)


if __name__ == "__main__":
  app.run(main)
