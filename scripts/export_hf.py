"""Exports a trained draft from a distillation workdir.

    python scripts/export_hf.py --config=configs/distill_smollm2.py --workdir=/tmp/distill_smollm2 \
        --asset=specjax/assets/smollm2-135m-draft
    python scripts/export_hf.py --config=configs/distill_smollm2_lm.py --workdir=/tmp/distill_smollm2_lm \
        --asset=specjax/assets/smollm2-135m-draft-lm --hf_dir=/tmp/smollm2-135m-draft-lm-hf

--asset: the shipped form (own tensors in float16, embeddings shared with the target).
--hf_dir: a full Hugging Face LlamaForCausalLM directory (config.json + safetensors +
tokenizer) that transformers can use as `assistant_model` (LM drafts only: a feature
draft reads the target's hidden states and has no transformers form).
Takes the best-alpha checkpoint (--nobest: the latest).
"""
import os

from absl import app, flags, logging
from ml_collections import config_flags

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "The distillation config.", lock_config=True)
flags.DEFINE_string("workdir", None, "The distillation workdir.")
flags.DEFINE_string("asset", None, "Write the shipped asset here.")
flags.DEFINE_string("hf_dir", None, "Write a Hugging Face directory here.")
flags.DEFINE_bool("best", True, "Export the best-alpha checkpoint (else the latest).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  from specjax.training import export
  from specjax.training.setup import setup_target
  from specjax.training.train import restore_draft
  config = FLAGS.config
  target, train_prompts, _ = setup_target(config)
  cfg, params, step = restore_draft(config, FLAGS.workdir, target, train_prompts,
                                    best=FLAGS.best, with_step=True)
  if FLAGS.asset:
    export.save_asset(cfg, params, FLAGS.asset, target=config.target,
                      config=os.path.relpath(config_flags.get_config_filename(FLAGS["config"])),
                      checkpoint_step=step)
    print("asset:", FLAGS.asset)
  if FLAGS.hf_dir:
    export.export_hf(cfg, params, FLAGS.hf_dir, tokenizer=target.tokenizer, eos_ids=target.eos_ids,
                     bos_id=target.bos_id)
    print("hf:", FLAGS.hf_dir)


if __name__ == "__main__":
  app.run(main)
