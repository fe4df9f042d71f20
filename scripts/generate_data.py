"""Generates training data from the target itself (Magpie-style prompts, on-policy responses).

    nice -n 10 python scripts/generate_data.py --config=configs/generate_data.py \
        --stats_out=/tmp/selfgen_stats.json
    python scripts/generate_data.py --config=configs/generate_data.py:tiny --config.target=DIR

Resumable: rerun the same command after an interruption; `--config.max_shards=N` bounds
one call. Writes shards, manifest.json and log.jsonl into config.data_dir, and the
cache's `pair_stats` to data_dir/stats.json (and --stats_out). `--stats_only` writes the
stats of the cache as it stands (while a run is going, say) without generating.
"""
import json
import os
import sys

from absl import app, flags, logging

from config_cli import define_config

_CONFIG = define_config(None, "Generation config (configs/generate_data.py[:tiny]).",
                        example="configs/generate_data.py")
_STATS_OUT = flags.DEFINE_string("stats_out", None, "Also write the cache's stats JSON here.")
_STATS_ONLY = flags.DEFINE_bool("stats_only", False, "Only write the stats of the cache.")
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  from specjax.training import selfgen
  config = _CONFIG.value
  if not config.target:
    raise app.UsageError("Pass --config.target=SOURCE (a load_model source with a chat template).")
  try:
    if _STATS_ONLY.value:
      stats = selfgen.pair_stats(config.data_dir, config)
    else:
      stats = selfgen.generate(config, log=lambda line: print(line, flush=True))
  except ValueError as e:
    sys.exit(f"error: {e}")
  text = json.dumps(stats, indent=1)
  paths = [os.path.join(config.data_dir, "stats.json")] + ([_STATS_OUT.value] if _STATS_OUT.value else [])
  for path in paths:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
      f.write(text + "\n")
  print(text)


if __name__ == "__main__":
  app.run(main)
