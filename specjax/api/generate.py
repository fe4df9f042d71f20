"""The public `specjax.generate`: sources through loading, draft specs through the one
grammar (`draft_spec`), "auto" through tuning, then `specjax.decoding.generate`."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Union

import jax
import numpy as np

from specjax import compile_cache
from specjax.api.draft_spec import resolve_drafter
from specjax.decoding import tree as tree_lib
from specjax.decoding.drafters import LookupFirstDrafter
from specjax.decoding.drafters.lookup_first import chain_needs_tree
from specjax.decoding.generate import GenerationResult
from specjax.decoding.generate import generate as decode
from specjax.loading import load_model
from specjax.sampling import SamplingParams
from specjax.tune import k as tune_k
from specjax.tune import tree as tune_tree


def encode_prompts(target, prompts, chat: bool) -> list:
  """A string, token ids, or a list of either -> token id lists (checked)."""
  if isinstance(prompts, str) or (prompts and isinstance(prompts[0], (int, np.integer))):
    prompts = [prompts]
  if not prompts:
    raise ValueError("No prompts given.")
  out = []
  for p in prompts:
    if isinstance(p, str):
      if getattr(target, "tokenizer", None) is None:
        raise ValueError("Text prompts need a model with a tokenizer; pass token ids instead.")
      p = target.encode(p, chat=chat)
    ids = [int(t) for t in p]
    if not ids:
      raise ValueError("Empty prompt: every prompt needs at least one token.")
    if min(ids) < 0 or max(ids) >= target.cfg.vocab_size:
      raise ValueError(f"Prompt token ids must lie in [0, {target.cfg.vocab_size}).")
    out.append(ids)
  return out


def generate(target, prompts: Union[str, Sequence], max_new_tokens: int, draft: Any = None,
             k: Union[int, str] = 4, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
             seed: int = 0, chat: bool = False, max_cache_len: Optional[int] = None,
             eos_ids: Optional[Sequence[int]] = None, verifier=None,
             mesh: Optional[jax.sharding.Mesh] = None, tree: Any = None) -> GenerationResult:
  """Decodes `prompts` with `target`, alone (draft=None) or speculatively with `draft`.

  Greedy (temperature 0) output is token-identical to the target alone; sampled output
  follows the target's warped distribution exactly.
  target: a loaded model or a source for `load_model`. prompts: a string, token ids, or
  a list of either (rows may differ in length). chat: apply the chat template.
  draft: None, a spec string (`specjax.api.draft_spec`), a loaded model or a drafter.
  k: tokens drafted per round (a tree's depth), or "auto": chosen for this batch size and
  these prompts from the loop's costs at this batch (measured once per machine) and the
  drafter's acceptance (measured on the first calls' prompts until enough rows are kept:
  `specjax.tune.k`); the target alone (k = 0) where no
  k pays. The choice, its note and predicted speedup are returned in `k_choice`.
  tree: None (a chain), "static:4,2,2,1", "dynamic:N", a `TreeSpec`, or "auto" (the
  fastest measured static tree of depth at most k, chains included: `specjax.tune.tree`).
  eos_ids: stop tokens (default: the target's). verifier: a per-row acceptance rule (see
  `specjax.decoding.generate`). mesh: a ("data", "model") mesh (default: the target's).
  The first call turns on jax's persistent compilation cache (`specjax.compile_cache`).
  """
  compile_cache.enable()
  if isinstance(target, str):
    target = load_model(target)
  sampling = SamplingParams(temperature=float(temperature), top_k=top_k, top_p=float(top_p))
  if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
    raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}.")
  auto_k = isinstance(k, str) and k == "auto"
  if draft is not None and not auto_k and (not isinstance(k, (int, np.integer)) or k < 1):
    raise ValueError(f"k (tokens drafted per round) must be an integer >= 1 or 'auto', "
                     f"got {k!r}.")
  drafter = resolve_drafter(draft, target)
  auto_tree = isinstance(tree, str) and tree == "auto"
  if drafter is not None:
    auto_k = auto_k and drafter.caps.fixed_k is None  # lookahead: nothing to choose
    if drafter.caps.needs_tree and (tree is None or auto_tree):
      raise ValueError(chain_needs_tree(drafter.name, k if isinstance(k, (int, np.integer)) else 4))
  prompt_ids = encode_prompts(target, prompts, chat)
  same = dict(sampling=sampling, seed=seed, max_cache_len=max_cache_len, eos_ids=eos_ids,
              verifier=verifier, mesh=mesh)
  choice = None
  if drafter is None:
    if tree is not None:
      raise ValueError("A token tree needs a drafter: pass draft= as well as tree=.")
    k = 0
  elif auto_k:  # k for this batch from stored loop costs (measured once), or none
    if tree is not None:
      raise ValueError("k='auto' chooses the length of a chain; with tree= give k (the "
                       "tree's depth) as an integer, or use tree='auto' with a fixed k.")
    run = lambda ids, n, kk: decode(target, ids, n, drafter=drafter if kk else None, k=kk,
                                    **same).stats
    choice = tune_k.choose_k(target, drafter, prompt_ids, int(max_new_tokens), sampling, run)
    k = choice["k"]
    if k == 0:  # no k pays at this batch: the target alone, as the choice says
      drafter = None
  elif auto_tree:
    if not drafter.caps.tree_kinds:
      raise ValueError(f"The drafter {drafter.name!r} does not draft token trees; use tree=None.")
    tree = tune_tree.auto_tree(target, drafter, int(k), prompt_ids, sampling)
    k = tree.depth  # k is the deepest tree considered; the chosen one may be shallower
    if tree.n_nodes == k:  # one branch: run it as the chain (the same tokens and counts)
      tree = None
  else:
    k = int(drafter.caps.fixed_k or k)
    tree = tree_lib.resolve_tree(tree, k, True)
  out = decode(target, prompt_ids, max_new_tokens, drafter=drafter, k=k, tree=tree, **same)
  if choice is not None:
    tune_k.record(choice, out.stats)  # this run's rows join the stored acceptance
  texts = None
  if getattr(target, "tokenizer", None) is not None:
    texts = [target.decode(t, skip_special_tokens=True) for t in out.tokens]  # EOS stays in tokens
  return dataclasses.replace(out, texts=texts, k_choice=choice)
