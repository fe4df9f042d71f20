"""speculators' P-EAGLE format: tiny checkpoints written by speculators' own PEagleDraftModel
(save_pretrained), loaded here, logits within 1e-4 of its torch forward on the same COD
elements; export round trip; one-line errors for a checkpoint made for another target."""
import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.errors import LoadError
from specjax.loading.draft_formats import peagle as fmt
from specjax.models import peagle as peagle_lib

import eagle3_helpers as h

pytest.importorskip("speculators")
T, MASK = 12, 60


def speculators_peagle(layer_type="llama", layers=1, seed=0, vd=h.VD, **flags):
  """speculators' PEagleDraftModel with random weights (EAGLE-3's helper's recipe)."""
  import torch
  from speculators.config import SpeculatorsConfig, VerifierConfig
  from speculators.models.peagle import PEagleDraftModel, PEagleSpeculatorConfig
  from speculators.proposals.greedy import GreedyTokenProposalConfig
  cfg = PEagleSpeculatorConfig(
      transformer_layer_config=h.layer_config(layer_type, layers), draft_vocab_size=vd,
      eagle_aux_hidden_state_layer_ids=list(h.AUX), mask_token_id=MASK, **flags,
      speculators_config=SpeculatorsConfig(
          algorithm="peagle", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=4)],
          default_proposal_method="greedy",
          verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"])))
  m = PEagleDraftModel(cfg)
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for n, p in m.named_parameters():
      scale = 1 + 0.2 * torch.randn(p.shape, generator=g) if "norm" in n else None
      p.copy_(scale if scale is not None else 0.2 * torch.randn(p.shape, generator=g))
    m.embed_tokens.weight.copy_(torch.tensor(np.asarray(h.TARGET.params["embed"])))
    m.mask_hidden.copy_(2 * torch.randn(m.mask_hidden.shape, generator=g))
  if vd != h.V:
    d2t, t2d = h.vocab(vd, seed)
    m.load_vocab_mappings(torch.from_numpy(t2d), torch.from_numpy(d2t))
  return m.eval()


def elements():
  """COD elements: every anchor at depth 0, anchors 2 and 7 at depths 1..3, anchor 4 at 1."""
  anchor = list(range(T)) + [2, 7, 4, 2, 7, 2, 7]
  depth = [0] * T + [1, 1, 1, 2, 2, 3, 3]
  return np.asarray(anchor), np.asarray(depth)


def torch_cod_logits(m, aux, tokens, anchor, depth):
  """speculators' forward on these elements (its COD sampler replaced by them): the
  draft-vocabulary logits lm_head produced, [1, M, Vd]."""
  import torch
  from speculators.models.attention import create_float_mask
  from speculators.losses.eager import kl_div_loss
  from speculators.models.peagle import core
  if m._attn_impl != "eager":  # pylint: disable=protected-access
    m.config.transformer_layer_config._attn_implementation = "eager"
    m._attn_impl, m._create_mask_fn = "eager", create_float_mask
  seen = []
  hook = m.lm_head.register_forward_hook(lambda mod, i, o: seen.append(o.detach().numpy()))
  orig = core.generate_cod_sample_indices
  core.generate_cod_sample_indices = lambda **kw: (torch.tensor(anchor), torch.tensor(depth))
  try:
    with torch.no_grad():
      m(torch.tensor(aux), torch.tensor(tokens, dtype=torch.long),
        torch.zeros(tokens.shape, dtype=torch.long),
        verifier_last_hidden_states=torch.zeros(1, tokens.shape[1], h.D),
        loss_config={"kl_div": (kl_div_loss, 1.0)})
  finally:
    core.generate_cod_sample_indices = orig
    hook.remove()
  return seen[0]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
  root = tmp_path_factory.mktemp("peagle")
  out = {}
  for name, m in {"llama": speculators_peagle(),
                  "qwen3": speculators_peagle("qwen3", layers=2, seed=1, fc_norm=True)}.items():
    m.save_pretrained(str(root / name))
    out[name] = (str(root / name), m)
  return out


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_logits_match_speculators(checkpoints, name):
  path, m = checkpoints[name]
  draft = fmt.load(path, h.TARGET, name)
  assert draft.kind == "peagle" and draft.cfg.n_depths == 4 and draft.cfg.mask_token_id == MASK
  rng = np.random.default_rng(0)
  aux = (2 * rng.normal(size=(1, T, len(h.AUX) * h.D))).astype(np.float32)
  tokens = rng.integers(0, h.V, (1, T)).astype(np.int32)
  anchor, depth = elements()
  want = torch_cod_logits(m, aux, tokens, anchor, depth)
  got = peagle_lib.cod_logits(draft.params, draft.cfg, jnp.asarray(aux), jnp.asarray(tokens),
                              jnp.asarray(anchor), jnp.asarray(depth))
  assert np.abs(want).max() > 1.0
  np.testing.assert_allclose(np.asarray(got), want, atol=1e-4, rtol=0)


def test_export_round_trip(checkpoints, tmp_path):
  path, _ = checkpoints["qwen3"]
  draft = fmt.load(path, h.TARGET, "qwen3")
  verifier = h.write_verifier(str(tmp_path / "verifier"))  # speculators resolves layer ids there
  again = fmt.load(fmt.save(draft, str(tmp_path / "again"), verifier=verifier), h.TARGET, "again")
  assert again.cfg == draft.cfg
  np.testing.assert_array_equal(again.params["mask_hidden"], draft.params["mask_hidden"])
  from speculators.models.peagle import PEagleDraftModel
  back = PEagleDraftModel.from_pretrained(str(tmp_path / "again"))
  assert back.config.mask_token_id == MASK


def test_bad_checkpoints_one_line(checkpoints, tmp_path):
  path, _ = checkpoints["llama"]
  cases = [(dict(mask_token_id=None), "mask_token_id"),
           (dict(mask_token_id=61), "mask_token_id 61, outside"),
           (dict(eagle_aux_hidden_state_layer_ids=[1, 2, 9]), r"\[1, 2, 9\]"),
           (dict(target_hidden_size=48), "48")]
  for i, (changes, message) in enumerate(cases):
    bad = str(tmp_path / f"bad{i}")
    shutil.copytree(path, bad)
    with open(os.path.join(bad, "config.json")) as f:
      cfg = json.load(f)
    cfg.update(changes)
    with open(os.path.join(bad, "config.json"), "w") as f:
      json.dump(cfg, f)
    with pytest.raises(LoadError, match=message) as e:
      fmt.load(bad, h.TARGET, "bad")
    assert "\n" not in str(e.value)


def test_spec_decodes_like_the_target(checkpoints):
  """'peagle:<dir>' resolves to the P-EAGLE drafter: greedy output equals the target alone."""
  import specjax
  path, _ = checkpoints["llama"]
  prompts = [[3, 1, 4, 1, 5], [9, 2], [6, 5, 3, 5, 8, 9, 7]]
  base = specjax.generate(h.TARGET, prompts, 10)
  for tree in (None, "static:2,2,1"):
    out = specjax.generate(h.TARGET, prompts, 10, draft=f"peagle:{path}", k=3, tree=tree)
    assert out.tokens == base.tokens
    assert (out.stats.draft_passes == out.stats.rounds).all()
