"""The embedded SmolLM2-135M: greedy output with every drafter that runs on it (prompt
lookup, early exit, lookahead, Medusa heads, the shipped feature and LM drafts; chains and
trees) equals the target's own, on one ragged batch.

One file, so the 30-layer target is loaded and its own output compiled and decoded once
for all of them (each was a file's set-up of its own: about 10 CPU-s apiece)."""
import os

import numpy as np
import pytest

import specjax
from specjax.loading import load_model

pytestmark = pytest.mark.real_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = [
    "Rewrite this sentence in the passive voice: The committee approved the budget.",
    "List the even numbers in 3, 8, 15, 22, 41, 56 and explain how you chose them.",
]
NEW = 24


@pytest.fixture(scope="module")
def smollm2():
  return load_model("smollm2-135m")


@pytest.fixture(scope="module")
def ids(smollm2):
  return [smollm2.encode(p, chat=True) for p in PROMPTS]


@pytest.fixture(scope="module")
def base(smollm2, ids):
  """The target alone: what every drafter must reproduce."""
  out = specjax.generate(smollm2, ids, NEW)
  assert all(len(t) > 0 for t in out.tokens)
  return out


def _shipped(name):
  asset = os.path.join(ROOT, "specjax", "assets", name)
  if not os.path.isdir(asset):
    pytest.fail(f"the shipped draft specjax/assets/{name} is missing")
  size = sum(os.path.getsize(os.path.join(asset, f)) for f in os.listdir(asset))
  assert size <= 25 * 2 ** 20
  return asset


def test_prompt_lookup_and_early_exit_chains(smollm2, ids, base):
  for draft, k in [("ngram:3", 4), ("early_exit:10", 2)]:
    out = specjax.generate(smollm2, ids, NEW, draft=draft, k=k)
    assert out.tokens == base.tokens, draft
    assert out.texts == base.texts


def test_trees_with_the_shipped_feature_draft_and_early_exit(smollm2, ids, base):
  draft = load_model("smollm2-135m-draft", target=smollm2)
  for tree in ("static:3,2,1", "dynamic:10"):
    out = specjax.generate(smollm2, ids, NEW, draft=draft, k=3, tree=tree)
    assert out.tokens == base.tokens, tree
  out = specjax.generate(smollm2, ids, NEW, draft="early_exit:10", k=2, tree="static:2,2")
  assert out.tokens == base.tokens


def test_lookahead(smollm2, ids, base):
  out = specjax.generate(smollm2, ids, NEW, draft="lookahead:4,3")
  assert out.tokens == base.tokens


def test_medusa_heads_chain_and_tree(smollm2, ids, base):
  from specjax.api import resolve_drafter
  from specjax.decoding.drafters import MedusaDrafter
  from specjax.loading import registry
  from specjax.models import medusa as medusa_lib
  if "smollm2-135m-medusa" in registry.REGISTRY:  # the shipped heads
    drafter = resolve_drafter("smollm2-135m-medusa", smollm2)
  else:  # zero-initialised heads (each = the target's own head)
    cfg = medusa_lib.MedusaConfig(n_heads=3, d_model=smollm2.cfg.d_model,
                                  vocab_size=smollm2.cfg.vocab_size)
    drafter = MedusaDrafter.for_target(cfg, medusa_lib.init_medusa(cfg), smollm2)
  for tree in (None, "static:2,2,1"):
    out = specjax.generate(smollm2, ids, NEW, draft=drafter, k=3, tree=tree)
    assert out.tokens == base.tokens, tree


@pytest.mark.parametrize("name", ["smollm2-135m-draft", "smollm2-135m-draft-gpu"])
def test_shipped_feature_drafts(smollm2, ids, base, name):
  """The default draft (a feature draft), and its GPU-continued variant, load by name and
  are exact on the embedded target."""
  from specjax.training import export
  asset = _shipped(name)
  draft = load_model(name, target=smollm2)
  assert "fc" in draft.params and "head_vocab" in draft.params
  assert draft.cfg.n_layers < smollm2.cfg.n_layers
  spec = specjax.generate(smollm2, ids, NEW, draft=draft, k=4)
  assert spec.tokens == base.tokens
  assert 0.2 < spec.stats.acceptance_rate < 1  # undistilled init: ~0.03
  same = export.load_asset(asset, target=smollm2)
  np.testing.assert_array_equal(np.asarray(same.params["fc"]["kernel"]),
                                np.asarray(draft.params["fc"]["kernel"]))


def test_shipped_lm_draft(smollm2, ids, base):
  from specjax.training import export
  asset = _shipped("smollm2-135m-draft-lm")
  draft = export.load_asset(asset, target=smollm2)
  assert draft.cfg.n_layers < smollm2.cfg.n_layers and "head_vocab" in draft.params
  spec = specjax.generate(smollm2, ids, NEW, draft=draft, k=4)
  assert spec.tokens == base.tokens
  assert 0.1 < spec.stats.acceptance_rate < 1  # undistilled init: ~0.03
  # The registry name gives the same draft, reduced head included (given the loaded target:
  # one GGUF load fewer); the "-hf" name the full-head Hugging Face export, equal on the
  # reduced vocabulary (it loads its target by name).
  reg = load_model("smollm2-135m-draft-lm", target=smollm2)
  assert reg.cfg == draft.cfg
  np.testing.assert_array_equal(np.asarray(reg.params["head_vocab"]),
                                np.asarray(draft.params["head_vocab"]))
  np.testing.assert_allclose(np.asarray(reg.logits(ids[0])), np.asarray(draft.logits(ids[0])),
                             atol=1e-4)  # the loaded copy uses the blocked inference layout
  full = load_model("smollm2-135m-draft-lm-hf")
  assert full.cfg == draft.cfg and "head_vocab" not in full.params
  hv = np.asarray(draft.params["head_vocab"])
  np.testing.assert_allclose(np.asarray(full.logits(ids[0]))[:, hv],
                             np.asarray(draft.logits(ids[0]))[:, hv], atol=1e-3)
