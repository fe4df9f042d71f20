"""EAGLE-3 drafts on disk: speculators' format (written by speculators' own save_pretrained),
the EAGLE authors' legacy layout (safetensors and torch .bin, and speculators' converter
of it), the exporter round trip through speculators' from_pretrained, the aux-state
alignment against transformers' hidden states, and every bad input as one line."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eagle3_helpers import (AUX, D, TARGET, V, VD, legacy_config, legacy_tensors,
                            speculators_model, torch_logits, write_verifier)
from specjax.api.draft_spec import resolve_drafter
from specjax.loading import LoadError, draft_formats, load_model
from specjax.models import eagle3
from specjax.models.transformer import forward_hidden

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
T = 8


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
  """A verifier directory (the target as a transformers checkpoint), a speculators model
  naming it and that model saved by speculators."""
  ver = write_verifier(str(tmp_path_factory.mktemp("verifier")))
  m = speculators_model(verifier=ver, norm_before_residual=True)
  spec = str(tmp_path_factory.mktemp("speculators"))
  m.save_pretrained(spec)
  return ver, m, spec


def _inputs(seed=3):
  rng = np.random.default_rng(seed)
  return (2 * rng.normal(size=(1, T, len(AUX) * D))).astype(np.float32), rng.integers(0, V, (1, T))


def _ours(draft, aux, toks, steps=2):
  hs = eagle3.unrolled(draft.params, draft.cfg, jnp.asarray(aux), jnp.asarray(toks), steps)
  return [np.asarray(eagle3.draft_logits(draft.params, draft.cfg, h)) for h in hs]


def _same_params(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_speculators_directory_loads(dirs):
  ver, m, spec = dirs
  assert draft_formats.detect(spec) == "speculators:eagle3"
  draft = load_model(spec, target=TARGET)
  assert (draft.kind, draft.fmt, draft.verifier) == ("eagle3", "speculators:eagle3", ver)
  assert draft.cfg.aux_layers == AUX and draft.cfg.feature_layers == (0, 1, 3)
  assert draft.cfg.norm_before_residual and draft.cfg.draft_vocab_size == VD
  np.testing.assert_array_equal(np.asarray(draft.params["draft_ids"]),
                                np.arange(VD) + m.d2t.numpy())
  aux, toks = _inputs()
  for got, want in zip(_ours(draft, aux, toks), torch_logits(m, aux, toks, 2)):
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("weights", ["safetensors", "bin"])
def test_legacy_layout_loads_and_matches_speculators_converter(dirs, weights, tmp_path):
  import torch
  from safetensors.numpy import save_file
  from speculators.convert.eagle.eagle3_converter import Eagle3Converter
  ver, m, spec = dirs
  legacy = tmp_path / "legacy"
  legacy.mkdir()
  cfg = dict(legacy_config(m), norm_before_residual=True,
             eagle_config={"eagle_aux_hidden_state_layer_ids": list(AUX)})
  (legacy / "config.json").write_text(json.dumps(cfg))
  tensors = legacy_tensors(m)
  assert "midlayer.hidden_norm.weight" in tensors and "embed_tokens.weight" not in tensors
  if weights == "bin":
    torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, legacy / "pytorch_model.bin")
  else:
    save_file(tensors, str(legacy / "model.safetensors"))
  assert draft_formats.detect(str(legacy)) == "eagle3"
  draft = load_model(str(legacy), target=TARGET)
  assert draft.fmt == "eagle3" and draft.cfg.aux_layers == AUX
  aux, toks = _inputs()
  for got, want in zip(_ours(draft, aux, toks), torch_logits(m, aux, toks, 2)):
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
  # speculators' converter reads the same layout: its output loads to the same draft.
  if weights == "safetensors":
    converted = str(tmp_path / "converted")
    Eagle3Converter().convert(str(legacy), converted, base_model=ver, validate=True,
                              norm_before_residual=True, eagle_aux_hidden_state_layer_ids=list(AUX))
    _same_params(load_model(converted, target=TARGET).params, draft.params)


def test_export_round_trip(dirs, tmp_path):
  """Export -> speculators' from_pretrained (its config validation, verifier and all) gives
  the same logits; reloading here gives the same params, so token-identical drafts."""
  from speculators.models.eagle3 import Eagle3DraftModel
  ver, m, spec = dirs
  draft = load_model(spec, target=TARGET)
  out = draft_formats.save(draft, "speculators", str(tmp_path / "spec"), verifier=ver)
  theirs = Eagle3DraftModel.from_pretrained(out)
  assert list(theirs.config.eagle_aux_hidden_state_layer_ids) == list(AUX)
  aux, toks = _inputs(5)
  for got, want in zip(_ours(draft, aux, toks, 3), torch_logits(theirs, aux, toks, 3)):
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
  _same_params(load_model(out, target=TARGET).params, draft.params)
  legacy = draft_formats.save(draft, "eagle3", str(tmp_path / "legacy"))
  again = load_model(legacy, target=TARGET)
  assert again.fmt == "eagle3" and again.cfg == draft.cfg
  _same_params(again.params, draft.params)


@pytest.mark.slow
def test_export_script(dirs, tmp_path):
  ver, _, spec = dirs
  out = str(tmp_path / "legacy")
  run = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "export_draft.py"),
                        f"--draft={spec}", f"--target={ver}", "--format=eagle3", f"--out={out}"],
                       capture_output=True, text=True, cwd=ROOT)
  assert run.returncode == 0, run.stderr[-2000:]
  assert f"eagle3: {out}" in run.stdout
  _same_params(load_model(out, target=TARGET).params, load_model(spec, target=TARGET).params)


def test_aux_states_are_the_inputs_of_those_layers(dirs):
  """The drafter's feature_layers (aux id - 1) give transformers' hidden_states[id]: the
  input of layer id, as vLLM and speculators' data generation take them."""
  import torch
  from transformers import AutoModelForCausalLM
  ver, _, _ = dirs
  hf = AutoModelForCausalLM.from_pretrained(ver, dtype=torch.float32)
  toks = np.random.default_rng(0).integers(0, V, (1, T))
  with torch.no_grad():
    hs = hf(torch.tensor(toks), output_hidden_states=True).hidden_states
  cfg = dataclasses.replace(load_model(dirs[2], target=TARGET).cfg, aux_layers=(0, 1, 3))
  _, _, aux = forward_hidden(TARGET.params, TARGET.cfg, jnp.asarray(toks),
                             collect=cfg.feature_layers)
  want = np.concatenate([hs[a].numpy() for a in cfg.aux_layers], -1)
  np.testing.assert_allclose(np.asarray(aux), want, atol=1e-4, rtol=0)


# ---------------------------------------------------------------- bad input: one line

def _edit(spec, tmp_path, config=None, tensors=None):
  """A copy of the speculators directory with config.json / tensors edited."""
  from safetensors.numpy import load_file, save_file
  out = str(tmp_path / "edited")
  shutil.copytree(spec, out)
  if config:
    cfg = json.load(open(os.path.join(out, "config.json")))
    config(cfg)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
  if tensors:
    t = load_file(os.path.join(out, "model.safetensors"))
    tensors(t)
    save_file(t, os.path.join(out, "model.safetensors"))
  return out


def _other_target(**cfg):
  return dataclasses.replace(TARGET, cfg=dataclasses.replace(TARGET.cfg, **cfg))


def _set(d, key, value):
  d[key] = value


BAD = {
    "hidden size": (lambda t: t, _other_target(d_model=48, n_heads=6), "hidden size is 48"),
    "vocabulary": (lambda t: t, _other_target(vocab_size=67), "but the target has 67"),
    "aux beyond depth": (lambda t: t, _other_target(n_layers=2), "do not fit a target of 2 layers"),
    "t2d length": (lambda t: t.update(t2d=t["t2d"][:-1]), TARGET, "t2d has shape (60,)"),
    "d2t range": (lambda t: t.update(d2t=t["d2t"] + np.eye(VD, dtype=t["d2t"].dtype)[-1] * 99),
                  TARGET, "outside the target's vocabulary"),
    "d2t vs t2d": (lambda t: t.update(t2d=np.roll(t["t2d"], 1)), TARGET, "disagree"),
    "norm flag": (lambda c: _set(c, "norm_output", "yes"), TARGET, "must be true or false"),
    "aux ids": (lambda c: _set(c, "eagle_aux_hidden_state_layer_ids", "1,2"), TARGET,
                "list of integers"),
    "layer type": (lambda c: c["transformer_layer_config"].update(model_type="gemma"), TARGET,
                   "'gemma' layers"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line(dirs, tmp_path, case):
  edit, target, match = BAD[case]
  is_config = case in ("norm flag", "aux ids", "layer type")
  path = dirs[2] if case in ("hidden size", "vocabulary", "aux beyond depth") else _edit(
      dirs[2], tmp_path, config=edit if is_config else None, tensors=None if is_config else edit)
  with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")) as e:
    load_model(path, target=target)
  assert "\n" not in str(e.value)


def test_other_bad_uses_are_one_line(dirs, tmp_path):
  ver, m, spec = dirs
  with pytest.raises(LoadError, match="pass target=") as e:
    load_model(spec)
  assert "\n" not in str(e.value)
  with pytest.raises(ValueError, match="holds no published draft") as e:  # a plain model dir
    resolve_drafter(f"eagle3:{ver}", TARGET)
  assert "\n" not in str(e.value)
  legacy = tmp_path / "legacy"  # no aux ids: EAGLE's (2, L/2, L-3) repeats 2 on 4 layers
  legacy.mkdir()
  (legacy / "config.json").write_text(json.dumps(legacy_config(m)))
  with pytest.raises(LoadError, match=r"\[2, 2, 1\] do not fit") as e:
    load_model(str(legacy), target=TARGET)
  assert "\n" not in str(e.value)
