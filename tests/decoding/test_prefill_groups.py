"""A batch's prefill in row groups, each at its own prompt bucket (`plan.prefill_groups`):
the rule, and that the joined state decodes exactly as the batch prefilled whole."""
import numpy as np
import pytest

import specjax
from specjax.decoding import compiled, plan
from test_exact_sampling import chi_square_fails
from tiny_models import perturbed, random_prompts, tiny

TARGET = tiny("llama", seed=0)
CLOSE_DRAFT = perturbed(TARGET, 0.03)  # greedy alpha ~0.7: partial acceptance


def test_the_rule():
  assert plan.prefill_groups([5] * 8) == (tuple(range(8)),)  # one bucket: one group
  mixed = [10, 700, 12, 900, 8, 1500, 20, 600]  # every other row long
  assert plan.prefill_groups(mixed) == ((4, 0, 2, 6), (7, 1, 3, 5))  # shortest first
  assert plan.prefill_groups([60, 70]) == ((0, 1),)  # buckets 64 and 80: a 10% gain, no split
  one_long = [40] * 31 + [1500]  # the split falls at a multiple of an eighth of the batch
  short, long = plan.prefill_groups(one_long)
  assert len(short) == 28 and set(long) == {28, 29, 30, 31}
  assert plan.prefill_groups([7]) == ((0,),)


def _prompts():
  """Three short rows and three long ones (buckets 16 and 224): a prefill in two groups."""
  short = random_prompts(3, TARGET.cfg.vocab_size, lo=3, hi=10, seed=4)
  long = random_prompts(3, TARGET.cfg.vocab_size, lo=150, hi=200, seed=5)
  return [short[0], long[0], short[1], long[1], long[2], short[2]]


@pytest.fixture
def prefills(monkeypatch):
  """The prompt argument of every loop run, and a switch that turns the groups off."""
  seen, run = [], compiled.run

  def spy(args, statics, rows):
    seen.append(args[2])
    return run(args, statics, rows)

  monkeypatch.setattr(compiled, "run", spy)
  return seen, lambda: monkeypatch.setattr(plan, "PREFILL_GROUPS_MIN_GAIN", 1.0)


@pytest.mark.parametrize("draft,k,tree", [(False, 0, None), (True, 3, None), (True, 2, "static:2,1")])
def test_grouped_prefill_decodes_as_the_whole_batch(prefills, draft, k, tree):
  """Greedy tokens and every row's statistics equal the batch prefilled as one group, and
  the rows decoded alone (a chain; with a tree, the whole batch)."""
  seen, groups_off = prefills
  prompts = _prompts()
  kw = dict(draft=CLOSE_DRAFT, k=k, tree=tree) if draft else {}
  grouped = specjax.generate(TARGET, prompts, 16, **kw)
  assert isinstance(seen[-1], tuple) and [p.shape for p in seen[-1]] == [(3, 16), (3, 224)]
  groups_off()
  whole = specjax.generate(TARGET, prompts, 16, **kw)
  assert not isinstance(seen[-1], tuple) and seen[-1].shape == (6, 224)
  assert grouped.tokens == whole.tokens
  for b in range(len(prompts)):
    assert grouped.stats.row(b) == whole.stats.row(b)
  if draft:
    s = grouped.stats
    assert (s.accepted.sum(1) > 0).all() and (s.checked > s.accepted).any()  # partial acceptance
  for b in (0, 1) if tree is None else ():  # a short row and a long one, alone
    assert specjax.generate(TARGET, [prompts[b]], 16, **kw).tokens[0] == grouped.tokens[b]


def test_grouped_sampling_follows_the_target(prefills):
  """Sampled with groups, each row's first token (the prefill's) follows the target's
  softmax at that row's own prompt (chi-square, 640 draws per prompt, rows interleaved so
  the groups reorder them); the control: the long prompt's draws tested against the short
  prompt's law fail, as rows mixed up by the grouping would."""
  seen, _ = prefills
  short, long = _prompts()[:2]
  v = TARGET.cfg.vocab_size
  counts = np.zeros((2, v), np.int64)
  for seed in range(10):
    out = specjax.generate(TARGET, [short, long] * 32, 1, seed=seed, temperature=1.0)
    for b, t in enumerate(out.tokens):
      counts[b % 2, t[0]] += 1
  assert isinstance(seen[-1], tuple) and [p.shape[0] for p in seen[-1]] == [32, 32]
  logits = [np.asarray(TARGET.logits([p]), np.float64)[0, -1] for p in (short, long)]
  probs = [np.exp(x - x.max()) / np.exp(x - x.max()).sum() for x in logits]
  for i in (0, 1):
    fails, stat, df = chi_square_fails(counts[i], probs[i])
    assert not fails, f"row {i}: chi2={stat:.1f} with df={df}"
  assert chi_square_fails(counts[1], probs[0])[0], "the control passed"
