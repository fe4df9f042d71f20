"""speculators' DFlash format: tiny checkpoints written by speculators' own DFlashDraftModel
(save_pretrained), loaded here, logits within 1e-4 of its torch forward; export round
trip; a checkpoint for another target is one LoadError line before any weights."""
import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.errors import LoadError
from specjax.loading.draft_formats import dflash as fmt
from specjax.models import dflash as dflash_lib
from tiny_models import tiny

import dflash_helpers as h

pytest.importorskip("speculators")
T = 14


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  feats = (2 * rng.normal(size=(1, T, len(h.AUX) * h.D))).astype(np.float32)
  return feats, rng.integers(0, h.V, (1, T)).astype(np.int32)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
  """name -> (directory, the torch model): a draft vocabulary, a full one (the target's
  head), sliding-window layers with sample_from_anchor."""
  root = tmp_path_factory.mktemp("dflash")
  models = {"vocab": h.speculators_dflash(),
            "full": h.speculators_dflash(vd=h.V, seed=1, block_size=3),
            "window": h.speculators_dflash(seed=2, layers=2, layer_types=["sliding_attention",
                                                                          "full_attention"],
                                           window=3, sample_from_anchor=True)}
  out = {}
  for name, m in models.items():
    m.save_pretrained(str(root / name))
    out[name] = (str(root / name), m)
  return out


@pytest.mark.parametrize("name", ["vocab", "full", "window"])
def test_logits_match_speculators(checkpoints, name):
  path, m = checkpoints[name]
  draft = fmt.load(path, h.TARGET, name)
  cfg = draft.cfg
  assert draft.kind == "dflash" and cfg.block_size == m.config.block_size
  assert cfg.feature_layers == tuple(a - 1 for a in h.AUX)
  assert ("draft_ids" in draft.params) == (name != "full")
  feats, tokens = _inputs()
  want = h.torch_block_logits(m, feats, tokens, cfg.block_size)  # [A, N, Vd]
  got = dflash_lib.anchored_logits(draft.params, cfg, jnp.asarray(feats), jnp.asarray(tokens),
                                   jnp.arange(T - cfg.block_size))[0]
  assert np.abs(want).max() > 1.0  # not a degenerate comparison
  np.testing.assert_allclose(np.asarray(got), want, atol=1e-4, rtol=0)


def test_export_round_trip(checkpoints, tmp_path):
  path, m = checkpoints["vocab"]
  draft = fmt.load(path, h.TARGET, "vocab")
  out = fmt.save(draft, str(tmp_path / "again"))
  again = fmt.load(out, h.TARGET, "again")
  assert again.cfg == draft.cfg
  feats, tokens = _inputs(1)
  args = (jnp.asarray(feats), jnp.asarray(tokens), jnp.arange(T - 4))
  np.testing.assert_array_equal(dflash_lib.anchored_logits(again.params, again.cfg, *args),
                                dflash_lib.anchored_logits(draft.params, draft.cfg, *args))
  from speculators.models.dflash import DFlashDraftModel  # speculators reads our export
  back = DFlashDraftModel.from_pretrained(out)
  assert back.config.block_size == 4 and back.config.aux_hidden_state_layer_ids == list(h.AUX)


def _edited(src, dst, **changes):
  shutil.copytree(src, dst)
  with open(os.path.join(dst, "config.json")) as f:
    cfg = json.load(f)
  for key, value in changes.items():
    if key.startswith("layer_"):
      cfg["transformer_layer_config"][key[len("layer_"):]] = value
    else:
      cfg[key] = value
  with open(os.path.join(dst, "config.json"), "w") as f:
    json.dump(cfg, f)
  return dst


def test_bad_checkpoints_one_line(checkpoints, tmp_path):
  path, _ = checkpoints["vocab"]
  cases = [
      (dict(layer_hidden_size=48), "hidden size 48 but the target has 32"),
      (dict(layer_vocab_size=97), "vocabulary of 97 ids but the target has 61"),
      (dict(aux_hidden_state_layer_ids=[1, 2, 9]), r"layer ids \[1, 2, 9\].*4 layers"),
      (dict(mask_token_id=61), "mask_token_id 61, outside the vocabulary"),
      (dict(mask_token_id=None), "no mask_token_id"),
      (dict(block_size=1), "block_size 1"),
  ]
  for i, (changes, message) in enumerate(cases):
    bad = _edited(path, str(tmp_path / f"bad{i}"), **changes)
    with pytest.raises(LoadError, match=message) as e:
      fmt.load(bad, h.TARGET, "bad")
    assert "\n" not in str(e.value)
  other = tiny(vocab=61, layers=2, seed=0)  # a shallower target: aux id 4 is beyond it
  with pytest.raises(LoadError, match=r"layer ids \[1, 2, 4\].*2 layers"):
    fmt.load(path, other, "shallow")


def test_spec_and_directory_decode_like_the_target(checkpoints):
  """'dflash:<dir>' and the directory itself resolve to the DFlash drafter; greedy output
  equals the target alone."""
  import specjax
  path, _ = checkpoints["vocab"]
  prompts = [[3, 1, 4, 1, 5], [9, 2], [6, 5, 3, 5, 8, 9, 7]]
  base = specjax.generate(h.TARGET, prompts, 10)
  for draft in (f"dflash:{path}", path):
    out = specjax.generate(h.TARGET, prompts, 10, draft=draft, k=3)
    assert out.tokens == base.tokens
    assert (out.stats.draft_passes == out.stats.rounds).all()
  with pytest.raises(ValueError, match="holds a dflash draft"):
    specjax.generate(h.TARGET, prompts, 4, draft=f"eagle3:{path}", k=2)
