"""Published draft formats: which one a directory holds, and the loader that reads it.

    fmt = detect(path)                      # a FORMATS key, or None (not a published draft)
    draft = load(path, target, name=source) # -> PublishedDraft, checked against the target

Formats and the module that reads each:

  "speculators:eagle3"  vllm-project/speculators, speculators_model_type "eagle3"
                        (speculators_config, transformer_layer_config, aux layer ids,
                        d2t/t2d; tensors fc, layers.{i}.*, norm, lm_head)  speculators_format
  "speculators:eagle"   speculators type "eagle" (EAGLE-1 / HASS)          eagle1
  "eagle3"              the EAGLE authors' / SpecForge layout: architectures
                        LlamaForCausalLMEagle3 (or draft_vocab_size), fc, midlayer.*,
                        norm, lm_head, d2t, t2d; safetensors or torch .bin  eagle3_legacy
  "eagle1"              EAGLE-1: fc [2D -> D] and layers.{i}.* over one hidden state,
                        no lm_head (a guess from tensor names; speculators' type is surer)  eagle1
  "medusa1"             Medusa-1 heads: {head}.{layer}.linear.*, medusa_num_heads   medusa1

A loader module has `load(path, target, name, fmt) -> PublishedDraft` and raises one
LoadError line, before reading any weights where it can, for a checkpoint made for
another target (hidden size, vocabulary, layer ids beyond its depth). `kind` names the
drafter that runs it: `specjax.api.draft_spec` maps kinds to drafters (loading never
imports decoding).
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
from typing import Any, Optional

from specjax.errors import LoadError
from specjax.loading.hf import DRAFT_META_FILE

PACKAGE = "specjax.loading.draft_formats"
# format -> loader module (in this package)
FORMATS = {
    "speculators:eagle3": "speculators_format",
    "speculators:eagle": "eagle1",
    "eagle3": "eagle3_legacy",
    "eagle1": "eagle1",
    "medusa1": "medusa1",
    "speculators:dflash": "dflash",
    "speculators:peagle": "peagle",
}
# speculators_model_type -> format; other types are named in the error
SPECULATORS_TYPES = {"eagle3": "speculators:eagle3", "eagle": "speculators:eagle",
                     "dflash": "speculators:dflash", "peagle": "speculators:peagle"}
LEGACY_EAGLE3_ARCHS = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")


@dataclasses.dataclass
class PublishedDraft:
  """A published draft read for one target.

  kind: the drafter kind that runs it ("eagle3", "eagle1", "medusa1").
  fmt: the format it was read from (a FORMATS key).
  cfg: the kind's static (hashable) config; params: its weights (jax arrays), the
    target's embeddings included where the draft shares them.
  verifier: the target the checkpoint names (speculators' verifier name_or_path), or None.
  """
  name: str
  kind: str
  fmt: str
  cfg: Any
  params: dict = dataclasses.field(repr=False)
  verifier: Optional[str] = None


def read_config(path: str) -> Optional[dict]:
  """config.json of a directory (None where there is none)."""
  cfg_path = os.path.join(path, "config.json")
  if not os.path.isfile(cfg_path):
    return None
  try:
    with open(cfg_path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise LoadError(f"{path}: cannot read config.json ({e}); the file is corrupt.") from None


def tensor_names(path: str) -> set:
  """Tensor names of a directory's safetensors files (or their index), else of its torch
  .bin files, without reading weights."""
  names = set()
  index = os.path.join(path, "model.safetensors.index.json")
  if os.path.isfile(index):
    with open(index, encoding="utf-8") as f:
      return set(json.load(f).get("weight_map", {}))
  from safetensors import safe_open  # local: keeps `import specjax` light
  for f in sorted(os.listdir(path)):
    if f.endswith(".safetensors"):
      try:
        with safe_open(os.path.join(path, f), framework="numpy") as h:
          names |= set(h.keys())
      except Exception as e:  # safetensors raises its own error types
        raise LoadError(f"{path}: cannot read {f} ({type(e).__name__}: {e}); the file is "
                        "corrupt or truncated.") from None
  if not names:
    from specjax.loading.draft_formats import torch_file
    for f in sorted(os.listdir(path)):
      if f.endswith(".bin") and f.startswith("pytorch_model"):
        try:
          names |= torch_file.torch_file_names(os.path.join(path, f), path)
        except LoadError:  # not a draft we know: the model loader says what is wrong
          return set()
  return names


def detect(path: str) -> Optional[str]:
  """The published draft format of a directory (a FORMATS key), or None for anything
  else (a plain Hugging Face model, a shipped draft asset, a file)."""
  if not os.path.isdir(path) or os.path.isfile(os.path.join(path, DRAFT_META_FILE)):
    return None  # not a directory, or specjax's own (a draft asset or export)
  hf = read_config(path)
  if hf is None:
    return None
  stype = hf.get("speculators_model_type")
  if stype is None and isinstance(hf.get("speculators_config"), dict):
    stype = hf["speculators_config"].get("algorithm")
  if stype is not None:
    if stype not in SPECULATORS_TYPES:
      raise LoadError(f"{path}: a speculators draft of type {stype!r}, which specjax does not "
                      f"load (it loads {', '.join(SPECULATORS_TYPES)}).")
    return SPECULATORS_TYPES[stype]
  archs = hf.get("architectures") or []
  if any(a in LEGACY_EAGLE3_ARCHS for a in archs) or "draft_vocab_size" in hf:
    return "eagle3"
  if "medusa_num_heads" in hf:
    return "medusa1"
  names = tensor_names(path)
  if any(n.startswith("midlayer.") for n in names):
    return "eagle3"
  if "fc.weight" in names and not any(n.startswith("lm_head") for n in names):
    return "eagle1"
  return None


def load(path: str, target, name: Optional[str] = None, fmt: Optional[str] = None,
         dtype=None) -> PublishedDraft:
  """Reads the published draft at `path` for `target` (a loaded Model: its config and
  embeddings). fmt: the format (default: `detect`). dtype: of the float params
  (default float32)."""
  name = name or path
  fmt = fmt or detect(path)
  if fmt is None:
    raise LoadError(f"{name}: {path} holds no published draft format specjax knows "
                    f"({', '.join(FORMATS)}).")
  if fmt not in FORMATS:
    raise LoadError(f"{name}: unknown draft format {fmt!r}; known: {', '.join(FORMATS)}.")
  module = f"{PACKAGE}.{FORMATS[fmt]}"
  try:
    loader = importlib.import_module(module)
  except ModuleNotFoundError as e:
    if e.name != module:
      raise
    raise LoadError(f"{name}: a {fmt} draft, whose loader ({module}) is not part of this "
                    "specjax yet.") from None
  return loader.load(path, target, name, fmt, **({} if dtype is None else {"dtype": dtype}))


# Formats a draft can be written in (`save`): name -> {draft kind: writer module (its
# `save(draft, out_dir, verifier)`)}.
WRITERS = {"speculators": {"eagle3": "speculators_format", "peagle": "peagle", "dflash": "dflash",
                           "eagle1": "eagle1"},
           "eagle3": {"eagle3": "eagle3_legacy"}}


def save(draft: PublishedDraft, fmt: str, out_dir: str, verifier: Optional[str] = None) -> str:
  """Writes `draft` in format `fmt` (a WRITERS key) to out_dir; verifier: the target's name
  (a hub id or path) for formats that record it. Returns out_dir."""
  if fmt not in WRITERS:
    raise ValueError(f"Unknown draft format {fmt!r} to write; known: {', '.join(WRITERS)}.")
  kinds = WRITERS[fmt]
  if draft.kind not in kinds:
    raise ValueError(f"A {draft.kind} draft cannot be written as {fmt!r} (it holds "
                     f"{', '.join(kinds)} drafts).")
  return importlib.import_module(f"{PACKAGE}.{kinds[draft.kind]}").save(draft, out_dir,
                                                                         verifier=verifier)
