"""A seconds-long sweep for tests: pass a tiny model directory as the target.

    python scripts/acceptance_curves.py --config=configs/curves_tiny.py --config.target=DIR \
        --workdir=/tmp/curves_tiny
"""
from configs import curves


def get_config():
  c = curves.get_config()
  c.drafters = "ngram:2,early_exit:1"
  c.ks = "1,3"
  c.temperatures = "0.0,1.0"
  c.max_new_tokens = 8
  c.prompts.source = "builtin"
  c.prompts.categories = "chat,repeat_rewrite"
  return c
