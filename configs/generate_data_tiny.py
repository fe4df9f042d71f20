"""Self-generated data in seconds for tests: pass a tiny model directory with a chat template.

    python scripts/generate_data.py --config=configs/generate_data_tiny.py \
        --config.target=DIR --config.data_dir=/tmp/selfgen_tiny
"""
from configs import generate_data_smollm2


def get_config():
  c = generate_data_smollm2.get_config()
  c.target = ""  # a tiny model directory
  c.data_dir = "/tmp/selfgen_tiny"
  c.num_pairs = 40
  c.shard_size = 24
  c.batch_size = 8
  c.prompt_sets = ""
  c.system_steer = False  # the tiny BPE spends ~100 tokens on a system line; the context is 128
  c.prompt_max_new = 12
  c.response_max_new = 6
  c.filters.require_finished = False  # a random model rarely ends its turn
  c.filters.min_words = 1
  c.filters.min_ascii = 0.0  # a random model writes random bytes
  c.filters.min_english = 0.0
  c.filters.min_distinct_3grams = 0.0
  return c
