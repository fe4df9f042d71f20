"""A second round on fresh self-generated data: the shipped feature draft continued on
pairs the target wrote with another seed (`experiments/distill_smollm2/README.md`,
"A second round on fresh data").

    python scripts/generate_data.py --config=configs/generate_data.py --config.seed=1 \
        --config.data_dir=$HOME/.cache/specjax/selfgen_smollm2_s1 --config.num_pairs=5000
    python scripts/distill.py --config=experiments/distill_smollm2/selfgen2/config.py \
        --workdir=/tmp/train/selfgen2

Everything but the starting point and the data is `configs/distill.py:selfgen`:
the first round's draft (the shipped `smollm2-135m-draft` since 2026-12-01) trained on
every pair of a cache generated with seed 1, whose prompts the draft has never seen, plus
one temperature-1 continuation of each training-split prompt. Its result is measured in
the README (`selfgen2/eval_selfgen2_k4.json`); its asset did not survive the machine it
was trained on, so it is not shipped. To ship a rerun, first keep the first round under
its own name (a copy of the asset and a registry entry) and point `init_from` at it.
Checkpoints are selected on that cache's own selection split; `prompts_eval.jsonl` is
used by neither. The first round showed the draft underfitting (its training batches
agree with the target about as often as its selection prompts), so this round buys more
steps on new prompts rather than a larger draft.
"""
from configs import common, distill


def get_config(arg=None):
  if arg:
    raise ValueError(f"this config takes no argument, not {arg!r}.")
  c = distill.get_config("selfgen")
  c.draft.init_from = "smollm2-135m-draft"
  c.data.generated_dir = common.cache_dir("selfgen_smollm2_s1")
  c.num_steps = 600
  return c
