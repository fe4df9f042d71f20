"""The decoding loop against the stub target (`stub_model.py`): no transformer anywhere.

Greedy speculation must give the stub target's own greedy tokens (a pure-Python closed
form) for every drafter, with rows of different lengths in one batch, and with runs cut
by EOS and by max_new_tokens; the run statistics keep their identities (`stub_checks`).
"""
import numpy as np
import pytest

import specjax
from specjax.decoding.drafters import EarlyExitDrafter, NgramDrafter
from spec_reference import assert_counts, model_children, ngram_children
from stub_checks import check_counters, partial_rounds, rows_cut_inside_drafts
from stub_model import (EXIT_PHASE, ragged_prompts, reference_greedy, reference_logits, stub,
                        stub_draft)

pytestmark = pytest.mark.stub

K = 3
N_NEW = 20
PROMPTS = ragged_prompts(4, seed=0)  # lengths differ; odd rows repeat a stretch
TARGET = stub()
DRAFT_PHASE = 2
# What each drafter proposes from the final tokens alone (`spec_reference`).
CHILDREN = {
    "ngram": ngram_children(3, 2 * K),
    "early_exit": model_children(lambda ids: reference_logits(ids, EXIT_PHASE)),
    "stub_draft": model_children(lambda ids: reference_logits(ids, DRAFT_PHASE)),
}


def want(n=N_NEW, eos_ids=()):
  return [reference_greedy(p, n, eos_ids) for p in PROMPTS]


def test_stub_prompts_are_ragged():
  assert len({len(p) for p in PROMPTS}) == len(PROMPTS)


def test_target_alone_matches_closed_form():
  out = specjax.generate(TARGET, PROMPTS, N_NEW)
  assert out.tokens == want()
  assert out.stats.target_passes.tolist() == [N_NEW] * len(PROMPTS)  # prefill + 1 a round
  assert out.stats.draft_passes.tolist() == [0] * len(PROMPTS)
  check_counters(out)


DRAFTERS = {"ngram": NgramDrafter(n=3), "early_exit": EarlyExitDrafter(n_layers=1),
            "stub_draft": stub_draft(DRAFT_PHASE)}
PER_ROUND = {"ngram": 0, "early_exit": K, "stub_draft": K}  # draft passes a round
# Drafts a round: prompt lookup drafts past the text's cycle (CYCLE < 2K), so its
# continuations wrap around with the match's period.
K_OF = {"ngram": 2 * K, "early_exit": K, "stub_draft": K}


@pytest.mark.parametrize("name", list(DRAFTERS))
def test_chain_matches_target_alone(name):
  """Each drafter's chain gives the target's tokens, and accepts in each round exactly
  what its proposal from the final tokens matches; some rounds accept none of the k
  drafts and others some or all of them (the stub draft and early exit agree with the
  target often but not always, prompt lookup where the text repeats)."""
  k = K_OF[name]
  out = specjax.generate(TARGET, PROMPTS, N_NEW, draft=DRAFTERS[name], k=k)
  assert out.tokens == want(), name
  check_counters(out, PER_ROUND[name])
  assert_counts(out, PROMPTS, [1] * k, CHILDREN[name])
  rounds = partial_rounds(out)
  assert rounds["none"] > 0 and rounds["all"] > 0, (name, rounds)
  assert 0.0 < out.stats.acceptance_rate < 1.0
  assert out.stats.rounds.sum() < out.stats.new_tokens.sum() - len(PROMPTS)  # fewer passes
  if name != "ngram":  # partial acceptance: a round that keeps some drafts but not all
    assert rounds["some"] > 0, (name, rounds)


@pytest.mark.parametrize("name", ["early_exit", "stub_draft"])
@pytest.mark.parametrize("max_new", [1, 2, 7, 13])
def test_max_new_tokens_cut(name, max_new):
  """max_new_tokens ends every row there, also inside a round's accepted drafts (which
  then count as neither accepted nor on the round's path)."""
  out = specjax.generate(TARGET, PROMPTS, max_new, draft=DRAFTERS[name], k=K)
  assert out.tokens == want(max_new)
  assert [len(t) for t in out.tokens] == [max_new] * len(PROMPTS)
  check_counters(out, K)
  assert_counts(out, PROMPTS, [1] * K, CHILDREN[name])
  if max_new == 13:  # these rows' last rounds accepted drafts past the 13th token
    assert rows_cut_inside_drafts(out) > 0


def _eos_for_rows():
  """A stop token that ends some rows early and not others: the token that appears
  earliest (past the first two new tokens) in row 0's reference output."""
  row = want()[0]
  return next(t for t in row[2:] if t not in row[:2])


@pytest.mark.parametrize("name", ["alone"] + list(DRAFTERS))
def test_eos_cut(name):
  """Rows stop at their first EOS (kept), each at its own length; rows without it run
  to max_new_tokens. The cut may fall inside a round's accepted drafts."""
  eos = _eos_for_rows()
  expected = want(eos_ids=(eos,))
  assert len({len(t) for t in expected}) > 1  # rows end at different lengths
  k = K_OF.get(name, K)
  out = specjax.generate(TARGET, PROMPTS, N_NEW, draft=DRAFTERS.get(name), k=k, eos_ids=[eos])
  assert out.tokens == expected
  for row in out.tokens:
    assert eos not in row[:-1] and (row[-1] == eos or len(row) == N_NEW)
  check_counters(out, PER_ROUND.get(name, 0))
  if name != "alone":
    assert_counts(out, PROMPTS, [1] * k, CHILDREN[name])
    assert rows_cut_inside_drafts(out) > 0


def test_one_row_matches_its_row_in_a_batch():
  """A row decodes the same alone as beside rows of other lengths (per-row lengths,
  masks and rollback do not leak across rows)."""
  batch = specjax.generate(TARGET, PROMPTS, N_NEW, draft=DRAFTERS["stub_draft"], k=K)
  for b in (0, 3):
    alone = specjax.generate(TARGET, [PROMPTS[b]], N_NEW, draft=DRAFTERS["stub_draft"], k=K)
    assert alone.tokens[0] == batch.tokens[b]
    np.testing.assert_array_equal(alone.stats.accepted[0], batch.stats.accepted[b])
