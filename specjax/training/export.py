"""Training-side export: a distillation run's draft -> shipped asset or Hugging Face directory.

    export_checkpoint(config, workdir, asset="specjax/assets/smollm2-135m-draft")
    trained_kind(config)          # "lm", "feature", "eagle3", "peagle", "dflash" or "medusa"
    not_speculators_eagle(...)    # why a feature draft has no exact speculators "eagle" form

The formats themselves belong to inference and live in `specjax.loading`: the shipped
asset (`loading/asset.py`: save_asset, load_asset, materialize_hf, with_head_kernel) and
the Hugging Face directory writer (`loading/hf_export.py`: export_hf). They are
re-exported here for the trainer's callers; `specjax.loading` never imports training.
"""
from __future__ import annotations

from typing import Optional

from specjax.loading.asset import (FC_TENSOR, load_asset, materialize_hf, read_asset,
                                   save_asset, with_head_kernel)
from specjax.loading.draft_formats import WRITERS
from specjax.loading.hf_export import export_hf, hf_config, hf_tensors

__all__ = ["export_checkpoint", "trained_kind", "not_speculators_eagle", "FC_TENSOR", "load_asset",
           "materialize_hf", "read_asset", "save_asset", "with_head_kernel", "export_hf",
           "hf_config", "hf_tensors"]


def export_checkpoint(config, workdir: str, asset: Optional[str] = None,
                      hf_dir: Optional[str] = None, best: bool = True,
                      config_file: Optional[str] = None) -> dict:
  """Restores the run's draft (best-alpha checkpoint, or the latest with best=False) and
  writes it as an asset (embeddings shared with config.target) and/or an HF directory.

  Returns {"step": checkpoint step, "asset": path or None, "hf_dir": path or None}.
  """
  from specjax.training.setup import setup_target
  from specjax.training.checkpoints import require_checkpoint
  from specjax.training.train import restore_draft
  require_checkpoint(workdir, best)  # before the target loads and the pools are sampled
  target, train_prompts, _ = setup_target(config)
  cfg, params, step = restore_draft(config, workdir, target, train_prompts, best=best,
                                    with_step=True)
  if asset:
    extra = {"config": config_file} if config_file else {}
    save_asset(cfg, params, asset, target=config.target, **extra, checkpoint_step=step)
  if hf_dir:
    export_hf(cfg, params, hf_dir, tokenizer=target.tokenizer, eos_ids=target.eos_ids,
              bos_id=target.bos_id)
  return {"step": step, "asset": asset, "hf_dir": hf_dir}


HEAD_KINDS = ("peagle", "dflash", "eagle3", "medusa")  # a config block of its own: that trainer


def trained_kind(config) -> str:
  """What a distillation config trains: "peagle", "dflash", "eagle3" or "medusa" (the
  config's block of that name), else config.draft's kind: "feature" (EAGLE-style, over the
  target's features) or "lm" (a separate small decoder). Reads the config only."""
  from specjax.training.draft import is_feature
  for kind in HEAD_KINDS:
    if kind in config:
      return kind
  return "feature" if is_feature(config.draft) else "lm"


def not_speculators_eagle(head_vocab: bool, multi_layer: bool) -> str:
  """Why specjax's feature draft (`models/feature_draft.py`) does not map exactly onto
  speculators' "eagle" type (EAGLE-1/HASS, `loading/draft_formats/eagle1.py`), the one
  published format of a draft over the target's last hidden state: the clauses that hold
  for a draft with an FR-Spec head (`head_vocab`) and/or several feature layers."""
  why = ["its fc scales the predicted feature it feeds back to unit RMS, a nonlinearity that "
         "eagle's fusion_fc lacks (it takes the draft's raw output)",
         "it reads the target's last hidden state before the final norm (eagle: after it)"]
  if multi_layer:
    why.append("it reads several target layers (feature_layers) where eagle reads the last one")
  if head_vocab:
    why.append("its FR-Spec head (head_vocab) gives q = 0 outside its ids where an eagle draft "
               "scores the target's full head")
  return ("; ".join(why) + " (docs/extending.md, 'EAGLE-1 and Medusa-1 beside specjax's own "
          "drafts', tables the differences)")


FEATURE_LEAD = {  # how a feature draft misses each format, before the eagle clauses
    "speculators": "does not map exactly onto",
    "eagle3": "is not EAGLE-3 (the eagle3 layout) and does not map exactly onto",
    "hf": ("reads the target's hidden states, so it has no Hugging Face (transformers) form, "
           "and does not map exactly onto")}
FEATURE_HELP = ("; for vLLM, train an EAGLE-3 draft (configs/distill.py:eagle3) and write it "
                "with --format=speculators.")
FEATURE_READERS = ("eagle3", "peagle", "dflash", "eagle1")  # drafts over target features


def refusal(kind: str, fmt: str, what: str, head_vocab=False, multi_layer=False):
  """The one line that refuses a (draft kind, format) pair no writer holds, else None:
  decided from the config or the asset's metadata, before any model loads."""
  if kind == "feature":
    return (f"error: {what} is specjax's feature draft, which {FEATURE_LEAD[fmt]} speculators' "
            f"'eagle' type (EAGLE-1/HASS): {not_speculators_eagle(head_vocab, multi_layer)}"
            f"{FEATURE_HELP}")
  if kind == "lm":
    return None if fmt == "hf" else (
        f"error: {what} is an LM draft (a separate small decoder, no target features): write "
        "it with --format=hf.")
  if fmt == "hf":
    then = "; write it with --format=speculators." if kind in FEATURE_READERS else "."
    return (f"error: {what} is a draft of kind {kind}: it reads the target's hidden states, "
            f"so it has no Hugging Face (transformers) form{then}")
  if kind not in WRITERS[fmt]:
    return (f"error: {what} is a draft of kind {kind}, which --format={fmt} does not hold "
            f"(it holds {', '.join(WRITERS[fmt])} drafts).")
  return None
