"""The templated-prompt draft for SmolLM2-135M-Instruct (`smollm2-135m-draft-templated`,
the starting point of the shipped `smollm2-135m-draft`, configs/distill_smollm2_selfgen.py):
an EAGLE-style feature draft.

    python scripts/distill.py --config=configs/distill_smollm2.py --workdir=/tmp/distill_smollm2
    python scripts/export_hf.py --config=configs/distill_smollm2.py --workdir=/tmp/distill_smollm2 \
        --asset=specjax/assets/smollm2-135m-draft-templated

Draft: one Llama block over fc([embed(token j+1); target feature f_j]) that predicts the
target's last hidden state (before its final norm) f_{j+1}; the target's own final norm
and an FR-Spec reduced head over the 4096 most frequent ids turn it into a distribution
(other ids get q = 0, so verification stays exact). The features come from the target's
verify pass, so every round starts from the target's own state; drafts 2..k feed back
the draft's predicted features.

Data: one temperature-1 and one greedy continuation from the target per training
prompt, over the training split and the extra training split (678 prompts; both
disjoint from the held-out split); the target's features are computed once per pool
and cached in the workdir.
Loss: forward KL between head(predicted feature) and head(target feature) on the
draft's support, plus feature_weight x smooth-L1 on unit-RMS features (EAGLE, Li et al.
2024), with unroll_steps = 3: the draft is also trained on its own predicted features
as it drafts tokens 2 and 3 ("training-time test", EAGLE-3). Noise of std
feature_noise on the input features. On 2 CPU cores: ~40 min of sampling the pools,
~15 min of target features, ~70 min of training (800 steps).
"""
import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.mesh = ""  # "" = all devices data parallel; "2,4" / "data=2,model=4": data x model
  c.target = "smollm2-135m"
  c.prompts = ml_collections.ConfigDict(dict(num_train=0, num_heldout=0, max_prompt_len=0, chat=True,
                                             train_sets=("train", "train_extra")))
  # init: LM drafts only (a feature draft's block always starts random, N(0, init_std)).
  # feature_layers: target layers read; (-1,) the last only, (2, 15, -1) EAGLE-3 style.
  # init_from: a shipped draft asset to continue from (its layers, fc and head ids).
  c.draft = ml_collections.ConfigDict(dict(kind="feature", n_layers=1, init="random", init_std=0.02,
                                           head_vocab_size=4096, train_embeddings=False,
                                           feature_noise=0.05, feature_weight=1.0,
                                           unroll_steps=3, feature_layers=(-1,), init_from=""))
  c.data = ml_collections.ConfigDict(dict(
      source="target", draft_fraction=0.5, refresh_every=0, greedy_pool=True,
      teacher="topk", teacher_top_k=32, samples_per_prompt=1,
      max_new_tokens=128, seq_len=256, temperature=1.0, sample_batch_size=16))
  c.loss = ml_collections.ConfigDict(dict(name="fkl", beta=0.5))
  c.optim = ml_collections.ConfigDict(dict(lr=1e-3, warmup_steps=20, end_lr_fraction=0.1,
                                           weight_decay=0.01, clip_norm=1.0, b1=0.9, b2=0.98,
                                           schedule="cosine"))
  c.batch_size = 16
  c.grad_accum = 1  # micro-batches per update (batch_size must divide by it)
  c.precision = "float32"  # or "bfloat16": bf16 compute, float32 master weights and losses
  c.num_steps = 800
  c.log_every = 5
  c.ckpt_every = 25
  c.keep_checkpoints = 2
  c.eval = ml_collections.ConfigDict(dict(every=100, engine=True, num_prompts=16, max_new_tokens=48,
                                          k=4, temperature=0.0))
  return c
