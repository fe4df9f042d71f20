"""Closed-form check: empirical tokens per target pass vs (1 - alpha^(k+1)) / (1 - alpha),
across k and drafters, on the embedded target (greedy and temperature 1).

    python scripts/acceptance_curves.py --config=experiments/closed_form/config.py \
        --workdir=experiments/closed_form/run
"""
from configs import curves


def get_config():
  c = curves.get_config()
  c.drafters = "ngram:3,smollm2-135m-draft-lm"
  c.ks = "1,2,4,6"
  c.temperatures = "0.0,1.0"
  c.max_new_tokens = 48
  c.prompts.source = "heldout"
  c.prompts.per_category = 1  # 7 held-out prompts, one per category, decoded as one batch
  c.batch_size = 0
  c.batch_by_category = False
  return c
