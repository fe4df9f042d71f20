"""Medusa-1 heads in FasterDecoding's published layout: logit parity with a torch
reference of their forward, greedy exactness through specjax's Medusa drafter, and one
clear error line for heads made for another target."""
import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.decoding.drafters import MedusaDrafter
from specjax.errors import LoadError
from specjax.loading.draft_formats import medusa1
from specjax.models import forward_hidden, init_params
from specjax.models import medusa as medusa_lib
from tiny_models import TinyModel, random_prompts, tiny

torch = pytest.importorskip("torch")

TARGET = tiny("llama", vocab=11, layers=2, seed=0, std=0.5)  # small vocab: heads agree often
PROMPTS = random_prompts(5, 11, lo=1, hi=9, seed=2)  # ragged rows


class ResBlock(torch.nn.Module):
  """Medusa's block: y = x + SiLU(W x + b)."""

  def __init__(self, d):
    super().__init__()
    self.linear = torch.nn.Linear(d, d)
    self.act = torch.nn.SiLU()

  def forward(self, x):
    return x + self.act(self.linear(x))


def torch_heads(target, n_heads=3, n_layers=2, std=0.3, proj_noise=0.5, seed=0):
  """Medusa's `medusa_head`: K x (L ResBlocks, then a bias-free [V, D] projection), each
  projection initialised to the target's own head plus noise (so heads agree at times)."""
  d, v = target.cfg.d_model, target.cfg.vocab_size
  g = torch.Generator().manual_seed(seed)
  head = torch.tensor(np.asarray(target.params["embed"], np.float32))  # tied: [V, D]
  heads = torch.nn.ModuleList()
  with torch.no_grad():
    for _ in range(n_heads):
      blocks = [ResBlock(d) for _ in range(n_layers)]
      for blk in blocks:
        blk.linear.weight.copy_(std * torch.randn(d, d, generator=g))
        blk.linear.bias.copy_(0.1 * torch.randn(d, generator=g))
      proj = torch.nn.Linear(d, v, bias=False)
      proj.weight.copy_(head + proj_noise * head.std() * torch.randn(v, d, generator=g))
      heads.append(torch.nn.Sequential(*blocks, proj))
  return heads


def write_published(path, heads, n_heads, n_layers, fmt="safetensors", config=True, drop=()):
  """The layout FasterDecoding publishes: config.json + medusa_lm_head.{safetensors,pt}."""
  os.makedirs(path, exist_ok=True)
  state = {k: v.detach().contiguous() for k, v in heads.state_dict().items() if k not in drop}
  if fmt == "safetensors":
    from safetensors.torch import save_file
    save_file(state, os.path.join(path, "medusa_lm_head.safetensors"))
  else:
    torch.save(state, os.path.join(path, "medusa_lm_head.pt"))
  if config:
    with open(os.path.join(path, "config.json"), "w") as f:
      json.dump({"medusa_num_heads": n_heads, "medusa_num_layers": n_layers,
                 "base_model_name_or_path": "tiny-target"}, f)
  return str(path)


def torch_reference(heads, target, hidden):
  """Medusa's forward on the base model's output hidden state: the target's final RMSNorm
  of `hidden` [B, T, D], then every head -> [B, T, K, V]."""
  h = torch.tensor(np.asarray(hidden, np.float32))
  scale = torch.tensor(np.asarray(target.params["final_norm"]["scale"], np.float32))
  x = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + target.cfg.norm_eps) * scale
  with torch.no_grad():
    return torch.stack([head(x) for head in heads], dim=2).numpy()


@pytest.mark.parametrize("fmt", ["safetensors", "pt"])
def test_logits_match_torch_reference(tmp_path, fmt):
  heads = torch_heads(TARGET, n_heads=3, n_layers=2)
  path = write_published(tmp_path / "heads", heads, 3, 2, fmt)
  assert medusa1.detect(path)
  draft = medusa1.load(path, TARGET)
  assert (draft.kind, draft.cfg.n_heads, draft.cfg.n_layers) == ("medusa1", 3, 2)
  assert draft.verifier == "tiny-target"
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 11, (2, 7)), jnp.int32)
  hidden, _ = forward_hidden(TARGET.params, TARGET.cfg, tokens)  # [B, T, D], before the norm
  got = medusa_lib.medusa_logits(draft.params, TARGET.params, TARGET.cfg, hidden)
  want = torch_reference(heads, TARGET, hidden)
  np.testing.assert_allclose(np.asarray(got), want, atol=1e-4, rtol=1e-4)
  # The shared-projection path would give other logits: the heads' own projections are used.
  shared = medusa_lib.medusa_logits({k: draft.params[k] for k in ("w", "b")}, TARGET.params,
                                    TARGET.cfg, hidden)
  assert np.abs(np.asarray(shared) - want).max() > 1e-2


def _drafter(path):
  d = medusa1.load(path, TARGET)
  return MedusaDrafter.for_target(d.cfg, d.params, TARGET, name=d.name)


@pytest.mark.parametrize("kw", [dict(k=2, tree="static:3,2")])  # chains: below
def test_greedy_identical_to_target(tmp_path, kw):
  path = write_published(tmp_path / "heads", torch_heads(TARGET, seed=1), 3, 2, "pt")
  base = specjax.generate(TARGET, PROMPTS, 20)
  out = specjax.generate(TARGET, PROMPTS, 20, draft=_drafter(path), **kw)
  assert out.tokens == base.tokens
  assert out.stats.accepted.sum() >= 8  # drafts are kept often enough to matter ...
  assert out.stats.acceptance_rate < 0.9  # ... and rejected often enough too


def test_config_less_file_counts_heads_and_layers(tmp_path):
  heads = torch_heads(TARGET, n_heads=2, n_layers=1)
  d = medusa1.load(write_published(tmp_path / "h", heads, 2, 1, config=False), TARGET)
  assert (d.cfg.n_heads, d.cfg.n_layers) == (2, 1)
  assert "proj" in d.params and d.params["proj"].shape == (2, 32, 11)


# ------------------------------------------------------------------------ bad input


def narrow(model, d):
  """A model of width d otherwise like `model` (heads built for it are for another target)."""
  cfg = dataclasses.replace(model.cfg, d_model=d, n_heads=2, n_kv_heads=2)
  return TinyModel(cfg, init_params(cfg, jax.random.PRNGKey(3), std=0.5))


def _no_reading(monkeypatch):
  """Any weight read fails loudly: the checks must come first."""
  def read(*a, **k):
    raise AssertionError("weights were read before the checks")
  monkeypatch.setattr(medusa1, "read_weights", read)


@pytest.mark.parametrize("case,match", [
    ("hidden", "hidden size 16, but this target's is 32"),
    ("vocab", "predict 13 tokens, but this target has a vocabulary of 11"),
    ("heads", "lack .* 4 heads x 2 layers"),
    ("missing", "lack 1 tensors .*'1.1.linear.bias'"),
])
def test_another_targets_heads_fail_in_one_line(tmp_path, monkeypatch, case, match):
  other = {"hidden": narrow(TARGET, 16),
           "vocab": tiny("llama", vocab=13, layers=1, seed=3)}.get(case, TARGET)
  heads = torch_heads(other, n_heads=3, n_layers=2)
  path = write_published(tmp_path / case, heads, 4 if case == "heads" else 3, 2,
                         drop=("1.1.linear.bias",) if case == "missing" else ())
  _no_reading(monkeypatch)
  with pytest.raises(ValueError, match=match) as e:
    medusa1.load(path, TARGET)
  assert "\n" not in str(e.value)


def test_malformed_config_field(tmp_path):
  path = write_published(tmp_path / "h", torch_heads(TARGET, 2, 1), 2, 1)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump({"medusa_num_heads": "two"}, f)
  with pytest.raises(LoadError, match="medusa_num_heads='two' is not a positive integer"):
    medusa1.load(path, TARGET)


def test_own_projections_survive_specjax_asset(tmp_path):
  """save_medusa / load_medusa keep the heads' own projections (float16 on disk)."""
  d = medusa1.load(write_published(tmp_path / "h", torch_heads(TARGET, 2, 1), 2, 1), TARGET)
  medusa_lib.save_medusa(d.cfg, d.params, str(tmp_path / "asset"), target="tiny")
  cfg, params, _ = medusa_lib.load_medusa(str(tmp_path / "asset"))
  assert cfg == d.cfg
  np.testing.assert_allclose(params["proj"], d.params["proj"], atol=2e-3, rtol=2e-3)


def test_public_api_loads_it(tmp_path):
  """load_model(dir, target=) detects the format; 'medusa:<dir>' and the bare directory
  run as specjax's Medusa drafter with the heads' own projections."""
  path = write_published(tmp_path / "heads", torch_heads(TARGET, seed=1), 3, 2, "pt")
  d = specjax.load_model(path, target=TARGET)
  assert (d.kind, d.fmt) == ("medusa1", "medusa1")
  base = specjax.generate(TARGET, PROMPTS, 20)
  for spec in (f"medusa:{path}", path):
    out = specjax.generate(TARGET, PROMPTS, 20, draft=spec, k=3)
    assert out.tokens == base.tokens
    assert out.stats.accepted.sum() >= 8 and out.stats.acceptance_rate < 0.9  # partial
