"""Moved to `specjax.parallel`; this re-export goes once training imports that directly
(`parallel.make_mesh`, `check_mesh`, `place_state(tree, mesh, PARAM_AXES)`, `shard_batch`)."""
import functools

from specjax import parallel
from specjax.models.params import PARAM_AXES
from specjax.parallel import *  # noqa: F401,F403

place = functools.partial(parallel.place_state, axes=PARAM_AXES)
