"""Medusa heads for SmolLM2-135M-Instruct (`smollm2-135m-medusa`).

    nice -n 10 python scripts/distill_medusa.py --config=configs/distill_smollm2_medusa.py \
        --workdir=/tmp/medusa_smollm2
    python scripts/distill_medusa.py --config=configs/distill_smollm2_medusa.py \
        --workdir=/tmp/medusa_smollm2 --export=specjax/assets/smollm2-135m-medusa \
        --results=experiments/medusa

Heads: 4 Medusa heads (one zero-initialised residual block SiLU(W x + b) + x each) on the
target's final-normed last hidden state, projected by the target's own frozen output
embedding onto the 4096 most frequent ids of the training continuations (FR-Spec style:
other ids get q = 0, verification stays exact). Head i predicts token t + 2 + i.
Data: one greedy continuation (64 tokens) from the target for each of the first 192
prompts of the training split (disjoint from the held-out split), with the target's
hidden states, cached in the workdir; a head reads one position, so training draws
batches of 256 positions. Sized for a CPU shared by 8 agents: on a quiet 2-core machine
~10 min of sampling, ~3 min of features, ~10 min of training. Loss: Medusa-1, head i's cross-entropy weighted 0.8**i.
Rerunning the same command on the same workdir resumes from the newest checkpoint.
"""
import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.target = "smollm2-135m"
  c.prompts = ml_collections.ConfigDict(dict(num_train=192, num_heldout=0, max_prompt_len=0, chat=True,
                                             train_sets=("train",)))
  c.medusa = ml_collections.ConfigDict(dict(n_heads=4, n_layers=1, head_vocab_size=4096, init_std=0.0,
                                            decay=0.8))
  c.data = ml_collections.ConfigDict(dict(temperatures=(0.0,), max_new_tokens=64, seq_len=192,
                                          sample_batch_size=32))
  c.optim = ml_collections.ConfigDict(dict(lr=1e-3, warmup_steps=20, end_lr_fraction=0.1,
                                           weight_decay=0.0, clip_norm=1.0, b1=0.9, b2=0.98))
  c.batch_size = 256  # position examples per step
  c.num_steps = 300
  c.log_every = 10
  c.ckpt_every = 25
  c.keep_checkpoints = 2
  c.eval = ml_collections.ConfigDict(dict(every=100, engine=True, num_prompts=8, max_new_tokens=32,
                                          k=4, num_heldout_pool=32))
  return c
