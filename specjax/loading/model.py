"""`Model`: a loaded decoder in one value (config, params, tokenizer, stop ids, mesh).

What `specjax.loading.load_model` returns and the decoding loop reads; text <-> ids
helpers for scripts. Built by `loading/load.py` (and `loading/asset.py` for a shipped
draft); imports no other loading module.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.errors import LoadError
from specjax.models.config import ModelConfig
from specjax.models.transformer import forward

if TYPE_CHECKING:  # annotation only: importing transformers here would slow `import specjax`
  from transformers import PreTrainedTokenizerFast


@functools.partial(jax.jit, static_argnums=1)
def _logits(params: dict, cfg: ModelConfig, tokens: jax.Array) -> jax.Array:
  return forward(params, cfg, tokens)[0]


@dataclasses.dataclass
class Model:
  """A loaded decoder: what the decoding loop needs, plus text <-> ids helpers.

  eos_ids: stop tokens, the model's declared eos first (see `tokenizer.stop_ids`).
  tokenizer: None when the source ships none (ids-only use still works).
  mesh: the ("data", "model") mesh the params are placed on (None: one device).
  """
  name: str
  cfg: ModelConfig
  params: dict = dataclasses.field(repr=False)
  tokenizer: Optional["PreTrainedTokenizerFast"] = dataclasses.field(repr=False)
  eos_ids: tuple[int, ...]
  bos_id: Optional[int]
  mesh: Optional[jax.sharding.Mesh] = dataclasses.field(default=None, repr=False)

  def logits(self, token_ids) -> jax.Array:
    """Cache-free jitted forward: [B, T] ids -> [B, T, V] float32 ([T] -> [T, V])."""
    tokens = jnp.asarray(token_ids, jnp.int32)
    if tokens.ndim == 1:
      return _logits(self.params, self.cfg, tokens[None])[0]
    return _logits(self.params, self.cfg, tokens)

  def _tok(self):
    if self.tokenizer is None:
      raise LoadError(f"{self.name}: this model was loaded without a tokenizer; "
                      "pass token ids instead of text.")
    return self.tokenizer

  def encode(self, text: str, chat: bool = False) -> list[int]:
    """Text -> ids. chat=True wraps text as one user turn with the chat template and
    appends the assistant prompt; the template writes its own special tokens."""
    tok = self._tok()
    if not chat:
      return list(tok.encode(text))
    if not getattr(tok, "chat_template", None):
      raise LoadError(f"{self.name}: the tokenizer has no chat template; use chat=False.")
    prompt = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                     add_generation_prompt=True)
    return list(tok.encode(prompt, add_special_tokens=False))

  def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
    """ids (list, numpy or jax array) -> text."""
    return self._tok().decode(np.asarray(ids).reshape(-1).tolist(),
                              skip_special_tokens=skip_special_tokens)
