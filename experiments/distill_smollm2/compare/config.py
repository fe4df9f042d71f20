"""1-layer vs 3-layer (EAGLE-3 style) features for the SmolLM2-135M feature draft, at
equal training compute, sized for this 2-core CPU (`experiments/distill_smollm2/`).

    python scripts/distill.py --config=experiments/distill_smollm2/compare/config.py:1 \
        --workdir=/tmp/e3/l1
    python scripts/distill.py --config=experiments/distill_smollm2/compare/config.py:3 \
        --workdir=/tmp/e3/l3

The argument is the number of target layers the draft reads: 1 (the last, f_29, as the
shipped draft) or 3 (layers 2, 15 and 29, concatenated and projected by fc_layers).
Everything else is the same: the shipped draft's recipe (`configs/distill.py`:
one block, 4096-token head, forward KL + smooth-L1 on features, unroll_steps = 3), sized
down for a CPU shared by several jobs: one temperature-1 target continuation per prompt
of the training split (no greedy pool, no extra split) plus up to 600 self-generated
pairs of `data.generated_dir` (configs/generate_data.py's cache; those that exist when
the data is first built, frozen into the workdir), with checkpoint selection on 16 prompts split off the training sets (eval.select = "train"),
so neither the held-out split nor prompts_eval.jsonl shapes the draft or its selection.
Rerun the same command to resume; `--stop_at=N` ends a chunk at step N.
"""
import ml_collections

from configs import common, distill

LAYERS = {"1": (-1,), "3": (2, 15, 29)}


def get_config(arg=None):
  arg = arg or "1"
  if arg not in LAYERS:
    raise ValueError(f"give 1 or 3 (target layers read), not {arg!r}.")
  c = distill.get_config()
  c.draft.feature_layers = LAYERS[arg]
  c.prompts.train_sets = ("train",)
  c.data.greedy_pool = False
  c.data.generated_dir = common.cache_dir("selfgen_smollm2")
  c.data.generated_max_pairs = 600
  c.eval = ml_collections.ConfigDict(dict(every=100, engine=True, num_prompts=16, max_new_tokens=48,
                                          k=4, temperature=0.0, select="train", select_prompts=16))
  c.num_steps = 600
  return c
