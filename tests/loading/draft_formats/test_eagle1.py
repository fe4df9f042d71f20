"""EAGLE-1 drafts (SafeAILab layout and speculators' "eagle" type) in specjax's feature
drafter: logit parity with a torch reference of their forward (transformers' Llama decoder
layer, as EAGLE and speculators use it), greedy exactness against the target alone, and
one clear error line for a draft made for another target."""
import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.decoding.drafters import FeatureDrafter
from specjax.errors import LoadError
from specjax.loading.draft_formats import eagle1
from specjax.models import forward_hidden, init_params
from specjax.models.feature_draft import draft_head, feature_forward, target_features
from tiny_models import TinyModel, random_prompts, tiny

torch = pytest.importorskip("torch")
from transformers import LlamaConfig  # noqa: E402  (after torch's importorskip)
from transformers.models.llama.modeling_llama import (LlamaDecoderLayer, LlamaRMSNorm,  # noqa: E402
                                                      LlamaRotaryEmbedding)

TARGET = tiny("llama", vocab=11, layers=2, seed=0, std=0.5)  # small vocab: drafts agree often
PROMPTS = random_prompts(5, 11, lo=1, hi=9, seed=2)  # ragged rows


def layer_config(target, n_layers=1, **kw):
  c = target.cfg
  fields = dict(vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.d_ff,
                num_hidden_layers=n_layers, num_attention_heads=c.n_heads,
                num_key_value_heads=c.n_kv_heads, rms_norm_eps=c.norm_eps,
                max_position_embeddings=c.max_positions, rope_theta=c.rope_theta)
  return LlamaConfig(**{**fields, **kw}, attn_implementation="eager")


class TorchEagle1(torch.nn.Module):
  """EAGLE-1's draft (SafeAILab `cnets1.Model`, speculators' `EagleSpeculator`): fc over
  [embedding; the target's normed feature], Llama decoder layers (the first without its
  input norm unless layernorms), the target's lm_head; with layernorms an RMSNorm of the
  embedding before fc and one before the head."""

  def __init__(self, target, n_layers=1, bias=True, layernorms=False, **config):
    super().__init__()
    c = layer_config(target, n_layers, **config)
    d = c.hidden_size
    self.fc = torch.nn.Linear(2 * d, d, bias=bias)
    self.layers = torch.nn.ModuleList([LlamaDecoderLayer(c, i) for i in range(n_layers)])
    if not layernorms:
      self.layers[0].input_layernorm = torch.nn.Identity()
    self.embedding_layernorm = LlamaRMSNorm(d, c.rms_norm_eps) if layernorms else None
    self.pre_lm_head_layernorm = LlamaRMSNorm(d, c.rms_norm_eps) if layernorms else None
    self.rotary = LlamaRotaryEmbedding(c)
    self.embed = torch.tensor(np.asarray(target.params["embed"], np.float32))  # [V, D], tied head
    scale = torch.tensor(np.asarray(target.params["final_norm"]["scale"], np.float32))
    self.target_norm = lambda h: h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True)
                                                 + target.cfg.norm_eps) * scale

  def forward(self, hidden, input_ids):
    """The target's hidden states [B, T, D] (before its final norm) and tokens j + 1 ->
    draft logits [B, T, V]."""
    b, t, _ = hidden.shape
    e = self.embed[input_ids]
    if self.embedding_layernorm is not None:
      e = self.embedding_layernorm(e)
    x = self.fc(torch.cat([e, self.target_norm(hidden)], dim=-1))
    pos = torch.arange(t)[None].expand(b, t)
    cos_sin = self.rotary(x, pos)
    mask = torch.full((t, t), float("-inf")).triu(1)[None, None].expand(b, 1, t, t)
    for layer in self.layers:
      x = layer(x, attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
    if self.pre_lm_head_layernorm is not None:
      x = self.pre_lm_head_layernorm(x)
    return x @ self.embed.T


def random_draft(target, seed=0, std=0.3, **kw):
  torch.manual_seed(seed)
  m = TorchEagle1(target, **kw)
  with torch.no_grad():
    for n, p in m.named_parameters():
      p.copy_((1.0 + 0.2 * torch.randn(p.shape)) if "norm" in n else std * torch.randn(p.shape))
  return m


def agreeing_draft(target, seed=1, noise=0.05):
  """A draft that agrees with the target at times: its layer is the target's first one
  (plus noise) over fc = [embedding scaled to the target's input norm | 0.1 * feature]."""
  m = random_draft(target, seed=seed, std=noise)
  d = target.cfg.d_model
  p = target.params["layers"][0]
  t = lambda a: torch.tensor(np.asarray(a, np.float32))
  rms = float(np.sqrt((np.asarray(target.params["embed"]) ** 2).mean()))
  with torch.no_grad():
    m.fc.weight.add_(torch.cat([torch.eye(d) / rms, 0.1 * torch.eye(d)], dim=1))
    layer = m.layers[0]
    for x in "qkvo":
      getattr(layer.self_attn, f"{x}_proj").weight.add_(t(p["attn"][x]["kernel"]).T)
    for x in ("gate", "up", "down"):
      getattr(layer.mlp, f"{x}_proj").weight.add_(t(p["mlp"][x]["kernel"]).T)
  return m


def write_safeailab(path, model, fmt="bin", embed=True, drop=(), **config):
  """The SafeAILab layout: config.json (the layers' Llama config, "bias") and
  pytorch_model.bin / model.safetensors with fc.*, layers.{i}.*, embed_tokens.weight."""
  os.makedirs(path, exist_ok=True)
  state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()
           if k.startswith(("fc.", "layers.")) and k not in drop}
  if embed:
    state["embed_tokens.weight"] = model.embed.clone()
  if fmt == "bin":
    torch.save(state, os.path.join(path, "pytorch_model.bin"))
  else:
    from safetensors.torch import save_file
    save_file(state, os.path.join(path, "model.safetensors"))
  hf = layer_config(TARGET if not config.get("like") else config.pop("like"),
                    len(model.layers)).to_dict()
  hf.update(architectures=["LlamaForCausalLM"], bias=model.fc.bias is not None, **config)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(hf, f)
  return str(path)


def write_speculators(path, model, layernorms, fusion_bias):
  """speculators' "eagle" type: its config fields and tensor names (fusion_fc, transformer,
  embedding_layernorm, pre_lm_head_layernorm), as `EagleSpeculator.save_pretrained` wrote
  them (speculators 0.9 no longer ships the class, so the test writes the layout)."""
  os.makedirs(path, exist_ok=True)
  rename = {"fc.": "fusion_fc.", "layers.0.": "transformer."}
  state = {}
  for k, v in model.state_dict().items():
    for old, new in rename.items():
      if k.startswith(old):
        state[new + k[len(old):]] = v.detach().clone().contiguous()
    if k.startswith(("embedding_layernorm.", "pre_lm_head_layernorm.")):
      state[k] = v.detach().clone().contiguous()
  from safetensors.torch import save_file
  save_file(state, os.path.join(path, "model.safetensors"))
  hf = {"speculators_model_type": "eagle", "architectures": ["EagleSpeculator"],
        "transformer_layer_architecture": "LlamaDecoderLayer", "layernorms": layernorms,
        "fusion_bias": fusion_bias,
        "transformer_layer_config": layer_config(TARGET, 1).to_diff_dict(),
        "speculators_config": {"algorithm": "eagle", "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy",
                                                     "speculative_tokens": 5}],
                               "verifier": {"name_or_path": "tiny-target",
                                            "architectures": ["LlamaForCausalLM"]}}}
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(hf, f)
  return str(path)


CASES = {  # name: (writer, draft kwargs)
    "safeailab-bin-2layers": (lambda p, m: write_safeailab(p, m, "bin"), dict(n_layers=2)),
    "safeailab-st-nobias": (lambda p, m: write_safeailab(p, m, "st", embed=False),
                            dict(bias=False)),
    "speculators-layernorms": (lambda p, m: write_speculators(p, m, True, False),
                               dict(bias=False, layernorms=True)),
    "speculators-hass": (lambda p, m: write_speculators(p, m, False, True), dict(bias=True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_torch_reference(tmp_path, case):
  write, kw = CASES[case]
  ref = random_draft(TARGET, **kw)
  path = write(tmp_path / case, ref)
  assert eagle1.detect(path)
  d = eagle1.load(path, TARGET)
  assert d.kind == "eagle1" and d.cfg.model.n_layers == kw.get("n_layers", 1)
  assert d.verifier == ("tiny-target" if case.startswith("speculators") else None)
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, 11, (2, 9)), jnp.int32)
  hidden, _ = forward_hidden(TARGET.params, TARGET.cfg, tokens)  # the target's, before its norm
  nxt = tokens[:, 1:]
  feats = target_features(d.params, d.cfg.style, hidden[:, :-1])
  pred, _ = feature_forward(d.params, d.cfg.model, feats, nxt, style=d.cfg.style)
  got = np.asarray(draft_head(d.params, d.cfg.model, pred))
  with torch.no_grad():
    want = ref(torch.tensor(np.asarray(hidden[:, :-1])), torch.tensor(np.asarray(nxt))).numpy()
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
  # specjax's own style (unit-RMS fc inputs) would compute something else.
  other, _ = feature_forward(d.params, d.cfg.model, feats, nxt)
  assert np.abs(np.asarray(draft_head(d.params, d.cfg.model, other)) - want).max() > 1e-2


@pytest.mark.parametrize("kw", [dict(k=3, tree="static:2,2,1")])  # chains: below
def test_greedy_identical_to_target(tmp_path, kw):
  d = eagle1.load(write_safeailab(tmp_path / "d", agreeing_draft(TARGET)), TARGET)
  drafter = FeatureDrafter(params=d.params, cfg=d.cfg.model, style=d.cfg.style, name=d.name)
  base = specjax.generate(TARGET, PROMPTS, 20)
  out = specjax.generate(TARGET, PROMPTS, 20, draft=drafter, **kw)
  assert out.tokens == base.tokens
  assert out.stats.accepted.sum() >= 8  # drafts are kept often enough to matter ...
  assert out.stats.acceptance_rate < 0.9  # ... and rejected often enough too


def test_detect_tells_formats_apart(tmp_path):
  from test_medusa1 import torch_heads, write_published
  assert not eagle1.detect(write_published(tmp_path / "medusa", torch_heads(TARGET, 1, 1), 1, 1))
  plain = write_safeailab(tmp_path / "plain", random_draft(TARGET))
  assert eagle1.detect(plain)
  state = torch.load(os.path.join(plain, "pytorch_model.bin"))
  state["lm_head.weight"] = torch.zeros(11, 32)  # a draft with its own head: not EAGLE-1
  torch.save(state, os.path.join(plain, "pytorch_model.bin"))
  assert not eagle1.detect(plain)


# ------------------------------------------------------------------------ bad input


def _narrow(d):
  cfg = dataclasses.replace(TARGET.cfg, d_model=d, n_heads=2, n_kv_heads=2)
  return TinyModel(cfg, init_params(cfg, jax.random.PRNGKey(3), std=0.5))


def _no_reading(monkeypatch):
  def read(*a, **k):
    raise AssertionError("weights were read before the checks")
  monkeypatch.setattr(eagle1, "read_weights", read)


@pytest.mark.parametrize("case,match", [
    ("hidden", "hidden size 16, but this target's is 32"),
    ("vocab", "vocabulary of 13, but this target's is 11"),
    ("heads", "2 key/value heads .* k_proj \\(32, 32\\)"),
    ("missing", "lacks 1 tensors .*'layers.0.mlp.down_proj.weight'"),
    ("gpt2", "this target is GPT-2"),
])
def test_another_targets_draft_fails_in_one_line(tmp_path, monkeypatch, case, match):
  other = {"hidden": _narrow(16),
           "vocab": tiny("llama", vocab=13, layers=1, seed=3)}.get(case, TARGET)
  # "heads": weights with 4 key/value heads under a config (the target's) that says 2
  ref = TorchEagle1(other, **({"num_key_value_heads": 4} if case == "heads" else {}))
  path = write_safeailab(tmp_path / case, ref, like=other,
                         drop=("layers.0.mlp.down_proj.weight",) if case == "missing" else ())
  target = tiny("gpt2", vocab=11, layers=1, seed=3) if case == "gpt2" else TARGET
  _no_reading(monkeypatch)
  with pytest.raises(ValueError, match=match) as e:
    eagle1.load(path, target)
  assert "\n" not in str(e.value)


def test_config_says_bias_but_weights_have_none(tmp_path):
  path = write_safeailab(tmp_path / "d", random_draft(TARGET, bias=False))
  with open(os.path.join(path, "config.json")) as f:
    hf = json.load(f)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(dict(hf, bias=True), f)
  with pytest.raises(LoadError, match="lacks 1 tensors .*'fc.bias'"):
    eagle1.load(path, TARGET)


def test_public_api_loads_it(tmp_path):
  """load_model(dir, target=) detects the format; 'eagle1:<dir>' and the bare directory
  run as the feature drafter with EAGLE-1's style."""
  path = write_safeailab(tmp_path / "d", agreeing_draft(TARGET))
  d = specjax.load_model(path, target=TARGET)
  assert (d.kind, d.fmt) == ("eagle1", "eagle1")
  base = specjax.generate(TARGET, PROMPTS, 20)
  for spec in (f"eagle1:{path}", path):
    out = specjax.generate(TARGET, PROMPTS, 20, draft=spec, k=3)
    assert out.tokens == base.tokens
    assert out.stats.accepted.sum() >= 8 and out.stats.acceptance_rate < 0.9  # partial


# ------------------------------------------------------------------------ writing


def _same_params(a, b):
  fa, ta = jax.tree_util.tree_flatten_with_path(a)
  fb, tb = jax.tree_util.tree_flatten_with_path(b)
  assert ta == tb
  for (path, x), (_, y) in zip(fa, fb):
    assert np.array_equal(np.asarray(x), np.asarray(y)), jax.tree_util.keystr(path)


def _logits(d, tokens):
  hidden, _ = forward_hidden(TARGET.params, TARGET.cfg, tokens)
  feats = target_features(d.params, d.cfg.style, hidden[:, :-1])
  pred, _ = feature_forward(d.params, d.cfg.model, feats, tokens[:, 1:], style=d.cfg.style)
  return np.asarray(draft_head(d.params, d.cfg.model, pred))


def _own_embed(p, m):  # the SafeAILab layout with embeddings of its own (not the target's)
  m.embed = m.embed + 0.01 * torch.randn(m.embed.shape)
  return write_safeailab(p, m, "st")


ROUND_TRIPS = {  # name: (writer, draft kwargs)
    "safeailab-own-embed": (_own_embed, dict(bias=True)),
    "speculators-layernorms-bias": (lambda p, m: write_speculators(p, m, True, True),
                                    dict(bias=True, layernorms=True)),
}


@pytest.mark.parametrize("case", list(ROUND_TRIPS))
def test_written_as_speculators_eagle_reads_back_the_same(tmp_path, case):
  """An EAGLE-1 draft (either layout) -> speculators' "eagle" type -> the same params and
  logits, the verifier recorded; greedy decoding with it equals the target alone."""
  from specjax.loading import draft_formats
  write, kw = ROUND_TRIPS[case]
  d = eagle1.load(write(tmp_path / "src", random_draft(TARGET, **kw)), TARGET)
  assert d.cfg.own_embed == (case == "safeailab-own-embed")
  out = draft_formats.save(d, "speculators", str(tmp_path / "out"), verifier="org/tiny-target")
  with open(os.path.join(out, "config.json")) as f:
    hf = json.load(f)
  assert (hf["speculators_model_type"], hf["layernorms"], hf["fusion_bias"]) == (
      "eagle", kw.get("layernorms", False), True)
  assert hf["speculators_config"]["verifier"]["name_or_path"] == "org/tiny-target"
  assert draft_formats.detect(out) == "speculators:eagle"
  back = draft_formats.load(out, TARGET)
  assert (back.kind, back.cfg, back.verifier) == ("eagle1", d.cfg, "org/tiny-target")
  _same_params(back.params, d.params)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 11, (2, 9)), jnp.int32)
  assert np.array_equal(_logits(back, tokens), _logits(d, tokens))
  if case.startswith("speculators"):  # one short generate: exactness, not acceptance
    base = specjax.generate(TARGET, PROMPTS, 12)
    assert specjax.generate(TARGET, PROMPTS, 12, draft=f"eagle1:{out}", k=3).tokens == base.tokens


def test_what_speculators_eagle_cannot_hold_is_one_line(tmp_path):
  from specjax.loading import draft_formats
  d = eagle1.load(write_safeailab(tmp_path / "two", random_draft(TARGET, n_layers=2)), TARGET)
  bad = {"two layers": (lambda: draft_formats.save(d, "speculators", str(tmp_path / "a")),
                        "holds one decoder layer .* has 2"),
         "eagle3 layout": (lambda: draft_formats.save(d, "eagle3", str(tmp_path / "b")),
                           "A eagle1 draft cannot be written as 'eagle3'"),
         "another kind": (lambda: eagle1.save(dataclasses.replace(d, kind="eagle3"),
                                              str(tmp_path / "c")), "not an EAGLE-1 draft")}
  for what, (write, match) in bad.items():
    with pytest.raises(ValueError, match=match) as e:
      write()
    assert "\n" not in str(e.value), what
  assert not any(os.path.exists(tmp_path / x) for x in "abc")  # refused before writing
