"""Side-by-side benchmark: specjax and transformers, target alone and with each drafter.

    python scripts/benchmark.py [--config=configs/benchmark.py] [--workdir=DIR] [--json_out=PATH]
    python scripts/benchmark.py --config.prompts.source=repeat --config.repeats=5
    python scripts/benchmark.py --config.prompts.source=eval --config.prompts.per_category=2
    python scripts/benchmark.py --config.prompts.source=path/to/question.jsonl  # Spec-Bench
    python scripts/benchmark.py --config.trees='static:4,2,1,1;dynamic:16'  # chain vs trees
    python scripts/benchmark.py --batch=1,8,32 --mixed=8 --config.max_new_tokens=48  # batches

Prompts (config.prompts.source): a source of specjax/prompts.py (eval, heldout,
repeat, builtin; "+"-joined) or a prompts .jsonl path: Spec-Bench's question.jsonl
({question_id, category, turns}; the first turn) or the project's format; the table has
one speedup column per category.

Prints a table (tokens/s, speedup over the same framework's target alone, ratio to
transformers greedy, alpha, tokens per pass beside the closed form, ideal speedup from
measured per-pass costs, fraction of it reached) and writes the full results as JSON
(--json_out, and results.json + config.json in --workdir).

--batch (and --mixed): the batched sweep instead (`specjax.apps.batch_sweep`): per batch
size, specjax alone vs transformers' batched generate (left-padded) vs the same decode step
in a bare fori_loop, plus a mixed-length batch of --mixed rows; one table of ratios.
"""
import json
import os
import sys

from absl import app, flags, logging

from config_cli import define_config

_CONFIG = define_config("configs/benchmark.py", "Benchmark config.")
from specjax import prompts as prompts_lib  # noqa: E402
from specjax.apps import common, sidebyside  # noqa: E402  (after the config check: a bad flag fails fast)
_WORKDIR = flags.DEFINE_string("workdir", None, "Write config.json and results.json here.")
_JSON_OUT = flags.DEFINE_string("json_out", None, "Write the results as JSON here.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show a progress bar.")
_BATCH = flags.DEFINE_list("batch", [], "Batch sizes of the batched sweep (e.g. 1,8,32); "
                           "empty: the per-prompt benchmark.")
_MIXED = flags.DEFINE_integer("mixed", 0, "With --batch: rows of a mixed-length batch "
                              "(half prompts of 500-1,500 tokens); 0: none.")


def main(argv):
  del argv
  config = _CONFIG.value
  try:  # a bad prompts source, file or category: one line, before any model loads
    prompts_lib.check_config(config.prompts)
  except ValueError as e:
    sys.exit(f"error: config.prompts: {e}")
  try:  # a bad tree list: one line, before any model loads
    common.parse_trees(config.get("trees", ""), [int(config.k)])
  except ValueError as e:
    sys.exit(f"error: config.trees: {e}")
  if _WORKDIR.value:
    os.makedirs(_WORKDIR.value, exist_ok=True)
    with open(os.path.join(_WORKDIR.value, "config.json"), "w") as f:
      f.write(config.to_json_best_effort(indent=2, sort_keys=True))
  import peers  # scripts/peers.py: the transformers rows (torch stays out of specjax)
  if _BATCH.value or _MIXED.value:
    from specjax.apps import batch_sweep
    result = batch_sweep.run_sweep(config, [int(b) for b in _BATCH.value], _MIXED.value,
                                   peers=peers if config.hf.enabled else None)
    table = batch_sweep.format_sweep(result)
  else:
    result = sidebyside.run_benchmark(config, progress=_PROGRESS.value,
                                      peers=peers if config.hf.enabled else None)
    table = sidebyside.format_table(result)
  print(table)
  paths = [_JSON_OUT.value] if _JSON_OUT.value else []
  if _WORKDIR.value:
    paths.append(os.path.join(_WORKDIR.value, "results.json"))
    with open(os.path.join(_WORKDIR.value, "table.txt"), "w") as f:
      f.write(table + "\n")
  for path in paths:
    with open(path, "w") as f:
      json.dump(result, f, indent=2)
    logging.info("Wrote %s", path)


if __name__ == "__main__":
  app.run(main)
