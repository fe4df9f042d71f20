"""Self-generated training data from the embedded SmolLM2-135M-Instruct target.

    nice -n 10 python scripts/generate_data.py --config=configs/generate_data.py \
        --config.num_pairs=5000 --stats_out=/tmp/selfgen_stats.json
    python scripts/generate_data.py --config=configs/generate_data.py:tiny \
        --config.target=DIR --config.data_dir=/tmp/selfgen_tiny   # seconds, for tests

Magpie-style prompts over the 12 categories of the evaluation set, filtered and
balanced, then on-policy responses (`specjax/training/selfgen.py`), written to
`data_dir` (default: selfgen_smollm2 under the cache root, where
`configs/distill.py:selfgen` reads it). Resumable: rerun the same command to continue; `--config.max_shards=N` bounds one call. On an
accelerator the same command scales with `--config.shard_size=1024 --config.batch_size=256`
(neither is part of the cache's identity, so a CPU cache continues there) and
`--config.num_pairs=100000`.
"""
import ml_collections

from configs import common


def smollm2():
  c = ml_collections.ConfigDict()
  c.target = "smollm2-135m"
  c.data_dir = common.cache_dir("selfgen_smollm2")  # --config.data_dir= to put it elsewhere
  c.seed = 0
  c.num_pairs = 5000  # stop once the cache holds this many pairs
  c.max_shards = 0  # shards written per call (0: no limit), for bounded chunks
  c.shard_size = 192  # prompt candidates (or fixed prompts) per shard; not hashed. 192 fills
  # the response batches better than 96 (experiments/selfgen/README.md, shards 11-12)
  c.batch_size = 32  # rows per generate call (at most shard_size); not hashed
  c.prompt_sets = ""  # fixed prompt sets answered first, e.g. "train,train_extra" (never "eval")
  c.system_steer = True  # a category system line before the user turn
  c.prompt_temperature = 1.0
  c.prompt_top_p = 0.95
  c.prompt_max_new = 96
  c.response_temperature = 1.0  # 0: greedy responses; 1: on-policy samples
  c.response_top_p = 1.0
  c.response_max_new = 64  # the evaluation's horizon; raise it on an accelerator
  c.filters = ml_collections.ConfigDict(dict(
      require_finished=True,  # drop user turns that did not end within prompt_max_new tokens
      min_words=4, max_words=220,  # prompt length in words
      min_ascii=0.97,  # fraction of ASCII characters
      min_english=0.12,  # fraction of words that are common English function words
      min_distinct_3grams=0.6,  # distinct / all word 3-grams (degenerate loops fail)
      ngram=8, max_overlap=0.5,  # near duplicate: > max_overlap of its 8-grams seen before
      exclude_eval=True))  # drop prompts sharing any 8-gram with prompts_eval.jsonl
  return c


def tiny():
  """Self-generated data in seconds for tests: pass a tiny model directory with a chat
  template as --config.target."""
  c = smollm2()
  c.target = ""  # a tiny model directory
  c.data_dir = common.cache_dir("selfgen_tiny")
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


def get_config(arg=None):
  return common.variant("generate_data", arg, {"smollm2": smollm2, "tiny": tiny}, "smollm2")
