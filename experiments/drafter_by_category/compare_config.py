"""Every drafter per prompt category (see compare.py): two prompts per category of the
evaluation set (`specjax/data/prompts_eval.jsonl`, written by hand, never used by the
trainer), greedy, batch 1, 48 new tokens; chain and tree where the drafter builds trees.

    nice -n 10 python experiments/drafter_by_category/compare.py \
        --config=experiments/drafter_by_category/compare_config.py \
        --out=experiments/drafter_by_category/compare

A preset after the path picks other settings on the same prompts (ml_collections passes it
to get_config), e.g. `--config=experiments/drafter_by_category/compare_config.py:chains`:
"chains" (every stepping drafter's chain, for the closed form) or "lookup" (prompt lookup
in front of the feature draft, '<draft>+ngram:3', beside the draft and the lookup alone;
out compare_rounds_4 with --config.per_category=4).
"""
import ml_collections

SETTINGS = ";".join([
    "target=none",
    "lm draft=smollm2-135m-draft-lm|4",
    "lm draft tree=smollm2-135m-draft-lm|3|static:2,2,1",
    "feature draft=smollm2-135m-draft|4",
    "feature draft tree=smollm2-135m-draft|3|static:2,2,1",
    "medusa=medusa:{medusa}|4",
    "medusa tree=medusa:{medusa}|3|static:3,2,1",
    "early exit=early_exit:6|3",
    "early exit tree=early_exit:6|3|static:2,2,1",
    "ngram=ngram:3|4",
    "ngram tree=ngram:3|4|static:2,1,1,1",
    "lookahead=lookahead:4,4,4",
])

PRESETS = {
    "chains": ";".join([
        "target=none",
        "feature draft k2=smollm2-135m-draft|2",
        "feature draft k4=smollm2-135m-draft|4",
        "lm draft=smollm2-135m-draft-lm|4",
        "early exit=early_exit:6|3",
        "ngram=ngram:3|4",
    ]),
    "lookup": ";".join([
        "target=none",
        "feature draft k2=smollm2-135m-draft|2",
        "feature+lookup k2=smollm2-135m-draft+ngram:3|2",
        "feature+lookup k4=smollm2-135m-draft+ngram:3|4",
        "ngram=ngram:3|4",
    ]),
}


def get_config(preset: str = ""):
  if preset and preset not in PRESETS:
    raise ValueError(f"Unknown compare preset {preset!r}: give one of {', '.join(PRESETS)} "
                     "after the config path, or none for every drafter.")
  c = ml_collections.ConfigDict()
  c.target = "smollm2-135m"
  c.settings = PRESETS[preset] if preset else SETTINGS  # "label=draft|k|tree;..."; {medusa}: c.medusa
  c.medusa = "smollm2-135m-medusa"  # Medusa heads: a registry name or an asset directory
  c.prompts_source = "eval"
  c.categories = ""  # comma-separated; empty: all
  c.per_category = 2
  c.max_prompt_len = 128  # prompts from one length bucket (65..128 tokens) where possible
  c.max_new_tokens = 48
  return c
