"""`decoding.generate`: token-id prompts, a drafter object, an int k and a tree or None,
in; tokens and statistics out. No loading, no tuning, no recursion: the public
`specjax.generate` (`specjax.api`) resolves sources, spec strings and "auto" first.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax import parallel
from specjax.decoding import plan as plan_lib
from specjax.decoding import compiled
from specjax.decoding.drafters import NoDrafter
from specjax.decoding.stats import SpecStats
from specjax.decoding.verify import verify_row
from specjax.models.interface import as_decoder
from specjax.models.params import PARAM_AXES
from specjax.sampling import SamplingParams


@dataclasses.dataclass
class GenerationResult:
  """tokens[b]: the new token ids of row b (EOS included when hit); texts: decoded,
  special tokens (EOS) left out (filled by `specjax.generate` where there is a tokenizer)."""
  tokens: list
  texts: Optional[list]
  stats: SpecStats
  prompt_tokens: list
  k_choice: Optional[dict] = None  # k="auto": the chosen k and what it was chosen from


def check_drafter(drafter, target_cfg, k: int, tree, limit: int, used: int) -> None:
  """What the drafter's `caps` rule out for these settings, then its own `validate`."""
  caps = drafter.caps
  if tree is not None and not caps.owns_pass and tree.kind not in caps.tree_kinds:
    kinds = " or ".join(caps.tree_kinds)
    raise ValueError(f"The drafter {drafter.name!r} does not draft {tree.kind} token trees"
                     + (f"; it expands {kinds} trees (e.g. tree='static:3,1,1')." if kinds
                        else "; use tree=None."))
  drafter.validate(target_cfg, k, tree, limit, used)


def generate(target, prompts: Sequence[Sequence[int]], max_new_tokens: int, drafter: Any = None,
             k: int = 4, tree: Any = None, sampling: SamplingParams = SamplingParams(),
             seed: int = 0, max_cache_len: Optional[int] = None,
             eos_ids: Optional[Sequence[int]] = None, verifier=None,
             mesh: Optional[jax.sharding.Mesh] = None) -> GenerationResult:
  """Decodes token-id `prompts` with `target` (a loaded model or a decoder), alone
  (drafter None) or with a drafter object (`specjax.decoding.drafters`).

  Greedy output is token-identical to the target alone; sampled output follows the
  target's warped distribution exactly. k: drafts per round (a tree's depth; a drafter's
  `caps.fixed_k` overrides it). tree: None (a chain) or a `TreeSpec` of depth k.
  verifier: a per-row rule with `verify_row`'s signature (with a tree, `verify_tree_row`'s),
  for studies of other rules. mesh: a ("data", "model") mesh (default: the target's); the
  batch is padded to the data axis with copies of the last prompt, dropped again.
  """
  drafter = NoDrafter() if drafter is None else drafter
  speculative = not isinstance(drafter, NoDrafter)
  k = 0 if not speculative else int(drafter.caps.fixed_k or k)
  if speculative and k < 1:
    raise ValueError(f"k (tokens drafted per round) must be an integer >= 1, got {k!r}.")
  if tree is not None:
    if not speculative:
      raise ValueError("A token tree needs a drafter: pass draft= as well as tree=.")
    tree = drafter.round_tree(tree)
  longest = max(len(p) for p in prompts)
  width = plan_lib.round_width(k, tree, drafter.caps.round_slots)
  limit = plan_lib.cache_limit(target.cfg, max_cache_len)
  if speculative:
    check_drafter(drafter, target.cfg, k, tree, limit, longest + max_new_tokens)
  plan = plan_lib.plan(target.cfg, longest, max_new_tokens, width, max_cache_len)
  mesh = mesh if mesh is not None else getattr(target, "mesh", None)
  # Row groups of the prefill, each at its own bucket (one group on a mesh: its data axis
  # pads the whole batch); the loop runs the rows in the groups' order, undone below.
  groups = (plan_lib.prefill_groups([len(p) for p in prompts]) if mesh is None
            else (tuple(range(len(prompts))),))
  prompt, lens, order = plan_lib.pad_groups(prompts, groups)
  plan_lib.check_memory(plan_lib.cache_bytes(as_decoder(target), len(prompts), plan.max_len),
                        len(prompts), plan.max_len,
                        devices=1 if mesh is None else mesh.devices.size)
  eos = tuple(sorted(int(e) for e in (target.eos_ids if eos_ids is None else eos_ids)))

  n_rows = len(prompts)
  decoder = as_decoder(target)
  if mesh is not None:
    target_params, drafter, prompt, lens = parallel.on_mesh(
        mesh, target, target.params, drafter, prompt, lens, axes=PARAM_AXES)
    decoder = decoder.replace(params=target_params, cfg=parallel.mesh_config(decoder.cfg, mesh))
  else:
    prompt, lens = jax.tree.map(jnp.asarray, prompt), jnp.asarray(lens)
  # max_new_tokens and the sampling numbers are traced: one program serves all their values
  args = (decoder, drafter, prompt, lens, jnp.asarray(max_new_tokens, jnp.int32),
          jax.random.PRNGKey(seed), sampling.traced())
  statics = dict(k=k, eos_ids=eos, max_len=plan.max_len, verifier=verifier or verify_row,
                 tree=tree)
  if longest > plan_lib.LONG_PREFILL:
    print(f"specjax: long prefill of {longest} tokens (bucket {plan.bucket}, cache "
          f"{plan.max_len}) starting", file=sys.stderr, flush=True)
  with parallel.mesh_context(mesh):
    state, prefill_s, wall, built = compiled.run(args, statics, rows=lens.shape[0] * (width + 1))

  back = np.argsort(order)  # the groups' order -> the caller's
  host = lambda x: parallel.to_host(x)[:n_rows][back]
  lens, n_tokens, tokens = host(lens), host(state.n_tokens), host(state.tokens)
  new = [tokens[b, lens[b]:n_tokens[b]].tolist() for b in range(n_rows)]
  nodes = drafter.caps.verified_nodes or (k if tree is None else tree.verified_nodes)
  stats = SpecStats(k=k, new_tokens=n_tokens - lens, target_passes=host(state.target_passes),
                    draft_passes=host(state.draft_passes), rounds=host(state.rounds),
                    checked=host(state.checked), accepted=host(state.accepted),
                    wall_time_s=wall, prefill_time_s=prefill_s, compile_time_s=built.seconds,
                    compiled_programs=built.programs, programs_from_disk=built.from_disk,
                    path_lengths=host(state.path_lengths), rank_hits=host(state.rank_hits),
                    nodes_per_round=nodes if speculative else 0,
                    tree=None if tree is None else str(tree))
  return GenerationResult(tokens=new, texts=None, stats=stats, prompt_tokens=list(prompts))
