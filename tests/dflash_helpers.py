"""Tiny DFlash drafts written by vllm-project/speculators itself, for the DFlash tests.

The target is `tiny_models.tiny(vocab=61, layers=4)` (width 32). speculators'
`DFlashDraftModel` is built (eager attention) with random weights (std 0.2, norm scales
1 +- 0.2), the target's embeddings and a frequency-built draft vocabulary, and saved
with its own `save_pretrained`. torch and speculators are imported inside the functions.
"""
from __future__ import annotations

import numpy as np

from specjax.models import draft_vocab
from tiny_models import tiny

TARGET = tiny(vocab=61, layers=4, seed=0)
V, D = TARGET.cfg.vocab_size, TARGET.cfg.d_model
VD = 24  # the draft vocabulary
AUX = (1, 2, 4)  # inputs of target layers 1 and 2, and the last layer's output
MASK = 60


def vocab(vd=VD, seed=0):
  """(d2t, t2d) of a frequency-built draft vocabulary of vd ids."""
  counts = np.random.default_rng(seed).integers(1, 50, V)
  return draft_vocab.vocab_from_frequencies(counts, vd, V)


def speculators_dflash(vd=VD, aux=AUX, block_size=4, layers=2, seed=0, mask=MASK,
                       sample_from_anchor=False, layer_types=None, window=None,
                       non_causal=False):
  """speculators' DFlashDraftModel with random weights and the target's embeddings."""
  import torch
  from transformers.models.qwen3.modeling_qwen3 import Qwen3Config
  from speculators.config import SpeculatorsConfig, VerifierConfig
  from speculators.models.dflash import DFlashDraftModel, DFlashSpeculatorConfig
  from speculators.proposals.greedy import GreedyTokenProposalConfig
  extra = {} if layer_types is None else dict(layer_types=layer_types, sliding_window=window,
                                              use_sliding_window=True)
  tl = Qwen3Config(vocab_size=V, hidden_size=D, intermediate_size=64, num_hidden_layers=layers,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                   max_position_embeddings=512, rope_theta=10000.0, **extra)
  tl._attn_implementation = "eager"  # pylint: disable=protected-access
  n_drafts = block_size if sample_from_anchor else block_size - 1
  cfg = DFlashSpeculatorConfig(
      transformer_layer_config=tl, draft_vocab_size=vd, block_size=block_size,
      aux_hidden_state_layer_ids=list(aux), mask_token_id=mask,
      sample_from_anchor=sample_from_anchor, sliding_window_non_causal=non_causal,
      speculators_config=SpeculatorsConfig(
          algorithm="dflash",
          proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=n_drafts)],
          default_proposal_method="greedy",
          verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"])))
  torch.manual_seed(seed)
  m = DFlashDraftModel(cfg)
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in m.named_parameters():
      if name.startswith(("embed_tokens", "verifier_")):
        continue
      if p.ndim == 1:
        p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
      else:
        p.copy_(0.2 * torch.randn(p.shape, generator=g))
    m.embed_tokens.weight.copy_(torch.tensor(np.asarray(TARGET.params["embed"])))
  if vd != V:
    d2t, t2d = vocab(vd, seed)
    m.load_vocab_mappings(torch.tensor(t2d), torch.tensor(d2t))
  else:  # a full-vocabulary draft's head is the target's own
    with torch.no_grad():
      m.lm_head.weight.copy_(torch.tensor(np.asarray(TARGET.params["embed"])))
  return m.eval()


def torch_block_logits(m, feats: np.ndarray, tokens: np.ndarray, block_size: int) -> np.ndarray:
  """speculators' own forward: every anchor 0..T-N-1 of one sequence (all chosen, sorted)
  -> logits [A, N, Vd]. feats [1, T, L*D], tokens [1, T]."""
  import torch
  t = tokens.shape[1]
  with torch.no_grad():
    _, logits, _, _, _ = m._backbone_forward(  # pylint: disable=protected-access
        hidden_states=torch.tensor(feats), input_ids=torch.tensor(tokens, dtype=torch.long),
        loss_mask=torch.ones(1, t), verifier_last_hidden_states=torch.zeros(1, t, D),
        document_ids=torch.zeros(1, t, dtype=torch.long), max_anchors=t - block_size)
  return logits.numpy().reshape(t - block_size, block_size, -1)
