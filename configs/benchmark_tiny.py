"""A seconds-long benchmark for tests: pass a tiny model directory as the target.

    python scripts/benchmark.py --config=configs/benchmark_tiny.py --config.target=DIR \
        --config.drafters=ngram:2,early_exit:1,DRAFT_DIR --workdir=/tmp/bench_tiny
"""
from configs import benchmark


def get_config():
  c = benchmark.get_config()
  c.drafters = "ngram:2,early_exit:1"
  c.max_new_tokens = 8
  c.repeats = 1
  c.prompts.source = "builtin"
  c.prompts.per_category = 1
  c.prompts.categories = "chat,repeat_rewrite"
  c.costs.n = 1
  c.costs.repeats = 1
  return c
