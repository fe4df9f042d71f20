"""The embedded SmolLM2-135M with the shipped feature draft: tree greedy output equals
the target's own (ragged rows)."""
import pytest

import specjax
from test_real_model_decoding import PROMPTS

pytestmark = pytest.mark.real_model


def test_tree_greedy_identical_on_smollm2():
  target = specjax.load_model("smollm2-135m")
  prompts = [target.encode(p, chat=True) for p in PROMPTS]
  base = specjax.generate(target, prompts, 24)
  draft = specjax.load_model("smollm2-135m-draft", target=target)
  for tree in ("static:3,2,1", "dynamic:10"):
    out = specjax.generate(target, prompts, 24, draft=draft, k=3, tree=tree)
    assert out.tokens == base.tokens, tree
  out = specjax.generate(target, prompts, 24, draft="early_exit:10", k=2, tree="static:2,2")
  assert out.tokens == base.tokens
