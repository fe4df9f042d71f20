"""Acceptance curves on the embedded target: drafters x temperatures x k.

    python scripts/acceptance_curves.py --config=configs/curves.py --workdir=/tmp/curves
    python scripts/acceptance_curves.py --config=configs/curves.py --workdir=/tmp/curves \
        --config.drafters=ngram:3 --config.ks=1,2,3,4,6,8 --config.temperatures=0
    python scripts/acceptance_curves.py --config=configs/curves.py --workdir=/tmp/curves_trees \
        --config.ks=2,4 --config.temperatures=0 --config.trees='static:4,2,1,1;dynamic:16'
    python scripts/acceptance_curves.py --config=configs/curves.py:tiny --config.target=DIR \
        --workdir=/tmp/curves_tiny   # seconds long, for tests: a tiny model directory

Prompts: the distillation set's held-out split (specjax/data/prompts_heldout.jsonl),
`per_category` per category. Drafters that are not available (the shipped default
draft before it is registered) are skipped with a note in prompts.json.

trees: token trees measured beside each drafter's chain, separated by ";" (quote the
flag in a shell; "," and ":" belong to a tree's spec): "static:B1,..,Bk" (a branching
factor per depth) runs at k = its number of factors, which must be one of `ks`;
"dynamic:N[:beam]" (EAGLE-2) at every k of `ks` with enough candidates for N nodes.
"" (default): chains only, and the outputs have no tree column. A (drafter, tree) that
cannot run (lookahead drafts no trees, n-gram lookup no dynamic ones) is left out with
a note in prompts.json; the drafter's chain rows stay.
"""
import ml_collections

from configs import common


def default():
  c = ml_collections.ConfigDict()
  c.target = "smollm2-135m"
  c.drafters = "ngram:3,early_exit:6,smollm2-135m-draft,smollm2-135m-draft-lm"  # as in configs/benchmark.py
  c.allow_hub = False
  c.ks = "1,2,4,6"  # comma-separated
  c.trees = ""  # ";"-separated token trees, e.g. "static:4,2,1,1;dynamic:16" (see above)
  c.temperatures = "0.0,1.0"  # comma-separated; 0 = greedy
  c.top_k = 0
  c.top_p = 1.0
  c.seed = 0
  c.max_new_tokens = 48
  c.prompts = ml_collections.ConfigDict(dict(
      source="heldout", per_category=1, categories="", ids="", chat=True))
  c.batch_size = 0  # rows per generate call (0: as many as possible)
  c.batch_by_category = False  # one category per call: per-category speed (more compiles)
  c.repeats = 1  # timed runs per batch; the fastest counts
  return c


def tiny():
  """A seconds-long sweep for tests: pass a tiny model directory as the target."""
  c = default()
  c.drafters = "ngram:2,early_exit:1"
  c.ks = "1,3"
  c.temperatures = "0.0,1.0"
  c.max_new_tokens = 8
  c.prompts.source = "builtin"
  c.prompts.categories = "chat,repeat_rewrite"
  return c


def get_config(arg=None):
  return common.variant("curves", arg, {"default": default, "tiny": tiny}, "default")
