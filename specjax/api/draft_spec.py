"""The one draft-spec grammar: strings, loaded models and drafter objects -> a drafter.

    resolve_drafter("smollm2-135m-draft+ngram:3", target)   # LookupFirstDrafter
    resolve_drafter("ngram:3", target), resolve_drafter("early_exit:8", target)

A spec is `KIND:ARG` for a registered kind (below), a model source (registry name,
directory, .gguf path, hub id) loaded as a draft model or feature draft, or
`<base>+ngram:N[:L]` (prompt lookup first, `base` elsewhere). Adding a drafter kind is a
module in `specjax.decoding.drafters` and one `register` call here.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Optional

from specjax.decoding.drafters import (DrafterBase, Eagle3Drafter, EarlyExitDrafter,
                                      FeatureDrafter, LookupFirstDrafter, MedusaDrafter,
                                      ModelDrafter, NgramDrafter, SpecError)
from specjax.decoding.drafters import lookahead
from specjax.decoding.drafters.dflash import DFlashDrafter
from specjax.decoding.drafters.peagle import PEagleDrafter
from specjax.loading import Model, draft_formats, load_model, registry
from specjax.loading.draft_formats import PublishedDraft
from specjax.models import is_feature_draft
from specjax.models import medusa as medusa_model


@dataclasses.dataclass(frozen=True)
class Kind:
  """build(arg, target) -> a drafter (arg: what follows "kind:", None without a colon);
  help: the kind's grammar, for errors and docs."""
  build: Callable[[str, Any], Any]
  help: str


KINDS: dict[str, Kind] = {}


def register(name: str, build: Callable[[str, Any], Any], help: str) -> None:
  KINDS[name] = Kind(build=build, help=help)


def grammar() -> str:
  """What a draft spec may be, for error messages."""
  kinds = ", ".join(k.help for k in KINDS.values())
  return (f"{kinds}, a model source (registry name, directory, .gguf path, hub id), or "
          "'<feature draft or early_exit:N>+ngram:N[:L]' (prompt lookup where the text "
          "repeats, the draft elsewhere; beside a tree, a lookup chain of L nodes, default "
          "the tree's depth)")


def spec_error(draft: str, problem: str) -> ValueError:
  return ValueError(f"Drafter spec {draft!r}: {problem}. A draft is {grammar()}.")


def _medusa_path(source: str) -> str:
  if source in registry.REGISTRY:
    return registry.source(source).path  # a resolver may return a `Source` or a path
  return os.path.expanduser(source)


def is_medusa_source(source: str) -> bool:
  """A registry name ending in "-medusa" or a directory holding Medusa heads."""
  if source in registry.REGISTRY:
    return source.endswith("-medusa")
  return medusa_model.is_medusa_dir(os.path.expanduser(source))


def load_medusa(source: str, target) -> MedusaDrafter:
  """A Medusa heads source (a registry name, an asset directory, or heads as FasterDecoding
  publishes them) -> drafter for target."""
  path = _medusa_path(source)
  if not medusa_model.is_medusa_dir(path) and draft_formats.detect(path) == "medusa1":
    return load_published(source, target, "medusa1")
  if not medusa_model.is_medusa_dir(path):
    raise ValueError(f"Drafter 'medusa:{source}': {path} holds no Medusa heads "
                     f"({medusa_model.META_FILE}); give a registry name such as "
                     "'smollm2-135m-medusa' or a directory written by scripts/distill_medusa.py.")
  cfg, params, _ = medusa_model.load_medusa(path)
  return MedusaDrafter.for_target(cfg, params, target, name=source)


# A published draft's kind (`loading.draft_formats`) -> its drafter: build(draft, target).
PUBLISHED: dict[str, Callable[[PublishedDraft, Any], Any]] = {
    "dflash": lambda draft, target: DFlashDrafter.for_target(draft.cfg, draft.params, target,
                                                             name=draft.name),
    "peagle": lambda draft, target: PEagleDrafter.for_target(draft.cfg, draft.params, target,
                                                             name=draft.name),
    "eagle3": lambda draft, target: Eagle3Drafter(params=draft.params, cfg=draft.cfg,
                                                  name=draft.name),
    # EAGLE-1: specjax's feature drafter with EAGLE-1's style (draft.cfg: Eagle1Config)
    "eagle1": lambda draft, target: FeatureDrafter(params=draft.params, cfg=draft.cfg.model,
                                                   style=draft.cfg.style, name=draft.name),
    # Medusa-1: specjax's Medusa drafter, each head with its own projection ("proj")
    "medusa1": lambda draft, target: MedusaDrafter.for_target(draft.cfg, draft.params, target,
                                                              name=draft.name),
}


def load_published(source: str, target, kind: str) -> Any:
  """'kind:<dir>': the published draft at dir (any format of that kind) -> its drafter."""
  path = _medusa_path(source)
  fmt = draft_formats.detect(path)
  if fmt is None:
    raise SpecError(f"{path} holds no published draft (speculators or EAGLE layout)")
  draft = draft_formats.load(path, target, source, fmt)
  if draft.kind != kind:
    raise SpecError(f"{path} holds a {draft.kind} draft ({fmt}), not {kind}")
  return from_published(draft, target)


def from_published(draft: PublishedDraft, target) -> Any:
  """A loaded `PublishedDraft` -> the drafter of its kind."""
  if draft.kind not in PUBLISHED:
    raise ValueError(f"The published draft {draft.name!r} is a {draft.kind} draft, which no "
                     f"drafter runs yet (known: {', '.join(PUBLISHED)}).")
  return PUBLISHED[draft.kind](draft, target)


register("ngram", lambda arg, target: NgramDrafter.from_spec(arg),
         "'ngram' or 'ngram:N' (prompt lookup of the last N..1 tokens, N >= 1, default 3)")
register("early_exit", lambda arg, target: EarlyExitDrafter.from_spec(arg, target.cfg),
         "'early_exit:N' (the target's first N layers)")
register("medusa", lambda arg, target: load_medusa(arg, target),
         "'medusa:<heads dir>' (specjax's or Medusa-1's published heads)")
register("eagle3", lambda arg, target: load_published(arg, target, "eagle3"),
         "'eagle3:<dir>' (a published EAGLE-3 draft: speculators or EAGLE layout)")
register("eagle1", lambda arg, target: load_published(arg, target, "eagle1"),
         "'eagle1:<dir>' (a published EAGLE-1/HASS draft: EAGLE or speculators layout)")
register("dflash", lambda arg, target: load_published(arg, target, "dflash"),
         "'dflash:<dir>' (a speculators DFlash draft: a block of drafts from one pass)")
register("peagle", lambda arg, target: load_published(arg, target, "peagle"),
         "'peagle:<dir>' (a speculators P-EAGLE draft: k parallel drafts from one pass)")
register("lookahead", lambda arg, target: lookahead.from_spec(arg, target.cfg.vocab_size),
         "'lookahead:W,N[,G]' (window, n-gram size, pooled candidates)")


def _is_model(obj) -> bool:
  """A loaded model of any class (a `Model`, a test's tiny model): weights and a config."""
  return isinstance(getattr(obj, "params", None), dict) and hasattr(obj, "cfg")


def from_model(draft, target):
  """A loaded draft model -> `FeatureDrafter` (params with "fc") or `ModelDrafter`; a
  `PublishedDraft` -> the drafter of its kind."""
  if isinstance(draft, PublishedDraft):
    return from_published(draft, target)
  if draft.cfg.vocab_size != target.cfg.vocab_size:
    raise ValueError(
        f"Vocabulary mismatch: the draft {getattr(draft, 'name', 'draft')!r} has {draft.cfg.vocab_size} tokens but "
        f"the target {getattr(target, 'name', '')!r} has {target.cfg.vocab_size}. Speculative "
        "decoding needs a draft that shares the target's tokenizer; pick a draft from the same "
        "model family, or use 'ngram:3'.")
  name = getattr(draft, "name", "draft")
  if is_feature_draft(draft.params):
    return FeatureDrafter.of(draft.params, draft.cfg, name=name)
  return ModelDrafter(params=draft.params, cfg=draft.cfg, name=name)


def is_kind_spec(source: str) -> bool:
  """True for a registered kind's spec ("ngram", "ngram:3", "early_exit:8"): no model to load."""
  kind, colon, _ = source.partition(":")
  return kind in KINDS and (bool(colon) or kind == "ngram")


def resolve_drafter(draft: Any, target, load: Optional[Callable[[str], Any]] = None) -> Any:
  """None | a spec string | a loaded `Model` | a drafter -> a drafter (None: the target
  alone). Raises one-line ValueErrors for specs outside the grammar. load(source) -> Model
  loads a model source (default `load_model(source, target=target)`; the card passes its
  mesh, dtype and fallback)."""
  if draft is None or isinstance(draft, DrafterBase):
    return draft
  if isinstance(draft, (Model, PublishedDraft)) or _is_model(draft):
    return from_model(draft, target)
  if not isinstance(draft, str):
    raise TypeError(f"Cannot use {type(draft).__name__} as a draft: pass a loaded model, a model "
                    "source, 'ngram:N' or 'early_exit:N'.")
  if "+" in draft:
    base, _, lookup = draft.rpartition("+")
    return lookup_first(base, lookup, target, draft, load)
  kind, colon, arg = draft.partition(":")
  if is_kind_spec(draft):
    try:
      return KINDS[kind].build(arg if colon else None, target)
    except SpecError as e:  # the kind's argument: name the whole spec and the grammar
      raise spec_error(draft, str(e)) from None
  if is_medusa_source(draft):
    return load_medusa(draft, target)
  if colon and not os.path.exists(os.path.expanduser(draft)):
    raise spec_error(draft, f"unknown drafter kind {kind!r}")
  load = load or (lambda source: load_model(source, target=target))
  return from_model(load(draft), target)  # a model source


def lookup_first(base: Any, lookup: str, target, spec: str = "",
                 load: Optional[Callable[[str], Any]] = None) -> LookupFirstDrafter:
  """`base` (a spec, loaded model or drafter) with prompt lookup `lookup` ("ngram[:N[:L]]")
  first. spec: the whole string, for errors."""
  spec = spec or f"{getattr(base, 'name', base)}+{lookup}"
  if base is None or (isinstance(base, str) and not base) or not lookup.startswith("ngram"):
    raise spec_error(spec, "a combined drafter is '<draft>+ngram:N', the lookup last")
  parts = lookup.split(":")
  chain = 0
  if len(parts) == 3:  # "ngram:N:L": L nodes of lookup chain beside a tree
    if not parts[2].strip().isdigit() or int(parts[2]) < 1:
      raise spec_error(spec, f"the lookup chain length {parts[2]!r} is not a positive integer")
    chain, lookup = int(parts[2]), ":".join(parts[:2])
  ngram = resolve_drafter(lookup, target)  # an NgramDrafter, or the n-gram spec's error
  base = resolve_drafter(base, target, load)
  if not base.caps.follows_verified:
    raise spec_error(spec, f"the base is a {type(base).__name__}; prompt lookup combines with "
                     "a feature draft or early_exit:N, whose state follows the verified tokens")
  return LookupFirstDrafter(base=base, n=ngram.n, chain=chain)
