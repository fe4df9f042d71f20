#!/usr/bin/env bash
# First call of a lease (about a minute): the image's JAX sees the GPU, the carried
# wheels install, and a few tiny-model tests pass on the accelerator.
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
source experiments/gpu/device_setup.sh
python3 -c "import jax, flax, optax, orbax.checkpoint, ml_collections, gguf, specjax; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'optax', optax.__version__)"
timeout 120 python3 -m pytest -q -x -p no:cacheprovider \
  tests/training/test_training.py::test_out_of_time_saves_and_resumes \
  tests/training/test_selfgen.py::test_interrupted_run_resumes_without_loss_or_duplicates \
  tests/decoding/test_tree.py::test_tree_pass_matches_forward_along_each_branch tests/decoding/test_tree.py::test_masked_tree_equals_chain 2>&1 | tail -15
