"""The second round on fresh self-generated data, with one block or grown to two
(`experiments/distill_smollm2/README.md`, "What else was tried").

    python scripts/distill.py --config=experiments/distill_smollm2/grow/config.py:1 \
        --workdir=/tmp/selfgen2                            # the second round
    python scripts/distill.py --config=experiments/distill_smollm2/grow/config.py \
        --workdir=/tmp/train/grow2                         # the same, two blocks
    CONFIG=experiments/distill_smollm2/grow/config.py ARMS="1 2" W=/tmp/train/grow \\
        bash experiments/distill_smollm2/compare/run.sh    # both arms side by side

The argument is the number of blocks (default 2). `:1` is the second round itself
(`configs/distill.py:selfgen` with the shipped draft as its start, continued on the seed-1
self-generated cache, 600 steps; its asset was not kept, so it is not shipped; its former
`selfgen2/config.py` is in git history at 69a5cc7); `:2` adds a second Llama block after
the shipped draft's, starting as the identity (`specjax.training.draft.warm_start`), so at
step 0 it drafts exactly what the shipped draft does. Same data, batches, schedule and selection split. The first round's
draft agreed with the target about as often on its training batches as on its selection
prompts (0.51 vs 0.47 over its last 200 steps), so either more data or more capacity could
be what holds it; run side by side, the two arms measure capacity at equal steps. A draft
step costs one block more.
"""
from configs import common, distill


def get_config(arg=None):
  arg = arg or "2"
  if arg not in ("1", "2"):
    raise ValueError(f"give 1 or 2 (draft blocks), not {arg!r}.")
  # The second round: the shipped draft on the seed-1 cache.
  c = distill.get_config("selfgen")
  c.draft.init_from = "smollm2-135m-draft"
  c.data.generated_dir = common.cache_dir("selfgen_smollm2_s1")
  c.num_steps = 600
  c.draft.n_layers = int(arg)
  return c
