"""Hub ids (`gpt2`, `HuggingFaceTB/SmolLM2-360M-Instruct`) -> local snapshot directory.

The local Hugging Face cache is tried first (no network); only then a download, and
a failure of both is one LoadError saying the model is neither cached nor reachable.
Only config, tokenizer and safetensors files are fetched.
"""
from __future__ import annotations

import os
import re

from specjax.errors import LoadError

ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.jinja", "tokenizer*"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?$")


def looks_like_hub_id(source: str) -> bool:
  """`name` or `org/name`, no path syntax."""
  return bool(_HUB_ID.match(source)) and ".." not in source and not source.endswith(".gguf")


def _offline() -> bool:
  from huggingface_hub import constants
  env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
  return env or bool(constants.HF_HUB_OFFLINE)


def snapshot(repo_id: str, hint: str = "") -> str:
  """Local directory holding the repo's files (cache first, then download)."""
  from huggingface_hub import snapshot_download
  try:
    return snapshot_download(repo_id, local_files_only=True, allow_patterns=ALLOW_PATTERNS)
  except Exception as cached_error:  # LocalEntryNotFoundError, HFValidationError, ...
    first = cached_error
  if _offline():
    raise LoadError(f"{repo_id}: not in the local Hugging Face cache and the hub is disabled "
                    f"(HF_HUB_OFFLINE); download it where the hub is reachable or pass a local "
                    f"directory / .gguf path.{hint}") from first
  try:
    return snapshot_download(repo_id, allow_patterns=ALLOW_PATTERNS, etag_timeout=10)
  except Exception as e:
    raise LoadError(f"{repo_id}: not in the local Hugging Face cache and the hub could not be "
                    f"reached ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                    f"download it where the hub is reachable or pass a local directory / .gguf "
                    f"path.{hint}") from e
