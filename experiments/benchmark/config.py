"""Side-by-side benchmark on the embedded target (specjax vs transformers).

    python scripts/benchmark.py --config=experiments/benchmark/config.py \
        --workdir=experiments/benchmark/run
"""
from configs import benchmark


def get_config():
  c = benchmark.get_config()
  c.drafters = "ngram:3,early_exit:6,smollm2-135m-draft-lm"
  c.k = 4
  c.max_new_tokens = 64
  c.repeats = 2
  c.prompts.source = "repeat+heldout"
  c.prompts.per_category = 0
  # three prompts that repeat their input (rewrite, extract, edit code), one chat and one
  # code question from the held-out set
  c.prompts.ids = "repeat-rewrite-0,repeat-extract-0,repeat-code-0,chat-002,code-008"
  return c
