"""P-EAGLE drafts: greedy exactness (chain and trees, a ragged batch of 3, partial
acceptance, a draft fitted by the P-EAGLE objective), the exact sampling law with a
negative control, one-line errors."""
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.decoding.drafters.peagle import PEagleDrafter
from specjax.models import eagle3, peagle as peagle_lib
from specjax.models.config import ModelConfig
from tiny_models import random_prompts, tiny

from test_exact_sampling import (N_CALLS, PROMPT, ROWS, TARGET, V, assert_rounds_covered,
                                 chi_square_fails, exact_joint)


def peagle_for(target, draft_ids=None, aux=(1, 2), depths=3, std=0.5, seed=1, mask=None):
  tc = target.cfg
  layer = ModelConfig("llama", tc.vocab_size, tc.d_model, 1, 4, 2, 8, 64, max_positions=512)
  e3 = eagle3.Eagle3Config(layer=layer, aux_layers=tuple(aux), target_d_model=tc.d_model,
                           draft_vocab_size=len(draft_ids) if draft_ids else tc.vocab_size)
  params = eagle3.init_params(e3, jax.random.PRNGKey(seed), target.params["embed"], std=std,
                              draft_ids=draft_ids)
  params["mask_hidden"] = jax.random.normal(jax.random.PRNGKey(seed + 1), (len(aux) * tc.d_model,))
  cfg = peagle_lib.PEagleConfig(eagle3=e3, n_depths=depths,
                                mask_token_id=tc.vocab_size - 1 if mask is None else mask)
  return PEagleDrafter.for_target(cfg, params, target)


SMALL = tiny("llama", vocab=11, layers=2, seed=0, std=0.5)
TRAIN_PROMPTS = random_prompts(16, 11, lo=2, hi=6, seed=7)
PROMPTS = TRAIN_PROMPTS[:3]  # a ragged batch of 3


def fit(draft, target, prompts, steps, new_tokens=24, lr=1e-2):
  """The P-EAGLE objective (`training.peagle`) on the target's greedy continuations."""
  import optax
  from specjax.models.interface import Decoder, target_pass
  from specjax.training import peagle as train_lib
  out = specjax.generate(target, prompts, new_tokens)
  seqs = [p + t for p, t in zip(prompts, out.tokens)]
  t = max(map(len, seqs))
  tokens = jnp.asarray([s + [0] * (t - len(s)) for s in seqs], jnp.int32)
  lens = jnp.asarray([len(s) for s in seqs])
  dec = Decoder(params=target.params, cfg=target.cfg)
  hidden, _, aux = target_pass(dec, draft.cfg.feature_layers, tokens, prefill=(lens, t))
  target_logits = dec.head(hidden)
  frozen = {k: v for k, v in draft.params.items() if k in ("embed", "draft_ids")}
  params = {k: v for k, v in draft.params.items() if k not in frozen}
  opt = optax.adam(lr)

  @jax.jit
  def step(params, opt_state):
    loss_fn = lambda p: train_lib.peagle_loss({**p, **frozen}, draft.cfg, aux, tokens,
                                              target_logits, lens, draft.cfg.n_depths)
    (loss, acc), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = opt.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, acc

  opt_state, history = opt.init(params), []
  for _ in range(steps):
    params, opt_state, loss, acc = step(params, opt_state)
    history.append((float(loss), np.asarray(acc)))
  return draft.replace(params={**params, **frozen}), history


@pytest.fixture(scope="module")
def trained():
  return fit(peagle_for(SMALL, draft_ids=[0, 1, 2, 3, 5, 6, 8, 9]), SMALL, TRAIN_PROMPTS,
             steps=80)


def test_training_loss_falls(trained):
  _, history = trained
  (loss0, acc0), (loss1, acc1) = history[0], history[-1]
  assert loss1 < 0.5 * loss0
  assert acc1.mean() > acc0.mean() + 0.2


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


# ---------------------------------------------------------------------- sampling

@flax.struct.dataclass
class ClaimsUnmapped(PEagleDrafter):
  """A wrong drafter: samples from its draft vocabulary but reports half of q spread over
  the ids outside it (q > 0 where it never drafts)."""

  def propose(self, state, ctx, key):
    drafts, q, state, cache = super().propose(state, ctx, key)
    outside = (q == 0).astype(q.dtype)
    return drafts, 0.5 * q + 0.5 * outside / outside.sum(-1, keepdims=True), state, cache


def law_draft(cls=PEagleDrafter):
  d = peagle_for(TARGET, draft_ids=[0, 2, 3], depths=2, seed=4)
  return cls(params=d.params, cfg=d.cfg, name=d.name)


def joint(drafter, n, tree=None, calls=N_CALLS):
  counts, stats = np.zeros((V,) * n), []
  for seed in range(calls):
    out = specjax.generate(TARGET, [PROMPT] * ROWS, n, draft=drafter, k=2, seed=seed, tree=tree,
                           temperature=1.0)
    for toks in out.tokens:
      counts[tuple(toks[:n])] += 1
    stats.append(out.stats)
  return counts, stats


def test_chain_sampling_is_exact():
  counts, stats = joint(law_draft(), 5)
  assert_rounds_covered(stats, 2)
  fails, stat, df = chi_square_fails(counts, exact_joint(specjax.SamplingParams(1.0), 5))
  assert not fails, f"chi2={stat:.1f} with df={df}"


def test_sampled_tree_is_exact():
  counts, _ = joint(law_draft(), 4, tree="static:2,2:sample", calls=2)
  fails, stat, df = chi_square_fails(counts, exact_joint(specjax.SamplingParams(1.0), 4))
  assert not fails, f"chi2={stat:.1f} with df={df}"


def test_negative_control_fails():
  counts, _ = joint(law_draft(ClaimsUnmapped), 5, calls=1)
  fails, stat, df = chi_square_fails(counts, exact_joint(specjax.SamplingParams(1.0), 5))
  assert fails, f"the wrong q passed: chi2={stat:.1f} with df={df}"


def test_errors_before_any_work():
  draft = peagle_for(SMALL, depths=3)
  with pytest.raises(ValueError, match="trained for 3 parallel drafts.*k <= 3"):
    specjax.generate(SMALL, PROMPTS, 8, draft=draft, k=4)
  with pytest.raises(ValueError, match="mask_token_id 11, outside"):
    peagle_for(SMALL, mask=11)
  with pytest.raises(ValueError, match=r"aux layers \[1, 5\]"):
    peagle_for(SMALL, aux=(1, 5))
  other = tiny("llama", vocab=13, layers=2, seed=0)
  with pytest.raises(ValueError, match="vocabulary 11 and width 32; this target has 13"):
    PEagleDrafter.for_target(draft.cfg, draft.params, other)
