"""Side-by-side benchmark on the embedded target: specjax vs transformers, alone vs speculative.

    python scripts/benchmark.py
    python scripts/benchmark.py --config.prompts.source=repeat --config.repeats=5 --workdir=/tmp/bench
    python scripts/benchmark.py --config.hf.enabled=False   # specjax rows only (no torch)
    python scripts/benchmark.py --config.hf.enabled=False --workdir=/tmp/bench_trees \
        --config.trees='static:4,2,1,1;dynamic:16'   # + a row per drafter and tree
    python scripts/benchmark.py --config=configs/benchmark.py:tiny --config.target=DIR \
        --config.drafters=ngram:2,early_exit:1,DRAFT_DIR --workdir=/tmp/bench_tiny

Variants: (default) the embedded target; `tiny`: seconds long, for tests (pass a tiny
model directory as the target).

Rows: specjax target alone, specjax with each drafter in `drafters`, transformers greedy
generate, prompt lookup and assisted generation (with the draft's Hugging Face export).
Rows whose draft or export is missing are skipped with a note.

trees: token trees measured beside each drafter's chain, separated by ";" (quote the
flag in a shell; "," and ":" belong to a tree's spec), each of depth k: "static:B1,..,Bk"
(a branching factor per depth, k of them) or "dynamic:N[:beam]" (EAGLE-2). Each drafter
that drafts trees gets a row "<drafter> [<tree>]"; the rows then carry tree,
nodes_per_round, path_lengths, mean_accepted_path and per-depth acceptance, and the
table a tree column. "" (default): chains only, outputs as without trees. A (drafter,
tree) that cannot run (lookahead drafts no trees, n-gram lookup no dynamic ones) is
skipped with a note.
"""
import ml_collections

from configs import common


def default():
  c = ml_collections.ConfigDict()
  c.target = "smollm2-135m"
  # Comma-separated: "ngram:N", "early_exit:N", model sources (registry name, directory) or
  # "asset:DIR" (a draft asset directory with its reduced output head, as shipped).
  c.drafters = "ngram:3,early_exit:6,smollm2-135m-draft,smollm2-135m-draft-lm"
  c.allow_hub = False  # look unregistered draft names up on the Hugging Face hub
  c.k = 4
  c.trees = ""  # ";"-separated token trees of depth k, e.g. "static:4,2,1,1;dynamic:16"
  c.max_new_tokens = 64
  c.repeats = 3  # interleaved repetitions; the fastest run of each (row, prompt) counts
  c.prompts = ml_collections.ConfigDict(dict(
      source="repeat+heldout",  # "+"-joined: repeat, heldout, builtin (specjax/prompts.py)
      per_category=1,  # first N prompts of each category of each source (0: all)
      ids="",  # comma-separated prompt ids to keep ("" = all)
      categories="",  # comma-separated filter, e.g. "chat,repeat_code_edit" ("" = all)
      chat=True))
  c.hf = ml_collections.ConfigDict(dict(
      enabled=True,  # transformers rows (torch, imported by scripts/peers.py only)
      max_matching_ngram_size=3,  # prompt lookup: like specjax's ngram:3
      assistant="",  # HF directory of the draft ("" = the export of a model drafter, if any)
      # torch intra-op threads (0: torch's default). On the shared 2-core CPU torch's two
      # OpenMP threads ran a SmolLM2 decode step 5x slower than one thread (0.26 s vs
      # 0.05 s), while XLA's step time did not depend on its thread setting.
      torch_threads=1))
  c.costs = ml_collections.ConfigDict(dict(enabled=True, n=5, repeats=3))  # per-pass timings
  return c


def tiny():
  """A seconds-long benchmark for tests: pass a tiny model directory as the target."""
  c = default()
  c.drafters = "ngram:2,early_exit:1"
  c.max_new_tokens = 8
  c.repeats = 1
  c.prompts.source = "builtin"
  c.prompts.per_category = 1
  c.prompts.categories = "chat,repeat_rewrite"
  c.costs.n = 1
  c.costs.repeats = 1
  return c


def get_config(arg=None):
  return common.variant("benchmark", arg, {"default": default, "tiny": tiny}, "default")
