"""Hub ids (`gpt2`, `HuggingFaceTB/SmolLM2-360M-Instruct`) -> local snapshot directory.

The local Hugging Face cache is tried first (no network); only then a download, and
a failure of both is ONE LoadError line saying the model is neither cached nor
reachable (the hub client's own exception chain is summarised, not re-raised).
Only config, tokenizer and safetensors files are fetched.

A hub id is `org/name`; bare names exist only for a few legacy repositories
(`BARE_HUB_IDS`, the GPT-2 family specjax loads). Any other bare name is a hub id only
when it is already in the local cache, so a mistyped model name fails at once instead
of waiting on the network.
"""
from __future__ import annotations

import os
import re
from typing import Optional

from specjax.errors import LoadError

ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.jinja", "tokenizer*"]
BARE_HUB_IDS = frozenset({"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "distilgpt2"})
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?$")


def looks_like_hub_id(source: str) -> bool:
  """`name` or `org/name`, no path syntax."""
  return bool(_HUB_ID.match(source)) and ".." not in source and not source.endswith(".gguf")


def is_plausible_hub_id(source: str) -> bool:
  """`org/name`, or a bare legacy name (`gpt2`): worth asking the hub about."""
  return looks_like_hub_id(source) and ("/" in source or source in BARE_HUB_IDS)


def _offline() -> bool:
  from huggingface_hub import constants
  env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
  return env or bool(constants.HF_HUB_OFFLINE)


def _one_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def cached_snapshot(repo_id: str) -> Optional[str]:
  """The repo's directory in the local Hugging Face cache, or None (never the network)."""
  from huggingface_hub import snapshot_download
  try:
    return snapshot_download(repo_id, local_files_only=True, allow_patterns=ALLOW_PATTERNS)
  except Exception:  # noqa: BLE001 - LocalEntryNotFoundError, HFValidationError, ...: not cached
    return None


def snapshot(repo_id: str, hint: str = "") -> str:
  """Local directory holding the repo's files (cache first, then download)."""
  from huggingface_hub import snapshot_download
  cached = cached_snapshot(repo_id)
  if cached is not None:
    return cached
  what = "download it where the hub is reachable or pass a local directory / .gguf path."
  if _offline():
    raise LoadError(f"{repo_id}: not in the local Hugging Face cache and the hub is disabled "
                    f"(HF_HUB_OFFLINE); {what}{hint}")
  try:
    return snapshot_download(repo_id, allow_patterns=ALLOW_PATTERNS, etag_timeout=10)
  except Exception as e:  # noqa: BLE001 - summarised in one line below
    reason = _one_line(e)
  raise LoadError(f"{repo_id}: not in the local Hugging Face cache and the hub could not "
                  f"provide it ({reason}); {what}{hint}")
