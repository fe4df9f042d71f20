"""Per-pass costs of the target and the drafters, timed as small jitted calls.

These are the inputs of the ideal-speedup prediction

    ideal_speedup = tokens_per_round * c_step / (c_draft(k) + c_verify(k))

c_step: one target forward of 1 token (what the target alone pays per token);
c_verify(k): one target forward of k+1 tokens (the verify pass);
c_draft(k): one `drafter.propose` call (k draft steps, their warp and sampling; ~0
for n-gram lookup) on the inputs the loop gives it: its state from `drafter.init` over
what `target_pass` hands it (the last hidden state, or the outputs of its
`feature_layers` concatenated for an EAGLE-3 style draft). All with a cache already
holding `context_len` tokens, batch 1, the same cache size as `generate` would allocate. Each cost is the fastest over
`repeats` of the mean over `n` back-to-back calls (the CPU is shared and noisy).
"""
from __future__ import annotations

import functools
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding import plan as plan_lib
from specjax.decoding.drafters import DraftContext
from specjax.models import forward, pass_options
from specjax.models.interface import as_decoder, target_pass
from specjax.sampling import SamplingParams


def time_call(fn, args, n: int, repeats: int) -> float:
  """Seconds per call of jitted `fn(*args)`: the fastest of `repeats` means over `n` calls."""
  jax.block_until_ready(fn(*args))  # compile + warm up
  best = float("inf")
  for _ in range(max(1, repeats)):
    start = time.perf_counter()
    for _ in range(max(1, n)):
      jax.block_until_ready(fn(*args))
    best = min(best, (time.perf_counter() - start) / max(1, n))
  return best


def cache_len(prompt_len: int, max_new_tokens: int, k: int) -> int:
  """The cache size `generate` allocates for one row with a chain of k (`plan.cache_len`)."""
  return plan_lib.cache_len(prompt_len, max_new_tokens, k)


@functools.partial(jax.jit, static_argnames=("layers", "max_len"))
def _prefill(decoder, tokens, layers, max_len):
  return target_pass(decoder, layers, tokens, prefill=(jnp.array([tokens.shape[1]]), max_len))


def _filled_cache(target, context: np.ndarray, max_len: int, with_hidden: bool = False,
                  drafter=None):
  """The target's cache after `context`, and with_hidden what `drafter` reads from that
  prefill (`target_pass`, as the loop: the last hidden [1, T, D], or its `feature_layers`'
  outputs concatenated [1, T, L*D])."""
  _, cache, feats = _prefill(as_decoder(target), jnp.asarray(context)[None],
                             None if drafter is None else drafter.caps.feature_layers, max_len)
  return (cache, feats) if with_hidden else cache


def pass_calls(target, context_len: int, max_len: int, widths, seed: int = 0) -> dict:
  """{T: (jitted pass, its args)}: one target pass over T tokens on a cache holding
  `context_len` random tokens, each compiled with the options the loop gives a program of
  its rows (`pass_options`). Keep the calls to time them again without recompiling."""
  rng = np.random.default_rng(seed)
  context = rng.integers(0, target.cfg.vocab_size, size=context_len).astype(np.int32)
  cache = _filled_cache(target, context, max_len)
  fwd = lambda rows: pass_options.jit(lambda p, t, c: forward(p, target.cfg, t, c)[0], rows)
  return {t: (fwd(t), (target.params, jnp.zeros((1, t), jnp.int32), cache))
          for t in sorted(set(int(x) for x in widths))}


def target_costs(target, context_len: int, max_len: int, ks, n: int = 5,
                 repeats: int = 3, seed: int = 0) -> dict:
  """{"step": c_step, "verify": {k: c_verify(k)}} in seconds per call."""
  ks = sorted(set(int(x) for x in ks))
  calls = pass_calls(target, context_len, max_len, [1] + [k + 1 for k in ks], seed)
  return {"step": time_call(*calls[1], n, repeats),
          "verify": {k: time_call(*calls[k + 1], n, repeats) for k in ks}}


def draft_call(target, drafter, k: int, context: np.ndarray, max_len: int,
               temperature: float = 0.0, seed: int = 0, tree=None):
  """(jitted propose, its args): the first round's proposal after prefilling `context`[:-1]
  with `context`[-1] as the first new token, on the inputs the loop gives `drafter`.
  Returns (drafts [1, k], q [1, k, V]), or with `tree` the `TreeDraft`."""
  context_len = len(context)
  tokens = np.zeros((1, max_len), np.int32)
  tokens[0, :context_len] = context
  n_tokens = jnp.array([context_len], jnp.int32)
  cache, feats = _filled_cache(target, context[:-1], max_len, with_hidden=True, drafter=drafter)
  state = drafter.init(target.params, jnp.asarray(context[:-1])[None],
                       jnp.array([context_len - 1], jnp.int32), max_len, feats)
  rows = k + 1 if tree is None else drafter.round_tree(tree).slots  # the rounds program's rows
  propose = pass_options.jit(functools.partial(
      _propose, cfg=target.cfg, k=k, tree=tree,
      sampling=SamplingParams(temperature=float(temperature))), rows)
  args = (drafter, state, target.params, cache, jnp.asarray(tokens), n_tokens,
          jax.random.PRNGKey(seed))
  return propose, args


def _propose(drafter, state, params, cache, tokens, n_tokens, key, *, cfg, k, sampling, tree):
  ctx = DraftContext(target_params=params, target_cache=cache, tokens=tokens, n_tokens=n_tokens,
                     target_cfg=cfg, k=k, sampling=sampling)
  if tree is not None:
    return drafter.propose_tree(state, ctx, drafter.round_tree(tree), key)[0]
  drafts, q, _, _ = drafter.propose(state, ctx, key)
  return drafts, q


def draft_cost(target, drafter, k: int, context_len: int, max_len: int, temperature: float = 0.0,
               n: int = 5, repeats: int = 3, seed: int = 0, tree=None) -> float:
  """Seconds of one `propose` of `drafter` (a drafter object: `specjax.api.resolve_drafter`
  makes one from a spec), or with `tree` (a `TreeSpec` of depth k) of one `propose_tree`
  (see `draft_call`)."""
  rng = np.random.default_rng(seed)
  context = rng.integers(0, target.cfg.vocab_size, size=context_len).astype(np.int32)
  propose, args = draft_call(target, drafter, k, context, max_len, temperature, seed, tree)
  return time_call(propose, args, n, repeats)


def ideal_speedup(tokens_per_round: float, c_step: float, c_verify: float,
                  c_draft: float) -> Optional[float]:
  """tokens_per_round * c_step / (c_draft + c_verify); None when an input is missing."""
  if tokens_per_round is None or not c_step or not c_verify or c_draft is None:
    return None
  return float(tokens_per_round * c_step / (c_draft + c_verify))
