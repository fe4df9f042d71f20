"""`load_model(source)` -> `Model`: config, params, tokenizer and stop ids in one value.

Sources, tried in this order:
  1. a registry name (`smollm2-135m`; see `specjax.loading.registry`),
  2. a local path: a `.gguf` file or a Hugging Face directory (config.json + safetensors),
  3. a hub id (`org/name`, or a legacy bare name such as `gpt2`), from the local cache or
     downloaded. Anything else fails at once with the registry's names.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import os
from typing import TYPE_CHECKING, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.errors import LoadError
from specjax.loading import asset, gguf_file, hf, hub, registry, tokenizer as tok_lib
from specjax.models import sharding as sharding_lib
from specjax.models.config import ModelConfig
from specjax.models.params import inference_layout
from specjax.models.transformer import forward

if TYPE_CHECKING:  # annotation only: importing transformers here would slow `import specjax`
  from transformers import PreTrainedTokenizerFast

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


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


def _to_jax(params: dict, dtype, cfg: Optional[ModelConfig] = None) -> dict:
  """Float leaves -> device arrays of `dtype` (one copy each); integer leaves (the
  `head_vocab` ids of a reduced head) stay integers. With `cfg`, the derived inference
  layout of `specjax.models.params.inference_layout` is added (fast verify passes)."""
  params = jax.tree.map(lambda x: jnp.asarray(x, dtype if jnp.issubdtype(np.asarray(x).dtype,
                                                                           np.floating) else None),
                        params)
  return params if cfg is None else inference_layout(params, cfg)


def _first_in_vocab(ids: Sequence[int], vocab_size: int) -> Optional[int]:
  return next((i for i in ids if 0 <= i < vocab_size), None)


def _load_dir(directory: str, name: str, lazy: bool = False):
  cfg, params, hf_cfg = hf.load_hf_dir(directory, name, lazy=lazy)
  tokenizer = tok_lib.from_directory(directory)
  gen_path = os.path.join(directory, "generation_config.json")
  gen = hf.read_json(gen_path, name) if os.path.isfile(gen_path) else {}
  declared = (tok_lib.as_id_list(gen.get("eos_token_id")) + tok_lib.as_id_list(
      hf_cfg.get("eos_token_id")) + tok_lib.as_id_list(getattr(tokenizer, "eos_token_id", None)))
  eos = tok_lib.stop_ids(declared, tok_lib.special_tokens_of(tokenizer), cfg.vocab_size)
  bos = _first_in_vocab(tok_lib.as_id_list(gen.get("bos_token_id")) + tok_lib.as_id_list(
      hf_cfg.get("bos_token_id")) + tok_lib.as_id_list(getattr(tokenizer, "bos_token_id", None)),
                        cfg.vocab_size)
  return cfg, params, tokenizer, eos, bos


def _load_gguf(path: str, name: str):
  cfg, params, meta = gguf_file.load_gguf(path, name)
  tokenizer = tok_lib.from_gguf(meta, name)
  tokens = meta.get("tokenizer.ggml.tokens") or []
  types = meta.get("tokenizer.ggml.token_type") or []
  control = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3}
  declared = [meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
  eos = tok_lib.stop_ids(declared, control, cfg.vocab_size)
  bos = _first_in_vocab(tok_lib.as_id_list(meta.get("tokenizer.ggml.bos_token_id")),
                        cfg.vocab_size)
  return cfg, params, tokenizer, eos, bos


def _is_gguf(path: str) -> bool:
  if path.endswith(".gguf"):
    return True
  with open(path, "rb") as f:
    return f.read(4) == b"GGUF"


def resolve(source: str) -> str:
  """A local .gguf path or HF directory for any accepted source string.

  Order: registry name, existing local path, then a hub id (`org/name`, a legacy bare
  name such as `gpt2`, or a bare name already in the local Hugging Face cache). Any
  other source fails at once, naming the registry's models; the hub is never asked.
  """
  if source in registry.REGISTRY:
    return registry.REGISTRY[source]()
  path = os.path.expanduser(source)
  if os.path.exists(path):
    return path
  known = ", ".join(registry.names())
  if hub.is_plausible_hub_id(source):
    hint = "" if "/" in source else f" (It is not a registry name either; known: {known}.)"
    return hub.snapshot(source, hint)
  if hub.looks_like_hub_id(source):
    cached = hub.cached_snapshot(source)
    if cached is not None:
      return cached
  close = difflib.get_close_matches(source, registry.names(), n=1)
  guess = f" Did you mean {close[0]!r}?" if close else ""
  raise LoadError(f"{source}: unknown model: not a registry name ({known}), not an existing "
                  ".gguf file or model directory, and not a hub id (org/name, e.g. "
                  f"HuggingFaceTB/SmolLM2-360M-Instruct).{guess}")


def _is_draft_asset(path: str) -> bool:
  """A draft asset directory (specjax/loading/asset.py): its specjax_draft.json names
  the target whose embeddings it shares. (A full Hugging Face export has that file too,
  without the name, and loads as a plain directory.)"""
  if not os.path.isdir(path):
    return False
  try:
    meta = hf.read_draft_meta(path)
  except LoadError:
    return True  # unreadable metadata: load_asset raises the clear error
  return meta is not None and "shares_embeddings_with" in meta


def load_model(source: str, dtype="float32", target: Optional[Model] = None,
               mesh: Optional[jax.sharding.Mesh] = None) -> Model:
  """Loads a model from a registry name, local path or hub id (see module docstring).

  dtype: "float32" (default) or "bfloat16" for the params; logits are always float32.
  target: for a draft asset, which shares its target's embeddings, the target already
  loaded (else it is loaded by name); ignored for every other source.
  mesh: a ("data", "model") mesh (`specjax.models.sharding.make_mesh`): each parameter is
  split over "model" by its logical axis and every device reads only its own slice (from
  safetensors directly; GGUF files are dequantized on the host first). A "model" axis
  that does not divide the heads, kv heads, MLP width or vocabulary is a ValueError.
  """
  if isinstance(dtype, str):
    if dtype not in _DTYPES:
      raise LoadError(f"{source}: dtype {dtype!r} unsupported; use one of {list(_DTYPES)}.")
    dtype = _DTYPES[dtype]
  to_device = _to_jax if mesh is None else (
      lambda params, dtype, cfg: sharding_lib.place(params, cfg, mesh, dtype, name=source))
  path = resolve(source)
  if _is_draft_asset(path):  # a shipped draft: own tensors, reduced head, shared embeddings
    draft = asset.load_asset(path, target=target, name=source)
    return dataclasses.replace(draft, params=to_device(draft.params, dtype, draft.cfg), mesh=mesh)
  if os.path.isdir(path):
    cfg, params, tokenizer, eos, bos = _load_dir(path, source, lazy=mesh is not None)
  elif os.path.isfile(path) and _is_gguf(path):
    cfg, params, tokenizer, eos, bos = _load_gguf(path, source)
  else:
    raise LoadError(f"{source}: {path} is neither a .gguf file nor a Hugging Face model "
                    "directory; pass the directory that holds config.json.")
  return Model(name=source, cfg=cfg, params=to_device(params, dtype, cfg), tokenizer=tokenizer,
               eos_ids=eos, bos_id=bos, mesh=mesh)
