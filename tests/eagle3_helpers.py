"""Tiny EAGLE-3 drafts written by vllm-project/speculators itself, for the EAGLE-3 tests.

The target is `tiny_models.tiny(vocab=61, layers=4)` (width 32); speculators'
`Eagle3DraftModel` is built with random weights (std 0.2, norm scales 1 +- 0.2), the
target's embeddings and a frequency-built draft vocabulary, and saved with its own
`save_pretrained`. torch and speculators are imported inside the functions.
"""
from __future__ import annotations

import numpy as np

from specjax.loading.hf_export import export_hf
from specjax.models import draft_vocab
from tiny_models import tiny

TARGET = tiny(vocab=61, layers=4, seed=0)
V, D = TARGET.cfg.vocab_size, TARGET.cfg.d_model
VD = 20  # the draft vocabulary
AUX = (1, 2, 4)  # inputs of target layers 1 and 2, and the last layer's output


def vocab(vd=VD, seed=0):
  """(d2t, t2d) of a frequency-built draft vocabulary of vd ids."""
  counts = np.random.default_rng(seed).integers(1, 50, V)
  return draft_vocab.vocab_from_frequencies(counts, vd, V)


def write_verifier(out_dir: str, target=TARGET) -> str:
  """The target as a Hugging Face directory: speculators reads the verifier's config (layer
  ids) and weights (embeddings, head) from it."""
  return export_hf(target.cfg, target.params, out_dir)


def layer_config(layer_type="llama", layers=1, vocab_size=V, hidden=D):
  from transformers import LlamaConfig
  from transformers.models.qwen3.configuration_qwen3 import Qwen3Config
  kw = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=64,
            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
            rms_norm_eps=1e-5, max_position_embeddings=512, tie_word_embeddings=False)
  cfg = Qwen3Config(**kw) if layer_type == "qwen3" else LlamaConfig(**kw)
  cfg._attn_implementation = "eager"  # pylint: disable=protected-access
  return cfg


def speculators_model(vd=VD, aux=AUX, layer_type="llama", layers=1, seed=0, verifier=None,
                      target=TARGET, **flags):
  """speculators' Eagle3DraftModel with random weights and the target's embeddings."""
  import torch
  from speculators.config import SpeculatorsConfig, VerifierConfig
  from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
  from speculators.proposals.greedy import GreedyTokenProposalConfig
  cfg = Eagle3SpeculatorConfig(
      transformer_layer_config=layer_config(layer_type, layers, target.cfg.vocab_size,
                                            target.cfg.d_model),
      draft_vocab_size=vd, eagle_aux_hidden_state_layer_ids=list(aux), **flags,
      speculators_config=SpeculatorsConfig(
          algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
          default_proposal_method="greedy",
          verifier=VerifierConfig(name_or_path=verifier, architectures=["LlamaForCausalLM"])))
  m = Eagle3DraftModel(cfg)
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for n, p in m.named_parameters():
      scale = 1 + 0.2 * torch.randn(p.shape, generator=g) if "norm" in n else None
      p.copy_(scale if scale is not None else 0.2 * torch.randn(p.shape, generator=g))
    m.embed_tokens.weight.copy_(torch.tensor(np.asarray(target.params["embed"])))
  if vd != target.cfg.vocab_size:
    d2t, t2d = vocab(vd, seed)
    m.load_vocab_mappings(torch.from_numpy(t2d), torch.from_numpy(d2t))
  return m.eval()


def torch_logits(m, aux: np.ndarray, tokens: np.ndarray, steps: int = 3) -> list:
  """speculators' own forward (training-time test, `steps` steps) over aux [1, T, A*D] and
  tokens [1, T]: the draft-vocabulary logits of each step, [1, T, Vd] each (its forward
  returns only argmax tokens, so lm_head's outputs are recorded)."""
  import torch
  from speculators.models.attention import create_float_mask
  if m._attn_impl != "eager":  # from_pretrained builds flex attention; CPU runs eager
    m.config.transformer_layer_config._attn_implementation = "eager"
    m._attn_impl, m._create_mask_fn = "eager", create_float_mask
  seen = []
  hook = m.lm_head.register_forward_hook(lambda mod, i, o: seen.append(o.detach().numpy()))
  with torch.no_grad():
    m(torch.tensor(aux), torch.tensor(tokens), torch.zeros(tokens.shape, dtype=torch.long),
      ttt_steps=steps)
  hook.remove()
  return seen


def legacy_tensors(m) -> dict:
  """The EAGLE authors' layout of a speculators model's weights: layers.0.* -> midlayer.*,
  no embeddings or verifier tensors (numpy, torch's [out, in])."""
  out = {}
  for k, v in m.state_dict().items():
    if k.startswith(("embed_tokens", "verifier_")):
      continue
    out[k.replace("layers.0.", "midlayer.", 1)] = v.detach().numpy().copy()
  return out


def legacy_config(m) -> dict:
  """A legacy config.json (LlamaForCausalLMEagle3) for a speculators model."""
  tl = m.config.transformer_layer_config
  return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
          "vocab_size": tl.vocab_size, "hidden_size": tl.hidden_size,
          "intermediate_size": tl.intermediate_size, "num_hidden_layers": 1,
          "num_attention_heads": tl.num_attention_heads,
          "num_key_value_heads": tl.num_key_value_heads, "head_dim": tl.head_dim,
          "rms_norm_eps": tl.rms_norm_eps, "max_position_embeddings": 512, "rope_theta": 10000.0,
          "hidden_act": "silu", "draft_vocab_size": m.config.draft_vocab_size,
          "tie_word_embeddings": False}
