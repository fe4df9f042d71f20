"""The 2-block LM draft for SmolLM2-135M-Instruct (`smollm2-135m-draft-lm`), transformers-compatible.

    nice python scripts/distill.py --config=configs/distill_smollm2_lm.py --workdir=/tmp/distill_smollm2_lm
    python scripts/export_hf.py --config=configs/distill_smollm2_lm.py --workdir=/tmp/distill_smollm2_lm \
        --asset=specjax/assets/smollm2-135m-draft-lm

Draft: 2 Llama blocks of width 576 initialised from the target's first two blocks,
the target's frozen (shared, not shipped) embedding table, and an FR-Spec reduced
output head over the 4096 most frequent tokens of target-sampled text (ids outside
get probability 0, so verification stays exact). Chosen by measuring cost per token
on a 2-core CPU: ~0.1 of the target's (the full 49152-way head alone costs more).

Data: one temperature-1 continuation from the target per training prompt (and
sample), with the target's top-32 log-probabilities stored per position as a sparse
teacher (densified on the draft's 4096 ids at train time). Runs in ~35 min on 2 CPU
cores; add `--config.data.teacher=online` on an accelerator to run the target inside
the train step instead.
"""
import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.mesh = ""  # "" = all devices data parallel; "2,4" / "data=2,model=4": data x model
  c.target = "smollm2-135m"
  c.prompts = ml_collections.ConfigDict(dict(num_train=0, num_heldout=0, max_prompt_len=0, chat=True))
  c.draft = ml_collections.ConfigDict(dict(n_layers=2, init="target", init_std=0.02,
                                           head_vocab_size=4096, train_embeddings=False))
  c.data = ml_collections.ConfigDict(dict(
      source="target", draft_fraction=0.5, refresh_every=0,
      teacher="topk", teacher_top_k=32, samples_per_prompt=1,
      max_new_tokens=128, seq_len=256, temperature=1.0, sample_batch_size=16))
  c.loss = ml_collections.ConfigDict(dict(name="fkl", beta=0.5))
  c.optim = ml_collections.ConfigDict(dict(lr=1e-3, warmup_steps=20, end_lr_fraction=0.1,
                                           weight_decay=0.01, clip_norm=1.0, b1=0.9, b2=0.98))
  c.batch_size = 16
  c.num_steps = 300
  c.log_every = 5
  c.ckpt_every = 25
  c.keep_checkpoints = 2
  c.eval = ml_collections.ConfigDict(dict(every=50, engine=True, num_prompts=16, max_new_tokens=48,
                                          k=4, temperature=0.0))
  return c
