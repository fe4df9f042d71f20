"""Prompt lookup in front of the feature draft ('<draft>+ngram:3', `LookupFirstDrafter`)
beside the feature draft and n-gram lookup alone, by category with the closed form (see
compare.py): two prompts per category of the evaluation set, greedy, batch 1, 48 new tokens.

    python experiments/drafter_by_category/compare.py \
        --config=experiments/drafter_by_category/compare_lookup_config.py \
        --out=experiments/drafter_by_category/compare_lookup
"""
import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "compare_config", os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare_config.py"))
_base_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base_module)

SETTINGS = ";".join([
    "target=none",
    "feature draft k2=smollm2-135m-draft|2",
    "feature+lookup k2=smollm2-135m-draft+ngram:3|2",
    "feature+lookup k4=smollm2-135m-draft+ngram:3|4",
    "ngram=ngram:3|4",
])


def get_config():
  c = _base_module.get_config()
  c.settings = SETTINGS
  return c
