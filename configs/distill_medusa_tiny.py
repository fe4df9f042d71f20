"""Medusa heads on the toy target in seconds (smoke test of the Medusa-1 pipeline).

    python scripts/distill_medusa.py --config=configs/distill_medusa_tiny.py --workdir=/tmp/medusa_tiny

The toy target (`specjax.training.toy`) is mostly a bigram map, so its continuations are
predictable several tokens ahead from its hidden state: the heads' accuracy and the
engine's alpha should climb well above their values at initialisation.
"""
import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.target = "toy"
  c.toy = ml_collections.ConfigDict(dict(vocab_size=64, d_model=32, n_layers=1, std=0.5))
  c.prompts = ml_collections.ConfigDict(dict(num_train=64, num_heldout=8, max_prompt_len=0, chat=True))
  # Head i predicts token t + 2 + i from the target's hidden state at t; loss weight decay**i.
  c.medusa = ml_collections.ConfigDict(dict(n_heads=3, n_layers=1, head_vocab_size=0, init_std=0.0,
                                            decay=0.8))
  c.data = ml_collections.ConfigDict(dict(temperatures=(1.0, 0.0), max_new_tokens=16, seq_len=32,
                                          sample_batch_size=16))
  c.optim = ml_collections.ConfigDict(dict(lr=1e-2, warmup_steps=5, end_lr_fraction=0.1,
                                           weight_decay=0.0, clip_norm=1.0, b1=0.9, b2=0.98))
  c.batch_size = 64  # position examples per step
  c.num_steps = 60
  c.log_every = 5
  c.ckpt_every = 20
  c.keep_checkpoints = 2
  c.eval = ml_collections.ConfigDict(dict(every=30, engine=True, num_prompts=8, max_new_tokens=16,
                                          k=3))
  return c
