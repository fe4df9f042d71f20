"""Distils a draft for speculative decoding (DistillSpec-style); logic in specjax.training.

    python scripts/distill.py --config=configs/distill.py --workdir=/tmp/distill_smollm2
    python scripts/distill.py --config=configs/distill.py:tiny --workdir=/tmp/t --config.num_steps=20
    python scripts/distill.py --config=configs/distill.py --workdir=/tmp/d --config.mesh=2,4
    python scripts/distill.py --config=configs/distill.py:medusa_tiny --workdir=/tmp/m
    python scripts/distill.py --config=configs/distill.py:peagle_tiny --workdir=/tmp/p
    python scripts/distill.py --config=configs/distill.py:dflash_tiny --workdir=/tmp/f

The config's variant picks the task: a draft model (LM or feature draft), Medusa heads
for a config with a `medusa` block (scripts/distill_medusa.py adds their export), or an
EAGLE-3 draft for one with an `eagle3` block (`specjax.training.eagle3`), a P-EAGLE
draft for one with a `peagle` block (`specjax.training.peagle`), or a DFlash draft for one
with a `dflash` block (`specjax.training.dflash`); all run the one loop of
`specjax.training.loop`.

Rerunning the same command on the same workdir resumes from the newest checkpoint;
--stop_at=N ends a call after step N (train in chunks); --max_seconds=S ends it at the first
step past S seconds of wall time, evaluated and saved (a lease of fixed length).
The workdir receives config.json, metrics.jsonl, TensorBoard events (tb/), the
sampled data pools (data/), checkpoints/ (latest) and best/ (highest held-out alpha),
and summary.json at the end. Add --distributed on a multi-host TPU/GPU job to call
jax.distributed.initialize() first.
"""
import json
import os

from absl import app, flags, logging

from config_cli import define_config

FLAGS = flags.FLAGS
define_config(None, "Distillation config (configs/distill.py[:variant]).",
              example="configs/distill.py")
flags.DEFINE_string("workdir", None, "Where checkpoints, metrics and data pools go.")
flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() (multi-host).")
flags.DEFINE_integer("stop_at", None, "End this call after that step (a resumable chunk; "
                     "make it a multiple of config.ckpt_every so the chunk ends saved).")
flags.DEFINE_float("max_seconds", None, "Wall-clock budget of this call, set-up included: the "
                   "first step past it is evaluated and saved, then the call ends (resumable).")
flags.mark_flags_as_required(["config", "workdir"])


def save_config(config, workdir: str) -> None:
  """Writes config.json; a resumed run with a different config keeps both (config.N.json)."""
  os.makedirs(workdir, exist_ok=True)
  text = config.to_json_best_effort(indent=2, sort_keys=True)
  path = os.path.join(workdir, "config.json")
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      if f.read() == text:
        return
    n = 1
    while os.path.exists(os.path.join(workdir, f"config.{n}.json")):
      n += 1
    path = os.path.join(workdir, f"config.{n}.json")
    logging.warning("The config differs from the workdir's config.json; saved as %s.", path)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  import jax
  if FLAGS.distributed:
    jax.distributed.initialize()
  from specjax.training import data as data_lib
  from specjax.training.setup import setup_target
  from specjax.training.medusa import train_medusa
  from specjax.training.train import train
  config, workdir = FLAGS.config, FLAGS.workdir
  from specjax.parallel import make_mesh
  try:
    make_mesh(config.get("mesh"))  # a malformed --config.mesh= is one clear line, before any work
  except ValueError as e:
    raise SystemExit(f"error: {e}") from None
  if jax.process_index() == 0:
    save_config(config, workdir)
  target, train_prompts, heldout_prompts = setup_target(config)
  n_train = sum(map(len, data_lib.prompt_sets(train_prompts).values()))
  print(f"Target {target.name}, {n_train} train / {len(heldout_prompts)} held-out "
        f"prompts, {jax.device_count()} devices.", flush=True)
  from specjax.training.eagle3 import train_eagle3
  from specjax.training.dflash import train_dflash
  from specjax.training.peagle import train_peagle
  # the task: Medusa heads, an EAGLE-3, P-EAGLE or DFlash draft, or a draft model (LM or
  # feature draft)
  run = (train_medusa if "medusa" in config else train_eagle3 if "eagle3" in config
         else train_peagle if "peagle" in config else train_dflash if "dflash" in config
         else train)
  summary = run(config, workdir, target, train_prompts, heldout_prompts,
                log=lambda msg: print(msg, flush=True), stop_at=FLAGS.stop_at,
                max_seconds=FLAGS.max_seconds, progress=True)
  if jax.process_index() == 0:
    with open(os.path.join(workdir, "summary.json"), "w", encoding="utf-8") as f:
      json.dump({k: summary[k] for k in ("metrics", "latest_step", "best_step")}, f, indent=2)
    print(json.dumps({k: summary[k] for k in ("metrics", "latest_step", "best_step")}))


if __name__ == "__main__":
  app.run(main)
