"""Drafter comparison by prompt category (chat, code, math, rewrite, summarise,
extraction, creative from the held-out set; plus the built-in prompts that repeat
their input: repeat_rewrite, repeat_extract, repeat_code_edit), k = 4, greedy, batch 1,
speed per category.

    python scripts/acceptance_curves.py --config=experiments/drafter_by_category/config.py \
        --workdir=experiments/drafter_by_category/run
"""
from configs import curves


def get_config():
  c = curves.get_config()
  c.drafters = "ngram:3,early_exit:6,smollm2-135m-draft-lm"
  c.ks = "4"
  c.temperatures = "0.0"
  c.max_new_tokens = 48
  c.prompts.source = "heldout+repeat"
  c.prompts.per_category = 1  # 7 held-out + 3 repeat-the-input prompts
  c.batch_size = 1  # batch 1, as in the benchmark: per-prompt latency speedups
  c.batch_by_category = True  # each call holds one category: per-category speedup
  return c
