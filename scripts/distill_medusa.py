"""Trains Medusa heads for a frozen target (Medusa-1); logic in specjax.training.medusa.

    python scripts/distill_medusa.py --config=configs/distill.py:medusa --workdir=/tmp/medusa_smollm2
    python scripts/distill_medusa.py --config=configs/distill.py:medusa_tiny --workdir=/tmp/m \
        --config.num_steps=20

Rerunning the same command on the same workdir resumes from the newest checkpoint. The
workdir receives config.json, metrics.jsonl, the cached pools (data/), checkpoints/
(latest) and best/ (highest held-out alpha) and summary.json. --export=DIR writes the
best heads as an asset (medusa.safetensors + specjax_medusa.json) after training.
"""
import json
import os

from absl import app, flags, logging

from config_cli import ROOT, define_config

FLAGS = flags.FLAGS
define_config(None, "Medusa training config (configs/distill.py:medusa or :medusa_tiny).",
              example="configs/distill.py:medusa")
flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and data pools go.")
flags.DEFINE_string("export", None, "Write the best heads as an asset directory here.")
flags.DEFINE_bool("export_only", False, "Skip training: export the workdir's best heads.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  from specjax.models.medusa import save_medusa
  from specjax.training import data as data_lib
  from specjax.training import medusa as medusa_train
  from specjax.training.setup import setup_target
  config, workdir = FLAGS.config, FLAGS.workdir
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
    f.write(config.to_json_best_effort(indent=2, sort_keys=True))
  target, train_prompts, heldout_prompts = setup_target(config)
  n_train = sum(map(len, data_lib.prompt_sets(train_prompts).values()))
  print(f"Target {target.name}, {n_train} train / {len(heldout_prompts)} held-out prompts.",
        flush=True)
  if not FLAGS.export_only:
    summary = medusa_train.train_medusa(config, workdir, target, train_prompts, heldout_prompts,
                                        log=lambda msg: print(msg, flush=True))
    out = {k: summary[k] for k in ("metrics", "latest_step", "best_step")}
    with open(os.path.join(workdir, "summary.json"), "w", encoding="utf-8") as f:
      json.dump(out, f, indent=2)
    print(json.dumps(out), flush=True)
  if FLAGS.export:
    cfg, params, step = medusa_train.restore_heads(config, workdir, target, train_prompts)
    source = os.path.relpath(os.path.abspath(str(FLAGS["config"].config_filename)), ROOT)
    save_medusa(cfg, params, FLAGS.export, target=config.target,
                extra={"step": step, "config": source})
    print(f"Wrote the heads of step {step} to {FLAGS.export}.", flush=True)


if __name__ == "__main__":
  app.run(main)
