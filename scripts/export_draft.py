"""Writes a draft trained here (a training workdir) or a published / shipped draft in the
format another engine reads: speculators' (what vLLM reads), the EAGLE authors' legacy
EAGLE-3 layout (SGLang), or a full Hugging Face directory (transformers).

    python scripts/export_draft.py --config=configs/distill.py:eagle3_tiny \
        --workdir=/tmp/eagle3_tiny --format=speculators --out=/tmp/eagle3-tiny-speculators
    python scripts/export_draft.py --config=configs/distill.py:eagle3_tiny \
        --workdir=/tmp/eagle3_tiny --format=eagle3 --out=/tmp/eagle3-tiny-legacy
    python scripts/export_draft.py --config=configs/distill.py:tiny --workdir=/tmp/distill_tiny \
        --format=hf --out=/tmp/distill-tiny-hf
    python scripts/export_draft.py --draft=smollm2-135m-draft-lm --format=hf \
        --out=/tmp/smollm2-135m-draft-lm-hf
    python scripts/export_draft.py --draft=/path/to/eagle1_dir --target=smollm2-135m \
        --format=speculators --out=/tmp/eagle1-speculators \
        --verifier=HuggingFaceTB/SmolLM2-135M-Instruct

--format=speculators: an EAGLE-3, P-EAGLE or DFlash draft in speculators' eagle3 / peagle /
dflash type, an EAGLE-1 draft (`eagle1:<dir>`) in its "eagle" type. --format=eagle3: an
EAGLE-3 draft in the legacy layout. --format=hf: an LM draft (a separate small decoder)
as a Hugging Face directory that transformers loads (`assistant_model`).
--config/--workdir: the best checkpoint (--nobest: the latest) of a scripts/distill.py run
(its `eagle3`, `peagle` or `dflash` block, or an LM `draft`; configs/distill.py:peagle_tiny
and :dflash_tiny export like :eagle3_tiny). --draft: a published draft directory read for
--target, or (--format=hf) a shipped LM draft asset, by name or directory.
--verifier: the target's name recorded in speculators_config (default: the target's source).
specjax's own feature draft (configs/distill.py's default, `selfgen`, the shipped
`smollm2-135m-draft`) has no exact form in any of them: the script says why in one line,
before loading anything. The logic is `specjax.loading.draft_formats.save` and
`specjax.training.export`.
"""
import os
import shutil
import sys

from absl import app, flags, logging

from config_cli import define_config

FLAGS = flags.FLAGS
define_config(None, "A distillation config (with --workdir), e.g. configs/distill.py:eagle3.",
              example="configs/distill.py:eagle3_tiny")
flags.DEFINE_string("workdir", None, "The training workdir to export (with --config).")
flags.DEFINE_string("draft", None, "The published draft directory to read (with --target), or "
                    "with --format=hf a shipped LM draft asset (name or directory).")
flags.DEFINE_string("target", None, "The target model source the draft was made for.")
flags.DEFINE_enum("format", "speculators", ["speculators", "eagle3", "hf"], "The format to write.")
flags.DEFINE_string("out", None, "The directory to write.")
flags.DEFINE_string("verifier", None, "The verifier name to record (default: the target's source).")
flags.DEFINE_bool("best", True, "Export a workdir's best-alpha checkpoint (else the latest).")
flags.mark_flags_as_required(["out"])

def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  if (FLAGS.draft is None) == (FLAGS.workdir is None):
    sys.exit("error: give --draft (with --target) or --workdir (with --config), one of them.")
  from specjax.errors import LoadError
  from specjax.training.checkpoints import CheckpointError
  if FLAGS.workdir is not None and FLAGS.config is None:
    sys.exit("error: --workdir needs --config (the distillation config it was trained with).")
  try:
    if FLAGS.workdir is not None:
      out, what = from_workdir(FLAGS.config, FLAGS.workdir)
    elif FLAGS.format == "hf":
      out, what = hf_from_asset(FLAGS.draft)
    else:
      out, what = published(FLAGS.draft)
  except (ValueError, LoadError, CheckpointError) as e:
    sys.exit(f"error: {e}")
  print(f"{FLAGS.format}: {out} ({what})")


def from_workdir(config, workdir: str):
  """A training workdir's draft written in --format; the refusal comes before any loading."""
  from specjax.training import export
  from specjax.training.checkpoints import require_checkpoint
  from specjax.training.draft import multi_layer
  kind = export.trained_kind(config)
  draft_cfg = config.get("draft") or {}
  line = export.refusal(kind, FLAGS.format, f"the draft of --workdir={workdir}",
                        head_vocab=draft_cfg.get("head_vocab_size", 0) > 0,
                        multi_layer=kind == "feature" and multi_layer(draft_cfg))
  if line:
    sys.exit(line)
  require_checkpoint(workdir, FLAGS.best)  # before the target loads
  if kind == "lm":
    got = export.export_checkpoint(config, workdir, hf_dir=FLAGS.out, best=FLAGS.best)
    return got["hf_dir"], f"LM draft, checkpoint step {got['step']}"
  from specjax.loading import draft_formats
  from specjax.training import dflash, eagle3, peagle
  from specjax.training.setup import setup_target
  target, train_prompts, _ = setup_target(config)
  draft = {"peagle": peagle, "dflash": dflash, "eagle3": eagle3}[kind].published(
      config, workdir, target, train_prompts, best=FLAGS.best)
  out = draft_formats.save(draft, FLAGS.format, FLAGS.out, verifier=FLAGS.verifier or config.target)
  return out, f"{draft.fmt} {draft.kind} draft, {describe(draft)}"


def published(source: str):
  """A published draft directory (read for --target) written in --format."""
  from specjax.loading import asset, draft_formats, load_model
  path = local(source)
  if asset.is_draft_asset(path):  # a shipped asset is no published format: say what it is
    sys.exit(asset_refusal(path, source) or f"error: {source} is a shipped draft asset, not a "
             f"published draft; --format={FLAGS.format} does not hold it.")
  if FLAGS.target is None:
    sys.exit("error: --draft needs --target (the model source it was made for).")
  draft = draft_formats.load(path, load_model(FLAGS.target), source)
  out = draft_formats.save(draft, FLAGS.format, FLAGS.out, verifier=FLAGS.verifier or FLAGS.target)
  return out, f"{draft.fmt} {draft.kind} draft, {describe(draft)}"


def hf_from_asset(source: str):
  """A shipped LM draft asset (a registry name or its directory) as a full Hugging Face
  directory: `asset.materialize_hf` (the full output head), copied to --out."""
  from specjax.loading import asset, draft_formats, load_model
  from specjax.training import export
  path = local(source)
  if not asset.is_draft_asset(path):
    fmt = draft_formats.detect(path) if os.path.isdir(path) else None
    if fmt is not None:  # a published draft: "eagle" is speculators' name for eagle1
      kind = fmt.split(":")[-1]
      sys.exit(export.refusal({"eagle": "eagle1"}.get(kind, kind), "hf", source))
    sys.exit(f"error: --format=hf --draft takes a shipped LM draft asset (a name such as "
             f"smollm2-135m-draft-lm, or a directory scripts/export_hf.py --asset wrote); "
             f"{source} is not one.")
  line = asset_refusal(path, source)
  if line:
    sys.exit(line)
  target = load_model(FLAGS.target or asset.target_of(path))
  built = asset.materialize_hf(path, target)
  shutil.copytree(built, FLAGS.out, ignore=shutil.ignore_patterns("DONE"), dirs_exist_ok=True)
  return FLAGS.out, f"LM draft asset {source}, full output head"


def asset_refusal(path: str, source: str):
  """`export.refusal` for a shipped draft asset (an LM draft unless its metadata says
  feature), from its metadata alone."""
  from specjax.loading.hf import read_draft_meta
  from specjax.training import export
  meta = read_draft_meta(path) or {}
  return export.refusal(meta.get("kind", "lm"), FLAGS.format, source,
                        head_vocab="head_vocab" in meta,
                        multi_layer=len(meta.get("feature_layers", ())) > 1)


def local(source: str) -> str:
  """The directory of a --draft: a registry name's (a shipped asset), else the path."""
  from specjax.loading import registry
  return registry.source(source).path if source in registry.REGISTRY else os.path.expanduser(source)


def describe(draft) -> str:
  """What a published draft holds: aux layers and draft vocabulary (EAGLE-3, P-EAGLE,
  DFlash), or layer count and options (EAGLE-1)."""
  cfg = draft.cfg
  if draft.kind == "eagle1":
    opts = [o for o, on in (("layernorms", "embed_norm" in draft.params),
                            ("fusion bias", "bias" in draft.params["fc"])) if on]
    return f"{cfg.model.n_layers} layer, {', '.join(opts) or 'no layernorms, no fusion bias'}"
  if draft.kind == "dflash":  # speculators' aux ids, a block of drafts
    v = cfg.layers.vocab_size
    return (f"aux layers {list(cfg.aux_layer_ids)}, block {cfg.block_size}, draft vocabulary "
            f"{cfg.draft_vocab_size or v} of {v}")
  e3 = cfg.eagle3 if draft.kind == "peagle" else cfg  # P-EAGLE = EAGLE-3 + masks
  return (f"aux layers {list(e3.aux_layers)}, draft vocabulary {e3.draft_vocab_size} of "
          f"{e3.vocab_size}")


if __name__ == "__main__":
  app.run(main)
