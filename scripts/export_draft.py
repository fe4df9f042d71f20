"""Writes an EAGLE-3, P-EAGLE or DFlash draft in speculators' format (what vLLM reads), or an
EAGLE-3 draft in the EAGLE authors' legacy layout, from a published draft directory or a
training workdir.

    python scripts/export_draft.py --draft=/path/to/eagle3_dir --target=smollm2-135m \
        --format=speculators --out=/tmp/eagle3-speculators --verifier=HuggingFaceTB/SmolLM2-135M-Instruct
    python scripts/export_draft.py --config=configs/distill.py:eagle3_tiny --workdir=/tmp/eagle3_tiny \
        --format=speculators --out=/tmp/eagle3-tiny-speculators
    python scripts/export_draft.py --config=configs/distill.py:peagle_tiny --workdir=/tmp/peagle_tiny \
        --format=speculators --out=/tmp/peagle-tiny-speculators
    python scripts/export_draft.py --config=configs/distill.py:dflash_tiny --workdir=/tmp/dflash_tiny \
        --format=speculators --out=/tmp/dflash-tiny-speculators

--draft: any EAGLE-3, P-EAGLE or DFlash directory specjax loads (speculators or legacy
layout), read for --target (a model source). --config/--workdir instead: the best checkpoint
of an EAGLE-3, P-EAGLE or DFlash training run (scripts/distill.py with an `eagle3`, `peagle`
or `dflash` block), for the config's target; a P-EAGLE (DFlash) draft is written in
speculators' peagle (dflash) format.
--verifier: the target's name recorded in speculators_config (default: the target's
source). The logic is `specjax.loading.draft_formats.save`.
"""
import sys

from absl import app, flags, logging

from config_cli import define_config

FLAGS = flags.FLAGS
define_config(None, "An EAGLE-3, P-EAGLE or DFlash training config (with --workdir), e.g. "
              "configs/distill.py:eagle3.",
              example="configs/distill.py:eagle3_tiny")
flags.DEFINE_string("workdir", None, "The EAGLE-3 / P-EAGLE / DFlash training workdir to "
                    "export (with --config).")
flags.DEFINE_string("draft", None, "The EAGLE-3 / P-EAGLE / DFlash draft directory to read "
                    "(with --target).")
flags.DEFINE_string("target", None, "The target model source the draft was made for.")
flags.DEFINE_enum("format", "speculators", ["speculators", "eagle3"], "The format to write.")
flags.DEFINE_string("out", None, "The directory to write.")
flags.DEFINE_string("verifier", None, "The verifier name to record (default: the target's source).")
flags.mark_flags_as_required(["out"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  from specjax.loading import draft_formats, load_model
  from specjax.training.checkpoints import CheckpointError
  if (FLAGS.draft is None) == (FLAGS.workdir is None):
    sys.exit("error: give --draft (with --target) or --workdir (with --config), one of them.")
  try:
    if FLAGS.workdir is not None:
      from specjax.training import dflash, eagle3, peagle
      from specjax.training.setup import setup_target
      published = (peagle.published if "peagle" in FLAGS.config else dflash.published
                   if "dflash" in FLAGS.config else eagle3.published)
      target, train_prompts, _ = setup_target(FLAGS.config)
      draft = published(FLAGS.config, FLAGS.workdir, target, train_prompts)
      source = FLAGS.config.target
    else:
      if FLAGS.target is None:
        sys.exit("error: --draft needs --target (the model source it was made for).")
      draft = draft_formats.load(FLAGS.draft, load_model(FLAGS.target), FLAGS.draft)
      source = FLAGS.target
    out = draft_formats.save(draft, FLAGS.format, FLAGS.out, verifier=FLAGS.verifier or source)
  except (ValueError, CheckpointError) as e:
    sys.exit(f"error: {e}")
  print(f"{FLAGS.format}: {out} ({draft.fmt} {draft.kind} draft, {describe(draft)})")


def describe(draft) -> str:
  """Aux layers and draft vocabulary of an EAGLE-3, P-EAGLE or DFlash draft."""
  cfg = draft.cfg
  if draft.kind == "dflash":  # speculators' aux ids, a block of drafts
    v = cfg.layers.vocab_size
    return (f"aux layers {list(cfg.aux_layer_ids)}, block {cfg.block_size}, draft vocabulary "
            f"{cfg.draft_vocab_size or v} of {v}")
  e3 = cfg.eagle3 if draft.kind == "peagle" else cfg  # P-EAGLE = EAGLE-3 + masks
  return (f"aux layers {list(e3.aux_layers)}, draft vocabulary {e3.draft_vocab_size} of "
          f"{e3.vocab_size}")


if __name__ == "__main__":
  app.run(main)
