"""Lookahead decoding: greedy exactness, exact sampling, the n-gram pool, the mask, errors."""
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.decoding.drafters import lookahead
from specjax.training.toy import toy_target
from tiny_models import random_prompts, tiny

from test_exact_sampling import (N_CALLS, PROMPT, ROWS, TARGET, V, chi_square_fails,
                                 exact_joint)

TOY = toy_target(seed=0, vocab_size=32, d_model=32, std=0.5)  # mostly bigram: Jacobi converges
LLAMA = tiny("llama", vocab=61, layers=2, seed=0)


@pytest.mark.parametrize("model,spec", [(TOY, "lookahead:4,3"), (TOY, "lookahead:3,4,2"),
                                        (TOY, "lookahead:5,2"), (LLAMA, "lookahead:3,3")])
def test_greedy_identical_to_target_ragged(model, spec):
  prompts = random_prompts(4, model.cfg.vocab_size, lo=1, hi=10, seed=1)
  base = specjax.generate(model, prompts, 24)
  out = specjax.generate(model, prompts, 24, draft=spec)
  assert out.tokens == base.tokens
  assert out.stats.k == int(spec.split(",")[1]) - 1  # k is the n-gram size - 1
  if model is TOY:  # the pool fills from the Jacobi trajectory and pays off
    assert out.stats.tokens_per_pass > 1.3, out.stats.tokens_per_pass


def test_greedy_identical_gpt2_positions():
  """GPT-2 reads learned positions: the window's positions P + 1 + l + j must be right
  for its guesses to help, and exactness must hold either way."""
  gpt2 = tiny("gpt2", vocab=13, layers=2, seed=3, std=0.5)
  prompts = random_prompts(3, 13, seed=4)
  assert specjax.generate(gpt2, prompts, 20, draft="lookahead:3,3").tokens == \
      specjax.generate(gpt2, prompts, 20).tokens


def test_mask_and_positions_of_one_pass():
  spec, offsets, rel = lookahead._layout(2, 3, 2)  # W = 2, N = 3, G = 2: T = 1 + 4 + 4
  assert rel.shape == (9, 9) and list(spec.parents) == [0, 0, 0, 1, 2]
  assert offsets.tolist() == [0, 1, 1, 2, 2, 1, 2, 2, 3]
  # Chain 1 (nodes 2, 4) sees the root and itself only.
  assert rel[4].nonzero()[0].tolist() == [0, 2, 4]
  # Window level 1, column 1 (index 8) sees the root, level 0 columns 0..1, itself.
  assert rel[8].nonzero()[0].tolist() == [0, 5, 6, 8]
  # Its positions are contiguous: 0, 1, 2, 3.
  assert offsets[[0, 5, 6, 8]].tolist() == [0, 1, 2, 3]


def test_pool_insert_dedups_and_rotates():
  pool = jnp.full((5, 2, 2), -1, jnp.int32)  # V = 5, G = 2, M = 2
  ptr = jnp.zeros((5,), jnp.int32)
  grams = jnp.asarray([[1, 1, 1, 1], [2, 2, 3, 4], [3, 3, 0, 4]])  # columns: n-grams of N = 3
  pool, ptr = lookahead._insert(pool, ptr, grams, g=2)
  # (1,2,3) twice: stored once; (1,3,0) second; (1,4,4) overwrites the oldest slot.
  assert np.asarray(pool[1]).tolist() == [[4, 4], [3, 0]]
  assert int(ptr[1]) == 3 and (np.asarray(pool[0]) == -1).all()


def test_sampling_is_exact():
  """Candidates are a function of the history (q one-hot per child), verified by the
  tree rule: the first three tokens follow the target's joint law at T = 1."""
  counts = np.zeros((V, V, V))
  for seed in range(N_CALLS):
    out = specjax.generate(TARGET, [PROMPT] * ROWS, 3, draft="lookahead:2,3", seed=seed,
                           temperature=1.0)
    for toks in out.tokens:
      counts[tuple(toks[:3])] += 1
  fails, stat, df = chi_square_fails(counts, exact_joint(specjax.SamplingParams(1.0), 3))
  assert not fails, f"chi2={stat:.1f} with df={df}"


def test_bad_input_is_a_clear_error():
  with pytest.raises(ValueError, match="n-gram size N >= 2"):
    specjax.generate(LLAMA, [[1, 2]], 4, draft="lookahead:3,1")
  with pytest.raises(ValueError, match="lookahead:W,N"):
    specjax.generate(LLAMA, [[1, 2]], 4, draft="lookahead:x")
  with pytest.raises(ValueError, match=r"writes 241 tokens .* limit is 128"):
    specjax.generate(LLAMA, [[1, 2]], 4, draft="lookahead:40,5,20", max_cache_len=128)
  with pytest.raises(ValueError, match="use tree=None"):
    specjax.generate(LLAMA, [[1, 2]], 4, draft="lookahead:3,3", tree="static:2,2")
