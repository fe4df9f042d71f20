"""The SmolLM2-135M feature draft sized for one accelerator: EAGLE-3 style features from
three target layers, trained on the full self-generated set in bfloat16.

    python scripts/distill.py --config=experiments/gpu/config.py --workdir=/tmp/distill_gpu
    python scripts/export_hf.py --config=experiments/gpu/config.py --workdir=/tmp/distill_gpu \
        --asset=specjax/assets/smollm2-135m-draft

What differs from the CPU recipe (`configs/distill.py`):
  * data: every pair of `data.generated_dir` (`specjax.training.selfgen.load_pairs`, made
    by the self-generated data stage; 100K pairs is the intended scale) plus the
    project's training splits, responses up to 384 tokens (seq_len 512);
  * teacher: the target's 3-layer features are computed inside the train step
    (data.features = "online"): 100K x 512 positions x 3 x 576 float16 features would be
    ~170 GB on disk, one 135M-parameter target pass per batch is cheap on an accelerator;
  * bfloat16 compute with float32 master weights and losses, batch 128 as 2 micro-batches
    of 64 (grad_accum), 2000 steps (256K sequences: ~2.5 epochs of 100K pairs), linear
    warm-up then cosine decay from 5e-4. Sized (an estimate, not a measurement: ~30
    TFLOP per step, mostly the target pass for the features) for well under 10 minutes
    of training on one H100/H200-class GPU; scale num_steps with the time at hand;
  * unroll_steps = 4 (the training-time test over drafts 1..4, for k = 4);
  * checkpoint selection on 64 prompts split off the training sets (eval.select =
    "train"); prompts_eval.jsonl and the held-out split are for the tables only.
"""
import ml_collections

from configs import common, distill


def get_config(arg=None):
  if arg:
    raise ValueError(f"this config takes no argument, not {arg!r}.")
  c = distill.get_config()
  c.draft.feature_layers = (2, 15, 29)
  c.draft.unroll_steps = 4
  c.data.generated_dir = common.cache_dir("selfgen_smollm2")  # configs/generate_data.py
  c.data.generated_max_pairs = 0
  c.data.features = "online"
  c.data.greedy_pool = True
  c.data.max_new_tokens = 384
  c.data.seq_len = 512
  c.data.sample_batch_size = 64
  c.data.trim_multiple = 128
  c.precision = "bfloat16"
  c.batch_size = 128
  c.grad_accum = 2
  c.num_steps = 2000
  c.optim.lr = 5e-4
  c.optim.warmup_steps = 100
  c.optim.schedule = "cosine"
  c.log_every = 20
  c.ckpt_every = 250
  c.eval = ml_collections.ConfigDict(dict(every=500, engine=True, num_prompts=64, max_new_tokens=64,
                                          k=4, temperature=0.0, select="train", select_prompts=64))
  return c
