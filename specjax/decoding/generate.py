"""`generate`: the one entry point for autoregressive and speculative decoding.

Checks the inputs on the host, pads prompts into a length bucket, runs the jitted
loop (compiled once per shape bucket and setting) and unpacks tokens, texts, stats.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding import drafters as drafters_lib
from specjax.decoding.loop import NoDrafter, prefill, rounds
from specjax.decoding.stats import SpecStats
from specjax.decoding import sharding as sharding_lib
from specjax.decoding.verify import verify_row
from specjax.decoding import tree as tree_lib
from specjax.decoding import lookahead as lookahead_lib
from specjax.decoding import medusa as medusa_lib
from specjax.models import is_feature_draft, pass_options
from specjax.models.interface import as_decoder
from specjax.sampling import SamplingParams


@dataclasses.dataclass
class GenerationResult:
  """tokens[b]: the new token ids of row b (EOS included when hit); texts: decoded,
  special tokens (EOS) left out."""
  tokens: list
  texts: Optional[list]
  stats: SpecStats
  prompt_tokens: list
  k_choice: Optional[dict] = None  # k="auto": the chosen k and what it was chosen from


def _round_up(x: int, m: int) -> int:
  return -(-x // m) * m


LONG_PREFILL = 1024  # prompts longer than this get a console line when their prefill starts


def prompt_bucket(n: int) -> int:
  """The padded prompt length, a few buckets to bound recompiles: powers of two (at
  least 16) up to 1,024 tokens; past that, multiples of a quarter of the power of two
  below n, so a long prompt is padded by less than 25% (5,000 -> 5,120, not 8,192)."""
  n = max(n, 1)
  if n <= LONG_PREFILL:
    return max(16, 1 << (n - 1).bit_length())
  step = 1 << ((n - 1).bit_length() - 3)  # a quarter of the power of two below n
  return _round_up(n, step)


DRAFT_SPEC_GRAMMAR = ("'ngram' or 'ngram:N' (prompt lookup of the last N..1 tokens, N >= 1, "
                      "default 3), 'early_exit:N' (the target's first N layers), "
                      "'medusa:<heads dir>', 'lookahead:W,N[,G]' (window, n-gram size, "
                      "pooled candidates), a model source (registry name, directory, "
                      ".gguf path, hub id), or '<feature draft or early_exit:N>+ngram:N[:L]' "
                      "(prompt lookup where the text repeats, the draft elsewhere; beside a "
                      "tree, a lookup chain of L nodes, default the tree's depth)")


def _spec_error(draft: str, problem: str) -> ValueError:
  return ValueError(f"Drafter spec {draft!r}: {problem}. A draft is {DRAFT_SPEC_GRAMMAR}.")


def resolve_drafter(draft: Any, target) -> Any:
  """None | "ngram[:N]" | "early_exit:N" | "medusa:<source>" | "lookahead:W,N[,G]" |
  a model source | a loaded model | a drafter."""
  if draft is None:
    return NoDrafter()
  if hasattr(draft, "propose"):
    return draft
  if isinstance(draft, str) and "+" in draft:
    base, _, lookup = draft.rpartition("+")
    return lookup_first(base, lookup, target, draft)
  if isinstance(draft, str):
    kind, colon, arg = draft.partition(":")
    if kind == "medusa" or (kind == draft and medusa_lib.is_medusa_source(draft)):
      return medusa_lib.load_drafter(arg if kind == "medusa" else draft, target)
    if kind == "lookahead":
      return lookahead_lib.parse(draft, target.cfg.vocab_size)
    if kind == "ngram":
      if colon and not arg.strip().isdigit():
        raise _spec_error(draft, f"the n-gram size {arg!r} is not a positive integer")
      n = int(arg) if arg else 3
      if n < 1:
        raise _spec_error(draft, "the n-gram size must be >= 1")
      return drafters_lib.NgramDrafter(n=n)
    if kind == "early_exit":
      if not arg.isdigit() or not 1 <= int(arg) < target.cfg.n_layers:
        raise _spec_error(draft, "give the number of target layers to keep, between 1 and "
                          f"{target.cfg.n_layers - 1}, e.g. 'early_exit:8'")
      return drafters_lib.EarlyExitDrafter(n_layers=int(arg))
    if colon and not os.path.exists(os.path.expanduser(draft)):
      raise _spec_error(draft, f"unknown drafter kind {kind!r}")
    from specjax.loading import load_model  # a model source
    draft = load_model(draft, target=target)  # a draft asset reuses the target's embeddings
  if not (hasattr(draft, "cfg") and hasattr(draft, "params")):
    raise TypeError(f"Cannot use {type(draft).__name__} as a draft: pass a loaded model, a model "
                    "source, 'ngram:N' or 'early_exit:N'.")
  if draft.cfg.vocab_size != target.cfg.vocab_size:
    raise ValueError(
        f"Vocabulary mismatch: the draft {getattr(draft, 'name', '')!r} has "
        f"{draft.cfg.vocab_size} tokens but the target {getattr(target, 'name', '')!r} has "
        f"{target.cfg.vocab_size}. Speculative decoding needs a draft that shares the target's "
        "tokenizer; pick a draft from the same model family, or use 'ngram:3'.")
  kind = drafters_lib.FeatureDrafter.of if is_feature_draft(draft.params) else drafters_lib.ModelDrafter
  return kind(params=draft.params, cfg=draft.cfg, name=getattr(draft, "name", "draft"))


def lookup_first(base: Any, lookup: str, target, spec: str = "") -> Any:
  """`base` (a spec, loaded model or drafter) with prompt lookup `lookup` ("ngram[:N]")
  first: `LookupFirstDrafter`. spec: the whole string, for errors."""
  spec = spec or f"{base}+{lookup}"
  if base is None or (isinstance(base, str) and not base) or not lookup.startswith("ngram"):
    raise _spec_error(spec, "a combined drafter is '<draft>+ngram:N', the lookup last")
  parts = lookup.split(":")
  chain = 0
  if len(parts) == 3:  # "ngram:N:L": L nodes of lookup chain beside a tree
    if not parts[2].strip().isdigit() or int(parts[2]) < 1:
      raise _spec_error(spec, f"the lookup chain length {parts[2]!r} is not a positive integer")
    chain, lookup = int(parts[2]), ":".join(parts[:2])
  ngram = resolve_drafter(lookup, target)  # an NgramDrafter, or the n-gram spec's error
  base = resolve_drafter(base, target)
  if type(base).__name__ not in drafters_lib.LookupFirstDrafter.BASES:
    raise _spec_error(spec, f"the base is a {type(base).__name__}; prompt lookup combines with "
                      "a feature draft or early_exit:N, whose state follows the verified tokens")
  return drafters_lib.LookupFirstDrafter(base=base, n=ngram.n, chain=chain)


def _encode_prompts(target, prompts, chat: bool) -> list:
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


_COMPILED: dict = {}


@dataclasses.dataclass(frozen=True)
class CompiledLoop:
  """The loop's two programs, compiled: the prefill (XLA's defaults: many rows per pass)
  and the rounds (`pass_options` for their B x (k + 1) rows)."""
  prefill: Any
  rounds: Any

  def timed(self, decoder, drafter, prompt, lens, max_new, key):
    """Runs both programs as `loop.run` does, each to completion: (final state, prefill
    seconds, total seconds). The closed form of a round's speed models the rounds alone."""
    start = time.perf_counter()
    state = jax.block_until_ready(self.prefill(decoder, drafter, prompt, lens, max_new, key))
    prefill_s = time.perf_counter() - start
    state = jax.block_until_ready(self.rounds(decoder, drafter, state, lens, max_new))
    return state, prefill_s, time.perf_counter() - start


def _node_types(treedef) -> tuple:
  """The classes of a treedef's nodes, nested as the tree is."""
  data = treedef.node_data()
  return (None if data is None else data[0],) + tuple(_node_types(c) for c in treedef.children())


def signature(args: tuple, statics: dict) -> tuple:
  """What a compiled loop is reused for: the args' tree with its node classes, the leaves'
  shapes, dtypes and shardings, and the static settings. The classes are listed on their
  own because two flax dataclasses with the same fields compare equal as treedefs (a
  drafter subclass that overrides `propose` would otherwise be served its parent's program
  whenever the two hashes met in the cache's table)."""
  leaves, treedef = jax.tree.flatten(args)
  return (treedef, _node_types(treedef),
          tuple((x.shape, str(x.dtype), getattr(x, "sharding", None)) for x in leaves),
          tuple(sorted(statics.items())))  # rows follow from these


def _compiled_run(args: tuple, statics: dict, rows: int):
  """AOT-compiles the loop once per `signature` so that run time excludes compile
  time. rows: of one round's target pass (batch x (k + 1) or tree slots)."""
  sig = signature(args, statics)
  if sig not in _COMPILED:
    start = time.perf_counter()
    pre = prefill.lower(*args, **{n: v for n, v in statics.items() if n != "verifier"}).compile()
    decoder, drafter, _, lens, max_new, _ = args
    lowered = rounds.lower(decoder, drafter, pre.out_info, lens, max_new,  # the state's avals
                           **{n: v for n, v in statics.items() if n != "max_len"})
    loop = CompiledLoop(prefill=pre, rounds=pass_options.compile_lowered(lowered, rows))
    _COMPILED[sig] = (loop, time.perf_counter() - start)
    return _COMPILED[sig]
  return _COMPILED[sig][0], 0.0


def generate(target, prompts: Union[str, Sequence], max_new_tokens: int, draft: Any = None,
             k: Union[int, str] = 4, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
             seed: int = 0, chat: bool = False, max_cache_len: Optional[int] = None,
             eos_ids: Optional[Sequence[int]] = None, verifier=None,
             mesh: Optional[jax.sharding.Mesh] = None, tree: Any = None) -> GenerationResult:
  """Decodes `prompts` with `target`, alone (draft=None) or speculatively with `draft`.

  Greedy (temperature 0) output is token-identical to the target alone; sampled
  output follows the target's warped distribution exactly.
  target: a loaded model or a source for `load_model`. prompts: a string, token ids,
  or a list of either (rows may differ in length). chat: apply the chat template.
  eos_ids: stop tokens (default: the target's). verifier: a per-row acceptance rule
  with the signature of `verify_row` (with a tree: of `tree.verify_tree_row`), for
  studies of other rules (default: exact).
  k: tokens drafted per round (a tree's depth), or "auto": chosen from this machine's
  per-pass costs and the acceptance of a short calibration run (`specjax.decoding.auto_k`);
  the choice is printed and returned in `k_choice`.
  tree: None (a chain of k drafts), "static:4,2,2,1" (branching per depth; k entries),
  "dynamic:N" (EAGLE-2: the best N of the draft's top candidates), a `TreeSpec`, or
  "auto" (the static tree of most expected tokens/s, of depth at most k, from a short
  calibration and measured pass costs, printed; see `specjax.decoding.tree_auto`).
  mesh: a ("data", "model") mesh (default: the target's, from `load_model(mesh=)`): the
  same jitted loop runs on it with target and draft params split over "model" and the
  batch and caches over "data" (`specjax.models.sharding`); the batch is padded to a
  multiple of the data axis with copies of the last prompt, which are dropped again.
  """
  if isinstance(target, str):
    from specjax.loading import load_model
    target = load_model(target)
  sampling = SamplingParams(temperature=float(temperature), top_k=top_k, top_p=float(top_p))
  if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
    raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}.")
  auto = isinstance(k, str) and k == "auto"
  if draft is not None and not auto and (not isinstance(k, (int, np.integer)) or k < 1):
    raise ValueError(f"k (tokens drafted per round) must be an integer >= 1 or 'auto', "
                     f"got {k!r}.")
  drafter = resolve_drafter(draft, target)
  if auto and hasattr(drafter, "fixed_k"):  # lookahead: k = N - 1, nothing to choose
    auto = False
  if getattr(drafter, "chain", 0) and (tree is None or tree == "auto"):
    depth = k if isinstance(k, (int, np.integer)) else 4
    raise ValueError(f"The drafter {drafter.name!r} sets a lookup chain length (':L'), which "
                     f"only a given tree uses: pass k and tree= (e.g. k={depth}, tree='static:"
                     + ",".join(["1"] * depth) + "' for the draft's chain beside it), or drop ':L'.")
  prompt_ids = _encode_prompts(target, prompts, chat)
  if draft is not None and auto:  # calibrate, then run at the chosen k
    if tree is not None:
      raise ValueError("k='auto' chooses the length of a chain; with tree= give k (the "
                       "tree's depth) as an integer, or use tree='auto' with a fixed k.")
    from specjax.decoding import auto_k
    same = dict(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                max_cache_len=max_cache_len, eos_ids=eos_ids, verifier=verifier, mesh=mesh)
    longest = max(len(p) for p in prompt_ids)
    calibrate = lambda kk: generate(target, prompt_ids, min(max_new_tokens,
                                                            auto_k.CALIBRATION_TOKENS),
                                    draft=drafter, k=kk, **same).stats
    cost_len = _round_up(max(prompt_bucket(longest), longest + max_new_tokens + auto_k.K_MAX + 2),
                         128)
    choice = auto_k.choose_k(target, drafter, calibrate, longest, cost_len, float(temperature))
    out = generate(target, prompt_ids, max_new_tokens, draft=drafter, k=choice["k"], **same)
    return dataclasses.replace(out, k_choice=choice)
  k = 0 if draft is None else int(getattr(drafter, "fixed_k", k))  # lookahead: k = N - 1
  auto_tree = isinstance(tree, str) and tree == "auto"
  tree = tree_lib.resolve_tree(None if auto_tree else tree, k, draft is not None)
  if auto_tree:
    if draft is None:
      raise ValueError("tree='auto' needs a drafter: pass draft= as well.")
    if not hasattr(drafter, "propose_tree"):
      raise ValueError(f"The drafter {getattr(drafter, 'name', type(drafter).__name__)!r} does "
                       "not draft token trees; use tree=None.")
    from specjax.decoding.tree_auto import auto_tree as choose_tree
    tree = choose_tree(target, drafter, k, prompt_ids, sampling)
    k = tree.depth  # k is the deepest tree considered; the chosen one may be shallower
    if tree.n_nodes == k:  # one branch: run it as the chain (the same tokens and counts)
      tree = None
  if tree is not None and hasattr(drafter, "tree_spec"):  # e.g. a lookup chain beside the tree
    tree = drafter.tree_spec(tree)

  longest = max(len(p) for p in prompt_ids)
  width = k if tree is None else tree.slots - 1  # draft slots one round writes
  width = getattr(drafter, "round_slots", width + 1) - 1  # a drafter that owns its pass
  needed = longest + max_new_tokens + width + 1
  limit = target.cfg.max_positions
  if max_cache_len is not None:
    limit = min(limit, max_cache_len)
  if hasattr(drafter, "validate"):  # drafter-specific checks (Medusa, lookahead), before work
    drafter.validate(target, k, tree, limit, longest + max_new_tokens)
  if needed > limit:
    raise ValueError(
        f"The prompt does not fit the cache: the longest prompt has {longest} tokens and "
        f"max_new_tokens={max_new_tokens} (+ {width + 1} slots for verification) needs "
        f"{needed} positions, but the limit is {limit} (model context "
        f"{target.cfg.max_positions}). Shorten the prompt or lower max_new_tokens.")
  bucket = prompt_bucket(longest)
  max_len = _round_up(max(bucket, longest + max_new_tokens + width + 2), 128)
  if getattr(target.cfg, "sliding_window", None):  # the cache must fit the window (a no-op there)
    max_len = min(max_len, target.cfg.sliding_window)
    target.cfg.check_window(max(bucket, longest + max_new_tokens + width + 2))

  prompt = np.zeros((len(prompt_ids), bucket), np.int32)
  for b, ids in enumerate(prompt_ids):
    prompt[b, :len(ids)] = ids
  lens = np.array([len(p) for p in prompt_ids], np.int32)
  eos = tuple(sorted(int(e) for e in (target.eos_ids if eos_ids is None else eos_ids)))

  n_rows = len(prompt_ids)
  mesh = mesh if mesh is not None else getattr(target, "mesh", None)
  decoder = as_decoder(target)
  if mesh is not None:
    target_params, drafter, prompt, lens = sharding_lib.on_mesh(
        mesh, target, target.params, drafter, prompt, lens)
    decoder = decoder.replace(params=target_params)
  else:
    prompt, lens = jnp.asarray(prompt), jnp.asarray(lens)
  args = (decoder, drafter, prompt, lens, jnp.asarray(max_new_tokens, jnp.int32),
          jax.random.PRNGKey(seed))
  statics = dict(sampling=sampling, k=k, eos_ids=eos, max_len=max_len,
                 verifier=verifier or verify_row, tree=tree)
  if longest > LONG_PREFILL:
    print(f"specjax: long prefill of {longest} tokens (bucket {bucket}, cache {max_len}) "
          "starting", file=sys.stderr, flush=True)
  with sharding_lib.mesh_context(mesh):
    compiled, compile_s = _compiled_run(args, statics, rows=prompt.shape[0] * (width + 1))
    state, prefill_s, wall = compiled.timed(*args)

  host = lambda x: sharding_lib.to_host(x)[:n_rows]
  lens = host(lens)
  n_tokens = host(state.n_tokens)
  tokens = host(state.tokens)
  new = [tokens[b, lens[b]:n_tokens[b]].tolist() for b in range(n_rows)]
  stats = SpecStats(k=k, new_tokens=n_tokens - lens, target_passes=host(state.target_passes),
                    draft_passes=host(state.draft_passes), rounds=host(state.rounds),
                    checked=host(state.checked), accepted=host(state.accepted),
                    wall_time_s=wall, prefill_time_s=prefill_s, compile_time_s=compile_s,
                    path_lengths=host(state.path_lengths), rank_hits=host(state.rank_hits),
                    nodes_per_round=k if tree is None else tree.verified_nodes,
                    tree=None if tree is None else str(tree))
  texts = None
  if getattr(target, "tokenizer", None) is not None:
    texts = [target.decode(t, skip_special_tokens=True) for t in new]  # EOS stays in tokens
  return GenerationResult(tokens=new, texts=texts, stats=stats, prompt_tokens=prompt_ids)
