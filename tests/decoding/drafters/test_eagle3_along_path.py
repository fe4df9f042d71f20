"""EAGLE-3 acceptance identical to the reference, prompt by prompt (issue 38).

Greedy decoding at k = 1 with a trained EAGLE-3 draft accepts exactly the drafts that
speculators' own `Eagle3DraftModel` (loaded by its `from_pretrained` from the exported
directory) accepts along the same greedy path. At k = 1 every draft cache entry comes from
the target's verified aux states, so the draft's proposal at each round is the
reference's teacher-forced step-0 prediction at that position: one reference forward over
prompt + greedy tokens, with the aux states taken from transformers' hidden_states[id]
(the input of layer id), then a simulation of the k = 1 rounds. Token identity alone
cannot see a draft fed the wrong position or the wrong layers; the negative controls (aux
states one position late, aux ids one layer off) change the per-prompt counts.
"""
from __future__ import annotations

import time

import jax
import numpy as np
import pytest

import specjax
from eagle3_helpers import D, TARGET, V, write_verifier
from specjax.decoding.drafters import Eagle3Drafter
from specjax.loading.draft_formats import PublishedDraft, speculators_format
from specjax.models import draft_vocab, eagle3
from specjax.models.config import ModelConfig
from specjax.training import eagle3 as train_eagle3
from tiny_models import random_prompts

VD, N, PICK = 40, 16, 4  # draft vocabulary, new tokens, prompts decoded
# Inputs of target layers 1..3 of 4. Not id 4 (= L): transformers 5.25's hidden_states[L]
# is the output *after* the final norm, specjax's id L the output before it.
AUX = (1, 2, 3)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  """A draft trained briefly on the target's greedy continuations (decoded on training
  prompts, where it agrees often), exported in speculators' format naming a verifier
  directory (the target as a transformers checkpoint)."""
  t0 = time.process_time()
  prompts = random_prompts(24, V, lo=3, hi=8, seed=7)
  out = specjax.generate(TARGET, prompts, 24)
  seqs, mask = np.zeros((24, 32), np.int32), np.zeros((24, 32), np.float32)
  for b, (p, o) in enumerate(zip(prompts, out.tokens)):
    s = (p + o)[:32]
    seqs[b, :len(s)], mask[b, len(p) - 1:len(s)] = s, 1
  d2t, t2d = draft_vocab.vocab_from_frequencies(np.bincount(seqs[mask > 0], minlength=V), VD, V)
  cfg = eagle3.Eagle3Config(layer=ModelConfig("llama", V, D, 1, 4, 2, 8, 64, max_positions=512),
                            aux_layers=AUX, target_d_model=D, draft_vocab_size=VD)
  params = eagle3.init_params(cfg, jax.random.PRNGKey(0), TARGET.params["embed"], std=0.1,
                              draft_ids=draft_vocab.check_vocab(d2t, t2d, V, VD))
  params, agree = train_eagle3.fit(params, cfg, TARGET.params, TARGET.cfg, seqs, mask, steps=150)
  assert (agree > 0.4).all(), agree  # training worked
  ver = write_verifier(str(tmp_path_factory.mktemp("verifier")))
  out_dir = str(tmp_path_factory.mktemp("eagle3-path"))
  speculators_format.save(PublishedDraft("trained", "eagle3", "speculators:eagle3", cfg, params),
                          out_dir, verifier=ver)
  lens = [len(p) for p in prompts]
  pick = [lens.index(n) for n in sorted(set(lens))[:PICK]]  # distinct lengths: ragged batch
  return Eagle3Drafter(params=params, cfg=cfg, name=out_dir), ver, out_dir, [
      prompts[i] for i in pick], t0


def _reference_predictions(ver, out_dir, seqs, aux_ids=None, late=0):
  """Per sequence, pred[p] = the reference draft's target-vocabulary argmax for token p
  (p >= 2): speculators' step 0 pairs token x_{p-1} with the aux state of position p-2
  (its shift_batch), positions 1.. . `late` feeds the aux state of p-2+late instead;
  aux_ids overrides the layers read (both: negative controls)."""
  import torch
  from speculators.models.attention import create_float_mask
  from speculators.models.eagle3 import Eagle3DraftModel
  from transformers import AutoModelForCausalLM
  hf = AutoModelForCausalLM.from_pretrained(ver, dtype=torch.float32).eval()
  m = Eagle3DraftModel.from_pretrained(out_dir).eval()
  m.config.transformer_layer_config._attn_implementation = "eager"  # CPU: no flex attention
  m._attn_impl, m._create_mask_fn = "eager", create_float_mask  # pylint: disable=protected-access
  ids = list(aux_ids or m.config.eagle_aux_hidden_state_layer_ids)
  d2t = m.d2t.numpy()
  preds = []
  for s in seqs:
    x = torch.tensor([s])
    with torch.no_grad():
      hs = hf(x, output_hidden_states=True).hidden_states
      g = torch.cat([hs[a] for a in ids], -1)  # [1, T, A*D]
      g = torch.cat([g[:, late:], g[:, -1:].expand(1, late, -1)], 1)  # shifted late
      seen = []
      hook = m.lm_head.register_forward_hook(lambda mod, i, o: seen.append(o))
      m(g[:, :-1], x[:, 1:], torch.zeros_like(x[:, 1:]), ttt_steps=1)
      hook.remove()
    d = seen[0][0].argmax(-1).numpy()  # [T-1]: row j predicts x_{j+2}
    preds.append(np.concatenate([[-1, -1], d + d2t[d]]))  # draft ids -> target ids
  return preds


def _simulate(seq, plen, pred):
  """Accepted drafts of greedy k = 1 rounds: the prefill emits token plen; each round drafts
  token p, accepted iff it is the target's; +2 tokens on accept, +1 on reject; N tokens."""
  p, acc = plen + 1, 0
  while p < plen + N:
    hit = pred[p] == seq[p]
    acc, p = acc + int(hit), p + (2 if hit else 1)
  return acc


def test_acceptance_equals_speculators_along_the_path(setup):
  drafter, ver, out_dir, prompts, t0 = setup  # t0: cpu time counted from the fixture's start
  base = specjax.generate(TARGET, prompts, N)
  out = specjax.generate(TARGET, prompts, N, draft=drafter, k=1)
  assert out.tokens == base.tokens  # exactness
  ours = [int(a) for a in out.stats.accepted.sum(-1)]
  seqs = [p + o for p, o in zip(prompts, out.tokens)]
  plens = [len(p) for p in prompts]

  def counts(**kw):
    preds = _reference_predictions(ver, out_dir, seqs, **kw)
    return [_simulate(s, n, q) for s, n, q in zip(seqs, plens, preds)]

  ref = counts()
  assert ours == ref, (ours, ref)
  checked = [int(c) for c in out.stats.checked.sum(-1)]
  assert 0 < sum(ours) < sum(checked), (ours, checked)  # partial acceptance
  # Negative controls: the same reference fed the wrong position or the wrong layers.
  late = counts(late=1)
  assert late != ref, ("aux one position late", late, ref)
  shifted = counts(aux_ids=[a - 1 for a in AUX])
  assert shifted != ref, ("aux ids one layer off", shifted, ref)
  print(f"accepted {ours} of {checked}; late {late}; layers-1 {shifted}; "
        f"cpu {time.process_time() - t0:.1f} s")
