"""Exports a trained draft from a distillation workdir.

    python scripts/export_hf.py --config=configs/distill.py:selfgen --workdir=/tmp/selfgen_draft \
        --asset=specjax/assets/smollm2-135m-draft
    python scripts/export_hf.py --config=configs/distill.py:lm --workdir=/tmp/distill_smollm2_lm \
        --asset=specjax/assets/smollm2-135m-draft-lm --hf_dir=/tmp/smollm2-135m-draft-lm-hf

--asset: the shipped form (own tensors in float16, embeddings shared with the target).
--hf_dir: a full Hugging Face LlamaForCausalLM directory (config.json + safetensors +
tokenizer) that transformers can use as `assistant_model` (LM drafts only: a feature
draft reads the target's hidden states and has no transformers form).
Takes the best-alpha checkpoint (--nobest: the latest).
"""
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from config_cli import define_config

FLAGS = flags.FLAGS
define_config(None, "The distillation config (configs/distill.py[:variant]).",
              example="configs/distill.py")
flags.DEFINE_string("workdir", None, "The distillation workdir.")
flags.DEFINE_string("asset", None, "Write the shipped asset here.")
flags.DEFINE_string("hf_dir", None, "Write a Hugging Face directory here.")
flags.DEFINE_bool("best", True, "Export the best-alpha checkpoint (else the latest).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  from specjax.training.checkpoints import CheckpointError
  from specjax.training.export import export_checkpoint
  config = FLAGS.config
  try:
    out = export_checkpoint(config, FLAGS.workdir, asset=FLAGS.asset, hf_dir=FLAGS.hf_dir,
                            best=FLAGS.best, config_file=os.path.relpath(
                                config_flags.get_config_filename(FLAGS["config"])))
  except CheckpointError as e:
    sys.exit(f"error: {e}")
  for key in ("asset", "hf_dir"):
    if out[key]:
      print(f"{key}: {out[key]} (checkpoint step {out['step']})")


if __name__ == "__main__":
  app.run(main)
