"""Acceptance curves: per-position acceptance, alpha, tokens per pass vs the closed form,
and measured speedup, swept over drafters, temperatures and k.

    python scripts/acceptance_curves.py --config=configs/curves.py --workdir=DIR
    python scripts/acceptance_curves.py --config=configs/curves.py --workdir=DIR --config.ks=1,2,4,8
    python scripts/acceptance_curves.py --config=configs/curves.py --workdir=DIR \
        --config.prompts.source=path/to/question.jsonl --config.prompts.per_category=0
    python scripts/acceptance_curves.py --config=configs/curves.py --workdir=DIR \
        --config.ks=2,4 --config.trees='static:4,2,1,1;dynamic:16'   # chain vs token trees

Prompts (config.prompts.source): a source of specjax/prompts.py (eval, heldout,
repeat, builtin; "+"-joined) or a prompts .jsonl path: Spec-Bench's question.jsonl
({question_id, category, turns}; the first turn) or the project's format; summary.md
and acceptance_by_category.png break alpha down by its categories.

Writes to DIR: config.json, prompts.json, curves.jsonl (one JSON record per setting),
tb/ (TensorBoard), tokens_per_pass_vs_k.png, per_position_acceptance.png,
speedup_vs_k.png, acceptance_by_category.png and summary.md (printed too); with
config.trees also a tree column, nodes per round, accepted path lengths and per-depth
acceptance in the records and tables, and tokens_per_pass_vs_nodes.png.
"""
import json
import os
import sys

from absl import app, flags, logging

from config_cli import define_config

_CONFIG = define_config("configs/curves.py", "Sweep config.")
from specjax import prompts as prompts_lib
from specjax.apps import common, curves  # noqa: E402  (after the config check: a bad flag fails fast)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.", required=True)
_PROGRESS = flags.DEFINE_bool("progress", True, "Show a progress bar.")


def main(argv):
  del argv
  config, workdir = _CONFIG.value, _WORKDIR.value
  try:  # a bad prompts source, file or category: one line, before any model loads
    prompts_lib.check_config(config.prompts)
  except ValueError as e:
    sys.exit(f"error: config.prompts: {e}")
  try:  # a bad tree list: one line, before any model loads
    common.parse_trees(config.get("trees", ""),
                       [int(x) for x in prompts_lib.parse_list(config.ks)])
  except ValueError as e:
    sys.exit(f"error: config.trees: {e}")
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config.to_json_best_effort(indent=2, sort_keys=True))
  records = curves.sweep(config, workdir, progress=_PROGRESS.value)
  for path in curves.plot(records, workdir):
    logging.info("Wrote %s", path)
  summary = curves.summary_markdown(records)
  with open(os.path.join(workdir, "summary.md"), "w") as f:
    f.write(summary + "\n")
  with open(os.path.join(workdir, "fields.json"), "w") as f:
    json.dump(curves.fields(config), f, indent=2)
  print(summary)


if __name__ == "__main__":
  app.run(main)
