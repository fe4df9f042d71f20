"""The EAGLE-3 drafter: greedy output token-identical to the target alone (chain k = 3 and a
dynamic:16 tree, a ragged batch of 3 prompts) with partial acceptance, through the spec
'eagle3:<dir>' of a speculators-format directory; and sampling with a draft vocabulary
smaller than the target's following the target's law exactly (chi-square against
enumeration), while a drafter that reports q > 0 for ids outside its vocabulary fails."""
from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from eagle3_helpers import AUX, D, TARGET, V
from specjax.decoding.drafters import Eagle3Drafter
from specjax.loading.draft_formats import PublishedDraft, speculators_format
from specjax.models import draft_vocab, eagle3
from specjax.models.config import ModelConfig
from specjax.sampling import SamplingParams
from specjax.training import eagle3 as train_eagle3
from tiny_models import random_prompts

VD = 40  # of the target's 61 ids


def layer_cfg(vocab, d, layers=1):
  return ModelConfig("llama", vocab, d, layers, 4, 2, 8, 64, max_positions=512)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A draft trained briefly (150 Adam steps) on the target's greedy continuations of 24
  prompts, with a 40-id frequency-built vocabulary; saved in speculators' format.
  (The tiny random target's continuations do not generalise across prompts: the decoding
  prompts are training prompts, where it agrees ~60%.)"""
  prompts = random_prompts(24, V, lo=3, hi=8, seed=7)
  out = specjax.generate(TARGET, prompts, 24)
  seqs, mask = np.zeros((24, 32), np.int32), np.zeros((24, 32), np.float32)
  for b, (p, o) in enumerate(zip(prompts, out.tokens)):
    s = (p + o)[:32]
    seqs[b, :len(s)], mask[b, len(p) - 1:len(s)] = s, 1
  d2t, t2d = draft_vocab.vocab_from_frequencies(np.bincount(seqs[mask > 0], minlength=V), VD, V)
  cfg = eagle3.Eagle3Config(layer=layer_cfg(V, D), aux_layers=AUX, target_d_model=D,
                            draft_vocab_size=VD)
  params = eagle3.init_params(cfg, jax.random.PRNGKey(0), TARGET.params["embed"], std=0.1,
                              draft_ids=draft_vocab.check_vocab(d2t, t2d, V, VD))
  params, agree = train_eagle3.fit(params, cfg, TARGET.params, TARGET.cfg, seqs, mask, steps=150)
  assert (agree > 0.4).all(), agree  # training worked
  out_dir = str(tmp_path_factory.mktemp("eagle3-spec"))
  speculators_format.save(PublishedDraft("trained", "eagle3", "speculators:eagle3", cfg, params),
                          out_dir, verifier="tiny")
  lens = [len(p) for p in prompts]
  pick = [lens.index(n) for n in sorted(set(lens))[:3]]  # three prompt lengths: a ragged batch
  # Named as the spec names it (the source), so both share one compiled program.
  drafter = Eagle3Drafter(params=params, cfg=cfg, name=out_dir)
  base = [out.tokens[i][:20] for i in pick]  # the target alone (greedy: batch-independent)
  return drafter, out_dir, [prompts[i] for i in pick], base


@pytest.mark.parametrize("tree", [None, "dynamic:16"])
def test_greedy_equals_target_with_partial_acceptance(trained, tree):
  drafter, out_dir, prompts, base = trained
  assert len({len(p) for p in prompts}) == 3
  out = specjax.generate(TARGET, prompts, 20, draft=f"eagle3:{out_dir}", k=3, tree=tree)
  assert out.tokens == base
  s = out.stats
  assert 0.2 < s.acceptance_rate < 0.95, s.acceptance_rate
  assert s.accepted[:, 1:].sum() >= 2  # deeper positions reached and accepted
  assert (s.checked > s.accepted).any()  # and rejections happen
  # The drafter object itself drafts the same (the directory round-trips).
  same = specjax.generate(TARGET, prompts, 20, draft=drafter, k=3, tree=tree)
  assert same.tokens == base and (same.stats.accepted == s.accepted).all()


_MESH_WORKER = r"""
import json, sys
import specjax
from specjax import parallel
target_dir, draft_dir, prompts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
out = {}
for shape in ((2, 4), (8, 1)):
  mesh = parallel.make_mesh(shape)
  target = specjax.load_model(target_dir, mesh=mesh)
  draft = specjax.load_model(draft_dir, target=target, mesh=mesh)
  for tree in (None, "dynamic:16"):
    o = specjax.generate(target, prompts, 20, draft=draft, k=3, tree=tree)
    out[f"{shape}/{tree}"] = [o.tokens, o.stats.accepted.tolist()]
print("RESULT " + json.dumps(out))
"""


def test_a_published_draft_on_a_mesh_equals_one_device(trained, tmp_path):
  """load_model(<speculators dir>, target=, mesh=) on 8 fake CPU devices, meshes (2, 4) (4
  model shards over 2 kv heads, which repeat, and 61 ids padded to 64) and (8, 1): the draft
  is replicated beside the split target, and the chain and the dynamic:16 tree give the
  tokens and per-position acceptance of one device."""
  import json
  import os
  import subprocess
  import sys
  from eagle3_helpers import write_verifier
  from tiny_models import fake_devices_env
  _, out_dir, prompts, base = trained
  one = {tree: specjax.generate(TARGET, prompts, 20, draft=f"eagle3:{out_dir}", k=3, tree=tree)
         for tree in (None, "dynamic:16")}
  target_dir = write_verifier(str(tmp_path / "target"))
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  proc = subprocess.run([sys.executable, "-c", _MESH_WORKER, target_dir, out_dir, json.dumps(prompts)],
                        capture_output=True, text=True, timeout=600,
                        env=fake_devices_env(8, PYTHONPATH=root))
  lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
  assert proc.returncode == 0 and lines, proc.stderr[-3000:]
  got = json.loads(lines[0][len("RESULT "):])
  for shape in ("(2, 4)", "(8, 1)"):
    for tree, want in one.items():
      tokens, accepted = got[f"{shape}/{tree}"]
      assert tokens == base == want.tokens, (shape, tree)
      assert accepted == want.stats.accepted.tolist(), (shape, tree)
  assert one[None].stats.accepted.sum() > 0 and (one[None].stats.checked > one[None].stats.accepted).any()


# ---------------------------------------------------------------- exact sampling

@flax.struct.dataclass
class ClaimsUnmapped(Eagle3Drafter):
  """A wrong drafter: samples from its draft vocabulary but reports q with half its mass
  spread over the ids outside it (as if unmapped ids had q > 0)."""

  def propose(self, state, ctx, key):
    drafts, q, state, cache = super().propose(state, ctx, key)
    outside = (q == 0).astype(q.dtype)
    q = 0.5 * q + 0.5 * outside / outside.sum(-1, keepdims=True)
    return drafts, q, state, cache


def _sampling_draft(cls=Eagle3Drafter):
  import test_exact_sampling as ex
  t = ex.TARGET  # V = 5, 2 layers
  cfg = eagle3.Eagle3Config(layer=layer_cfg(ex.V, t.cfg.d_model), aux_layers=(1, 2),
                            target_d_model=t.cfg.d_model, draft_vocab_size=3)
  params = eagle3.init_params(cfg, jax.random.PRNGKey(4), t.params["embed"], std=0.5,
                              draft_ids=jnp.asarray([0, 2, 3]))
  return ex, cls(params=params, cfg=cfg, name="eagle3-v3")


def test_sampling_is_exact_with_a_smaller_draft_vocabulary():
  ex, drafter = _sampling_draft()
  sampling = SamplingParams(1.0)
  logits = eagle3.logits(drafter.params, drafter.cfg, jnp.zeros((1, 1, drafter.cfg.d_model)))
  assert (np.asarray(specjax.sampling.warp(logits, sampling))[..., [1, 4]] == 0).all()
  counts, stats = ex.sampled_joint(sampling, 2, draft=drafter, calls=2)  # N = 6,000
  ex.assert_rounds_covered(stats, 2)
  fails, stat, df = ex.chi_square_fails(counts, ex.exact_joint(sampling, ex.NEW_TOKENS[2]))
  assert not fails, f"chi2={stat:.1f} with df={df}"


def test_negative_control_q_outside_the_draft_vocabulary_fails():
  ex, drafter = _sampling_draft(ClaimsUnmapped)
  sampling = SamplingParams(1.0)
  counts, _ = ex.sampled_joint(sampling, 2, draft=drafter, calls=1)
  fails, stat, df = ex.chi_square_fails(counts, ex.exact_joint(sampling, ex.NEW_TOKENS[2]))
  assert fails, f"the wrong drafter passed: chi2={stat:.1f} with df={df}"
