"""A second round on fresh self-generated data: the shipped feature draft continued on
pairs the target wrote with another seed (`experiments/distill_smollm2/README.md`,
"A second round on fresh data").

    python scripts/generate_data.py --config=configs/generate_data_smollm2.py --config.seed=1 \
        --config.data_dir=/work/data/selfgen_smollm2_s1 --config.num_pairs=5000
    python scripts/distill.py --config=configs/distill_smollm2_selfgen2.py --workdir=/work/train/selfgen2

Everything but the starting point and the data is `configs/distill_smollm2_selfgen.py`:
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
import importlib.util
import os


def _selfgen():
  """configs/distill_smollm2_selfgen.py, loaded by path."""
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distill_smollm2_selfgen.py")
  spec = importlib.util.spec_from_file_location("distill_smollm2_selfgen", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod.get_config()


def get_config():
  c = _selfgen()
  c.draft.init_from = "smollm2-135m-draft"
  c.data.generated_dir = "/work/data/selfgen_smollm2_s1"
  c.num_steps = 600
  return c
