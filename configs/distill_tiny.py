"""Distillation on a toy target in seconds (smoke test of the whole pipeline).

    python scripts/distill.py --config=configs/distill_tiny.py --workdir=/tmp/distill_tiny

The target is a tiny random Llama with peaked distributions (`specjax.training.toy`);
the draft has its width, shares its embeddings and starts from random layers, so it
can learn the target exactly: alpha should climb towards 1.
"""
import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.mesh = ""  # "" = all devices data parallel; "2,4" / "data=2,model=4": data x model
  c.target = "toy"  # "toy" or a load_model source such as "smollm2-135m"
  c.toy = ml_collections.ConfigDict(dict(vocab_size=64, d_model=32, n_layers=1, std=0.5))
  c.prompts = ml_collections.ConfigDict(dict(num_train=64, num_heldout=8, max_prompt_len=0, chat=True))
  c.draft = ml_collections.ConfigDict(dict(n_layers=1, init="random", init_std=0.3, head_vocab_size=0,
                                           train_embeddings=False))
  c.data = ml_collections.ConfigDict(dict(
      source="target",  # "target", "draft" or "mix" (draft_fraction of each batch from the draft)
      draft_fraction=0.5, refresh_every=0,  # draft pools are resampled every refresh_every steps
      teacher="online",  # "online" (target runs in the train step) or "topk" (stored top-K)
      teacher_top_k=16, samples_per_prompt=1, max_new_tokens=16, seq_len=32, temperature=1.0, sample_batch_size=16))
  c.loss = ml_collections.ConfigDict(dict(name="fkl", beta=0.5))  # fkl | rkl | jsd | tvd
  c.optim = ml_collections.ConfigDict(dict(lr=1e-2, warmup_steps=5, end_lr_fraction=0.1,
                                           weight_decay=0.0, clip_norm=1.0, b1=0.9, b2=0.98))
  c.batch_size = 8
  c.num_steps = 60
  c.log_every = 1
  c.ckpt_every = 20
  c.keep_checkpoints = 2
  c.eval = ml_collections.ConfigDict(dict(every=30, engine=True, num_prompts=8, max_new_tokens=16,
                                          k=4, temperature=0.0))
  return c
