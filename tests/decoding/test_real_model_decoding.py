"""The embedded SmolLM2-135M: speculative greedy output equals the target's own."""
import pytest

import specjax

pytestmark = pytest.mark.real_model

PROMPTS = [
    "Rewrite this sentence in the passive voice: The committee approved the budget.",
    "List the even numbers in 3, 8, 15, 22, 41, 56 and explain how you chose them.",
]


@pytest.fixture(scope="module")
def smollm2():
  return specjax.load_model("smollm2-135m")


def test_speculative_greedy_identical_on_smollm2(smollm2):
  prompts = [smollm2.encode(p, chat=True) for p in PROMPTS]
  base = specjax.generate(smollm2, prompts, 24)
  assert all(len(t) > 0 for t in base.tokens)
  for draft, k in [("ngram:3", 4), ("early_exit:10", 2)]:
    out = specjax.generate(smollm2, prompts, 24, draft=draft, k=k)
    assert out.tokens == base.tokens, draft
    assert out.texts == base.texts
