"""Optional shortcut for side-by-side runs (`run.sh`): builds their shared data once.

    python experiments/distill_smollm2/compare/prep.py --data=/tmp/e3/data [--config.x=...]

Runs the given config's data stage (pools, generated pairs, selection pool and their
features, cached in DATA). For a config reading several target layers (the 3-layer
comparison) it also writes each feature file's last-layer slice under the 1-layer file
name: the same numbers the 1-layer run would compute (one target pass yields every
layer). Both workdirs then link data/ -> DATA. Without it each run computes its own
features (twice the target passes).
"""
import os
import sys
import tempfile

from absl import app, flags
from ml_collections import config_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", os.path.join(ROOT, "configs", "distill_smollm2_compare.py:3"),
                                "The config whose data stage builds the shared data (the 3-layer "
                                "comparison by default).")
flags.DEFINE_string("data", None, "The shared data directory (each workdir's data/ links here).")
flags.mark_flags_as_required(["data"])


def main(argv):
  del argv
  sys.path.insert(0, ROOT)
  import numpy as np
  from specjax.training import draft as draft_lib, pools as pools_lib
  from specjax.training.setup import setup_target
  config = FLAGS.config
  work = tempfile.mkdtemp(prefix="prep_")
  os.makedirs(FLAGS.data, exist_ok=True)
  os.symlink(os.path.abspath(FLAGS.data), os.path.join(work, "data"))
  target, train_prompts, held = setup_target(config)
  log = lambda m: print(m, flush=True)
  pools_lib.prepare_draft(config, work, target, train_prompts, log)
  pools_lib.eval_pool(config, work, target, train_prompts, held, log)
  layers = draft_lib.feature_layers(config.draft, target.cfg.n_layers)
  if layers is None:  # last-layer features: both runs read the files as written
    return
  tag = "_l" + "-".join(map(str, layers))
  d = target.cfg.d_model
  for name in sorted(os.listdir(FLAGS.data)):
    if tag in name and name.endswith(".npz"):
      one = os.path.join(FLAGS.data, name.replace(tag, ""))
      if not os.path.exists(one):
        with np.load(os.path.join(FLAGS.data, name)) as f:
          np.savez(one + ".tmp.npz", features=f["features"][..., -d:])
        os.replace(one + ".tmp.npz", one)
        log(f"{one}: last-layer slice of {name}")


if __name__ == "__main__":
  app.run(main)
