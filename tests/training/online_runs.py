"""What the P-EAGLE and DFlash training tests share (`specjax.training.online` drafts on the
toy target): the shortened tiny config, the uninterrupted run, the resume check and the
check that a trained and a reloaded draft decode as the target alone."""
from __future__ import annotations

import os
import shutil
import sys

import jax
import numpy as np

import specjax
from specjax.training import toy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # configs/ is importable from the repository root

STEPS = 40
quiet = lambda *_: None


def config(variant: str):
  """configs/distill.py:<variant> cut to STEPS steps, evaluated at the first and the last."""
  from configs.distill import get_config
  c = get_config(variant)
  c.num_steps, c.eval.every, c.log_every, c.ckpt_every, c.keep_checkpoints = STEPS, STEPS, 1, 20, 2
  return c


def toy_run(variant: str, train, workdir: str) -> tuple:
  """The uninterrupted run: (config, target, train prompts, held-out prompts, workdir, summary)."""
  c = config(variant)
  t = toy.toy_target(seed=c.seed, **c.toy)
  train_prompts = toy.toy_prompts(c.prompts.num_train, c.seed + 1, t.cfg.vocab_size)
  held = toy.toy_prompts(c.prompts.num_heldout, c.seed + 2, t.cfg.vocab_size)
  return c, t, train_prompts, held, workdir, train(c, workdir, t, train_prompts, held, log=quiet)


def check_resume(run: tuple, train, resumed: str) -> None:
  """A run stopped at step 20 and resumed ends with the uninterrupted run's params."""
  c, t, train_prompts, held, workdir, summary = run
  shutil.copytree(os.path.join(workdir, "data"), os.path.join(resumed, "data"))  # cached pools
  c.eval.every = 0  # evaluation does not touch the state; skipping it saves the engine's compile
  stopped = train(c, resumed, t, train_prompts, held, log=quiet, stop_at=20)
  assert stopped["latest_step"] == 20
  out = train(c, resumed, t, train_prompts, held, log=quiet)
  assert out["latest_step"] == STEPS
  jax.tree.map(np.testing.assert_array_equal, out["params"], summary["params"])
  assert not np.array_equal(stopped["params"]["fc"]["kernel"], out["params"]["fc"]["kernel"])


def check_decodes_like_the_target(t, held, trained, loaded) -> None:
  """Greedy output with the trained and the reloaded draft is the target alone, with the same
  acceptance round by round, partial acceptance and one draft pass a round."""
  base = specjax.generate(t, held, 16)
  res = {n: specjax.generate(t, held, 16, draft=d, k=3) for n, d in (("trained", trained),
                                                                     ("loaded", loaded))}
  for r in res.values():
    assert r.tokens == base.tokens  # greedy: the target alone
  np.testing.assert_array_equal(res["loaded"].stats.accepted, res["trained"].stats.accepted)
  s = res["loaded"].stats
  assert 0 < s.acceptance_rate < 1, s.acceptance_rate  # partial acceptance exercised
  assert (s.checked - s.accepted).sum() >= 5 and s.accepted.sum() >= 10
  assert (s.draft_passes == s.rounds).all()  # one draft pass a round


def pool_rows():
  """Two toy pool rows with masks of different spans: {"tokens", "mask"} [2, 16]."""
  import jax.numpy as jnp
  tokens = np.random.default_rng(1).integers(1, 63, (2, 16)).astype(np.int32)
  mask = np.zeros(tokens.shape, np.float32)
  mask[0, 2:13], mask[1, 6:15] = 1, 1
  return {"tokens": jnp.asarray(tokens), "mask": jnp.asarray(mask)}


def with_stored_teacher(t, batch, features):
  """`batch` with the target's stored teacher (its top K over the whole vocabulary and
  `features`, float16) and the same one position late (the control): (stored, late)."""
  import jax.numpy as jnp
  from specjax.models.transformer import forward
  from specjax.training.teacher import topk_logp
  ids, logp = topk_logp(forward(t.params, t.cfg, batch["tokens"])[0], t.cfg.vocab_size)
  stored = dict(batch, features=jnp.asarray(features).astype(jnp.float16), teacher_ids=ids,
                teacher_logp=logp.astype(jnp.float16))
  late = dict(stored, teacher_ids=jnp.roll(ids, 1, 1), teacher_logp=jnp.roll(stored["teacher_logp"], 1, 1))
  return stored, late
