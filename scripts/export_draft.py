"""Writes a published EAGLE-3 draft in speculators' format (what vLLM reads) or the EAGLE
authors' legacy layout.

    python scripts/export_draft.py --draft=/path/to/eagle3_dir --target=smollm2-135m \
        --format=speculators --out=/tmp/eagle3-speculators --verifier=HuggingFaceTB/SmolLM2-135M-Instruct

--draft: any EAGLE-3 directory specjax loads (speculators or legacy layout), read for
--target (a model source). --verifier: the target's name recorded in speculators_config
(default: --target). The logic is `specjax.loading.draft_formats.save`.
"""
import sys

from absl import app, flags, logging

FLAGS = flags.FLAGS
flags.DEFINE_string("draft", None, "The EAGLE-3 draft directory to read.")
flags.DEFINE_string("target", None, "The target model source the draft was made for.")
flags.DEFINE_enum("format", "speculators", ["speculators", "eagle3"], "The format to write.")
flags.DEFINE_string("out", None, "The directory to write.")
flags.DEFINE_string("verifier", None, "The verifier name to record (default: --target).")
flags.mark_flags_as_required(["draft", "target", "out"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  from specjax.loading import draft_formats, load_model
  try:
    target = load_model(FLAGS.target)
    draft = draft_formats.load(FLAGS.draft, target, FLAGS.draft)
    out = draft_formats.save(draft, FLAGS.format, FLAGS.out, verifier=FLAGS.verifier or FLAGS.target)
  except ValueError as e:
    sys.exit(f"error: {e}")
  print(f"{FLAGS.format}: {out} ({draft.fmt} draft, aux layers {list(draft.cfg.aux_layers)}, "
        f"draft vocabulary {draft.cfg.draft_vocab_size} of {draft.cfg.vocab_size})")


if __name__ == "__main__":
  app.run(main)
