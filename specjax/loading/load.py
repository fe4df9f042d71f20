"""`load_model(source)` -> `Model`: resolves a source, reads it, places the params.

Sources, tried in this order:
  1. a registry name (`smollm2-135m`; see `specjax.loading.registry`, which says only
     where a name's files are),
  2. a local path: a `.gguf` file, a Hugging Face directory (config.json + safetensors)
     or a shipped draft asset (`specjax.loading.asset`),
  3. a hub id (`org/name`, or a legacy bare name such as `gpt2`), from the local cache or
     downloaded. Anything else fails at once with the registry's names.

This module is the one place that ties the readers together (registry, hub, hf, gguf,
asset, tokenizer); none of them imports it.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax import parallel
from specjax.errors import LoadError
from specjax.loading import asset, draft_formats, gguf_file, hf, hub, registry, tokenizer as tok_lib
from specjax.loading.model import Model
from specjax.models.config import ModelConfig
from specjax.models.params import PARAM_AXES, inference_layout

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


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
  """A local .gguf path, HF directory or draft asset directory for any accepted source.

  Order: registry name, existing local path, then a hub id (`org/name`, a legacy bare
  name such as `gpt2`, or a bare name already in the local Hugging Face cache). Any
  other source fails at once, naming the registry's models; the hub is never asked.
  A registry name for a shipped draft's Hugging Face form gives that directory, built
  once from the asset and its target (`asset.materialize_hf`).
  """
  if source in registry.REGISTRY:
    src = registry.source(source)
    if not src.hf_export:
      return src.path
    return asset.built_hf(src.path) or asset.materialize_hf(
        src.path, load_model(asset.target_of(src.path)))
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


def load_model(source: str, dtype="float32", target: Optional[Model] = None,
               mesh: Optional[jax.sharding.Mesh] = None) -> Model:
  """Loads a model from a registry name, local path or hub id (see module docstring).

  dtype: "float32" (default) or "bfloat16" for the params; logits are always float32.
  target: for a draft asset, which shares its target's embeddings, the target already
  loaded (else it is loaded by name); for a published draft (`draft_formats`: speculators,
  EAGLE-3, EAGLE-1, Medusa-1), which is then returned as a `PublishedDraft` checked
  against it, required; ignored for every other source.
  mesh: a ("data", "model") mesh (`specjax.parallel.make_mesh`): each parameter is
  split over "model" by its logical axis and every device reads only its own slice (from
  safetensors directly; GGUF files are dequantized on the host first). A "model" axis
  wider than the kv heads repeats them (the returned cfg has that many) and a vocabulary
  it does not divide is padded (`parallel.widen_params`); `parallel.check_mesh` says
  which axes cannot be used. A published draft is replicated on the mesh, which must be
  its target's.
  """
  if isinstance(dtype, str):
    if dtype not in _DTYPES:
      raise LoadError(f"{source}: dtype {dtype!r} unsupported; use one of {list(_DTYPES)}.")
    dtype = _DTYPES[dtype]
  to_device = _to_jax if mesh is None else (lambda params, dtype, cfg: parallel.place_params(
      params, cfg, mesh, PARAM_AXES, dtype, name=source))
  path = resolve(source)
  if asset.is_draft_asset(path):  # a shipped draft: own tensors, reduced head, shared embeddings
    target = target if target is not None else load_model(asset.target_of(path))
    draft = asset.load_asset(path, target, name=source)
    return dataclasses.replace(draft, params=to_device(draft.params, dtype, draft.cfg), mesh=mesh,
                               cfg=parallel.mesh_config(draft.cfg, mesh))
  fmt = draft_formats.detect(path)
  if fmt is not None:  # a published draft (speculators, EAGLE, Medusa): read for its target
    if target is None:
      raise LoadError(f"{source}: a published draft ({fmt}) loads for its target: pass "
                      "target=<the loaded target model>.")
    if mesh is not None and target.mesh != mesh:
      raise LoadError(f"{source}: a published draft loads onto its target's mesh; load the "
                      f"target with the same mesh= first (the target's: {target.mesh}).")
    draft = draft_formats.load(path, target, source, fmt, dtype=dtype)
    # On a mesh the draft (one or a few layers) is replicated on every device, as serving
    # engines run it (vLLM's draft tensor-parallel size 1); the target stays split.
    return draft if mesh is None else dataclasses.replace(
        draft, params=parallel.onto_mesh(draft.params, mesh))
  if os.path.isdir(path):
    cfg, params, tokenizer, eos, bos = _load_dir(path, source, lazy=mesh is not None)
  elif os.path.isfile(path) and _is_gguf(path):
    cfg, params, tokenizer, eos, bos = _load_gguf(path, source)
  else:
    raise LoadError(f"{source}: {path} is neither a .gguf file nor a Hugging Face model "
                    "directory; pass the directory that holds config.json.")
  return Model(name=source, cfg=parallel.mesh_config(cfg, mesh),  # kv heads widened on a mesh
               params=to_device(params, dtype, cfg), tokenizer=tokenizer, eos_ids=eos, bos_id=bos,
               mesh=mesh)
