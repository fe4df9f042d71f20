"""Drafter comparison by prompt category (chat, code, math, rewrite, summarise,
extraction, creative from the held-out set; plus the built-in prompts that repeat
their input: rewrite, extraction, code_edit), k = 4, greedy, speed per category.

    python scripts/acceptance_curves.py --config=experiments/drafter_by_category/config.py \
        --workdir=experiments/drafter_by_category/run
"""
from configs import curves


def get_config():
  c = curves.get_config()
  c.drafters = "ngram:3,early_exit:6,smollm2-135m-draft"
  c.ks = "4"
  c.temperatures = "0.0"
  c.max_new_tokens = 48
  c.prompts.source = "heldout+repeat"
  c.prompts.per_category = 2
  c.batch_size = 0
  c.batch_by_category = True  # each category decoded in its own call: per-category speedup
  return c
