"""The DFlash objective in the one training loop (`training.loop.run`): on a tiny target and
config, the loss falls and held-out slot agreement rises; checkpoints and metrics are
written. (Greedy exactness of trained drafts: tests/decoding/drafters/test_dflash_drafter.py.)"""
import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from configs import common
from specjax.decoding.drafters import DFlashDrafter
from specjax.models import dflash as dflash_lib
from specjax.training.dflash import train_dflash
from tiny_models import random_prompts, tiny

TARGET = tiny("llama", vocab=11, layers=2, seed=0, std=0.5)


def tiny_config():
  c = ml_collections.ConfigDict()
  c.seed, c.batch_size, c.num_steps = 0, 8, 40
  c.log_every, c.ckpt_every, c.keep_checkpoints = 1, 20, 1
  c.optim = common.optim(lr=1e-2, warmup_steps=5, weight_decay=0.0)
  c.data = ml_collections.ConfigDict(dict(max_new_tokens=24))
  c.dflash = ml_collections.ConfigDict(dict(gamma=4.0))
  c.eval = ml_collections.ConfigDict(dict(every=40, engine=False))
  return c


def test_loss_falls_in_the_training_loop(tmp_path):
  layers = dataclasses.replace(TARGET.cfg, n_layers=1, qk_norm=True, tie_embeddings=False)
  cfg = dflash_lib.DFlashConfig(layers=layers, block_size=4, aux_layer_ids=(1, 2),
                                mask_token_id=10, draft_vocab_size=8)
  params = dflash_lib.init_params(cfg, jax.random.PRNGKey(1), TARGET.params["embed"], std=0.5)
  params["draft_ids"] = jnp.asarray([0, 1, 2, 3, 5, 6, 8, 9], jnp.int32)
  drafter = DFlashDrafter.for_target(cfg, params, TARGET)
  prompts = random_prompts(24, 11, lo=2, hi=6, seed=7)
  workdir = str(tmp_path / "dflash")
  summary = train_dflash(tiny_config(), workdir, TARGET, drafter, prompts[:16], prompts[16:],
                         log=lambda *_: None)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  losses = [r["loss"] for r in rows if "loss" in r]
  first = next(r for r in rows if r["step"] == 0 and "heldout_acc_s1" in r)
  last = [r for r in rows if r["step"] == 40 and "heldout_acc_s1" in r][-1]
  assert losses[-1] < 0.4 * losses[0], losses
  assert last["heldout_acc_s1"] > first["heldout_acc_s1"] + 0.08  # held out: a random target generalises little
  assert summary["latest_step"] == 40
  assert summary["params"]["fc"]["kernel"].shape == params["fc"]["kernel"].shape
