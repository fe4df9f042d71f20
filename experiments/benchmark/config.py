"""Side-by-side benchmark on the embedded target (specjax vs transformers).

    python scripts/benchmark.py --config=experiments/benchmark/config.py \
        --workdir=experiments/benchmark/run

Every shipped drafter, k = 4, 64 greedy new tokens, batch 1, on the first prompt of each
category of the held-out split and of the copy-heavy `repeat` set (rewrite, extract,
code edit); transformers with torch's default threads (both cores).
"""
from configs import benchmark


def get_config():
  c = benchmark.get_config()
  c.drafters = "ngram:3,early_exit:6,smollm2-135m-draft,smollm2-135m-draft-lm"
  c.k = 4
  c.max_new_tokens = 64
  c.repeats = 2
  c.prompts.source = "repeat+heldout"
  c.prompts.per_category = 1
  c.hf.torch_threads = 0
  return c
