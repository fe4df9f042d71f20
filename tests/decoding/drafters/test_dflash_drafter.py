"""DFlash (block diffusion) drafts: greedy exactness (chain and trees), the exact sampling
law with a negative control, and the drafter's one-line errors."""
import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.decoding.drafters import DFlashDrafter
from specjax.models import dflash as dflash_lib
from tiny_models import random_prompts, tiny

from test_exact_sampling import (N_CALLS, PROMPT, ROWS, TARGET, V, assert_rounds_covered,
                                 chi_square_fails, exact_joint)


def dflash_for(target, block_size=4, draft_ids=None, mask=None, aux=(1, 2), std=0.5, seed=1,
               sample_from_anchor=False, windows=()):
  """A random DFlash draft (one layer) for target; draft_ids: a draft vocabulary."""
  tc = target.cfg
  layers = dataclasses.replace(tc, n_layers=len(windows) or 1, qk_norm=True,
                               tie_embeddings=False)
  cfg = dflash_lib.DFlashConfig(
      layers=layers, block_size=block_size, aux_layer_ids=tuple(aux),
      mask_token_id=tc.vocab_size - 1 if mask is None else mask,
      sample_from_anchor=sample_from_anchor, windows=tuple(windows),
      draft_vocab_size=len(draft_ids) if draft_ids is not None else tc.vocab_size)
  params = dflash_lib.init_params(cfg, jax.random.PRNGKey(seed), target.params["embed"], std=std)
  if draft_ids is not None:
    params["draft_ids"] = jnp.asarray(draft_ids, jnp.int32)
  return DFlashDrafter.for_target(cfg, params, target)


# ------------------------------------------------------------------------ greedy

SMALL = tiny("llama", vocab=11, layers=2, seed=0, std=0.5)
TRAIN_PROMPTS = random_prompts(16, 11, lo=2, hi=6, seed=7)
PROMPTS = TRAIN_PROMPTS[:3]  # a ragged batch of 3
SMALL_IDS = [0, 1, 2, 3, 5, 6, 8, 9]  # a draft vocabulary of 8 of the 11 ids


def fit(draft, target, prompts, steps, new_tokens=24, lr=1e-2):
  """The DFlash objective (`training.dflash`) on the target's greedy continuations of
  prompts, full batch, Adam; embeddings and draft vocabulary frozen. Returns the trained
  drafter and the per-step (loss, slot accuracies)."""
  import optax
  from specjax.models.interface import Decoder, target_pass
  from specjax.training import dflash as train_lib
  out = specjax.generate(target, prompts, new_tokens)
  seqs = [p + t for p, t in zip(prompts, out.tokens)]
  t = max(map(len, seqs))
  tokens = jnp.asarray([s + [0] * (t - len(s)) for s in seqs], jnp.int32)
  lens = jnp.asarray([len(s) for s in seqs])
  dec = Decoder(params=target.params, cfg=target.cfg)
  hidden, _, feats = target_pass(dec, draft.cfg.feature_layers, tokens, prefill=(lens, t))
  target_logits = dec.head(hidden)
  anchors, valid = train_lib.anchors_of(draft.cfg, lens, t)
  frozen = {k: v for k, v in draft.params.items() if k in ("embed", "draft_ids")}
  params = {k: v for k, v in draft.params.items() if k not in frozen}
  opt = optax.adam(lr)

  @jax.jit
  def step(params, opt_state):
    loss_fn = lambda p: train_lib.dflash_loss({**p, **frozen}, draft.cfg, feats, tokens,
                                              target_logits, anchors, valid)
    (loss, m), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = opt.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, m["acc"]

  opt_state, history = opt.init(params), []
  for _ in range(steps):
    params, opt_state, loss, acc = step(params, opt_state)
    history.append((float(loss), np.asarray(acc)))
  return draft.replace(params={**params, **frozen}), history


@pytest.fixture(scope="module")
def trained():
  return fit(dflash_for(SMALL, draft_ids=SMALL_IDS), SMALL, TRAIN_PROMPTS, steps=80)


def test_training_loss_falls(trained):
  _, history = trained
  (loss0, acc0), (loss1, acc1) = history[0], history[-1]
  assert loss1 < 0.4 * loss0
  assert acc1[1:].mean() > acc0[1:].mean() + 0.2  # the drafted slots (slot 0 is the anchor)


@pytest.mark.parametrize("kw", [dict(k=3), dict(k=3, tree="static:3,2,1"),
                                dict(k=3, tree="dynamic:6")])
def test_greedy_identical_to_target(trained, kw):
  base = specjax.generate(SMALL, PROMPTS, 24)
  out = specjax.generate(SMALL, PROMPTS, 24, draft=trained[0], **kw)
  assert out.tokens == base.tokens
  s = out.stats
  assert s.accepted.sum() >= 10  # drafts are accepted often enough to matter
  assert (s.checked - s.accepted).sum() >= 5  # ... and rejected: partial acceptance
  assert (s.draft_passes == s.rounds).all()  # one draft pass a round


def test_greedy_sliding_window_and_sample_from_anchor():
  """Sliding-window layers (causal in the block) and drafts from the anchor slot too."""
  base = specjax.generate(SMALL, PROMPTS, 16)
  for draft in (dflash_for(SMALL, windows=(4, 0)), dflash_for(SMALL, sample_from_anchor=True)):
    out = specjax.generate(SMALL, PROMPTS, 16, draft=draft, k=3)
    assert out.tokens == base.tokens


# ---------------------------------------------------------------------- sampling

DRAFT_IDS = [0, 2, 3]  # ids 1 and 4 are outside the draft vocabulary: q = 0 there


@flax.struct.dataclass
class SmoothedQ(DFlashDrafter):
  """A wrong drafter: samples from q but reports half of it spread over the ids outside
  its draft vocabulary (q > 0 where it never drafts, as unmapped logits would give)."""

  def propose(self, state, ctx, key):
    drafts, q, state, cache = super().propose(state, ctx, key)
    outside = (q == 0).astype(q.dtype)
    return drafts, 0.5 * q + 0.5 * outside / outside.sum(-1, keepdims=True), state, cache


@flax.struct.dataclass
class ShiftedQ(DFlashDrafter):
  """A wrong drafter: reports for draft i the distribution of the slot before it (a q
  that is not the one d_i was drawn from)."""

  def propose(self, state, ctx, key):
    drafts, q, state, cache = super().propose(state, ctx, key)
    return drafts, jnp.concatenate([q[:, :1], q[:, :-1]], 1), state, cache


def dflash_joint(drafter, k, n, tree=None, calls=N_CALLS):
  counts, stats = np.zeros((V,) * n), []
  for seed in range(calls):
    out = specjax.generate(TARGET, [PROMPT] * ROWS, n, draft=drafter, k=k, seed=seed, tree=tree,
                           temperature=1.0)
    for toks in out.tokens:
      counts[tuple(toks[:n])] += 1
    stats.append(out.stats)
  return counts, stats


def law_draft(cls=DFlashDrafter, draft_ids=DRAFT_IDS):
  d = dflash_for(TARGET, block_size=3, draft_ids=draft_ids, std=0.5, seed=3)
  return cls(params=d.params, cfg=d.cfg, name=d.name)


def test_chain_sampling_is_exact():
  drafter = law_draft()
  b = dflash_lib.block_logits(drafter.params, drafter.cfg,
                              drafter.init(None, jnp.asarray([PROMPT]), jnp.asarray([3]), 16,
                                           *_feats(drafter)).cache, jnp.asarray([0]))
  q = np.asarray(jax.nn.softmax(b, -1))
  assert (q[..., [1, 4]] == 0).all() and (q[..., DRAFT_IDS] > 0.02).all()
  counts, stats = dflash_joint(drafter, 2, 5)
  assert_rounds_covered(stats, 2)
  fails, stat, df = chi_square_fails(counts, exact_joint(specjax.SamplingParams(1.0), 5))
  assert not fails, f"chi2={stat:.1f} with df={df}"


def test_sampled_tree_is_exact():
  counts, _ = dflash_joint(law_draft(), 2, 4, tree="static:2,2:sample", calls=2)
  fails, stat, df = chi_square_fails(counts, exact_joint(specjax.SamplingParams(1.0), 4))
  assert not fails, f"chi2={stat:.1f} with df={df}"


@pytest.mark.parametrize("cls", [SmoothedQ, ShiftedQ])
def test_negative_control_fails(cls):
  counts, _ = dflash_joint(law_draft(cls), 2, 5, calls=1)
  fails, stat, df = chi_square_fails(counts, exact_joint(specjax.SamplingParams(1.0), 5))
  assert fails, f"the wrong q passed: chi2={stat:.1f} with df={df}"


def _feats(drafter):
  from specjax.models.interface import Decoder, target_pass
  dec = Decoder(params=TARGET.params, cfg=TARGET.cfg)
  _, _, feats = target_pass(dec, drafter.cfg.feature_layers, jnp.asarray([PROMPT]),
                            prefill=(jnp.asarray([3]), 16))
  return (feats,)


# ------------------------------------------------------------------------ errors


def test_errors_before_any_work():
  draft = dflash_for(SMALL, block_size=4)
  with pytest.raises(ValueError, match="predicts 3 tokens per pass.*k <= 3"):
    specjax.generate(SMALL, PROMPTS, 8, draft=draft, k=4)
  with pytest.raises(ValueError, match="block of 4 positions.*cache limit of 20"):
    # 9 + 8 tokens and a verify pass of k + 1 = 2 fit 20 slots; a block of 4 does not
    specjax.generate(SMALL, [[1] * 9], 8, draft=draft, k=1, max_cache_len=20)
  with pytest.raises(ValueError, match="mask_token_id 11, outside the vocabulary"):
    dflash_for(SMALL, mask=11)
  with pytest.raises(ValueError, match="target layer ids \\[1, 5\\].*2 layers"):
    dflash_for(SMALL, aux=(1, 5))
  other = tiny("llama", vocab=13, layers=2, seed=0)
  with pytest.raises(ValueError, match="vocabulary of 11 ids but the target has 13"):
    DFlashDrafter.for_target(draft.cfg, draft.params, other)


def test_prompt_lookup_in_front():
  """'<dflash>+ngram:3': lookup where the text repeats, the block elsewhere (its state
  follows the verified tokens); a lookup chain deeper than the block is one line."""
  from specjax.decoding.drafters import LookupFirstDrafter
  prompts = [p * 3 for p in PROMPTS]
  base = specjax.generate(SMALL, prompts, 20)
  draft = dflash_for(SMALL)
  out = specjax.generate(SMALL, prompts, 20, draft=LookupFirstDrafter(base=draft, n=3), k=3,
                         tree="static:2,1,1")
  assert out.tokens == base.tokens
  with pytest.raises(ValueError, match="predicts 3 tokens per pass.*got k=5"):
    specjax.generate(SMALL, prompts, 20, draft=LookupFirstDrafter(base=draft, n=3, chain=5), k=3,
                     tree="static:2,1,1")
