"""Moved to `specjax.parallel`; this re-export goes once decoding imports that directly
(`parallel.on_mesh(..., axes=PARAM_AXES)`, `parallel.mesh_context`, `parallel.to_host`)."""
import functools

from specjax import parallel
from specjax.models.params import PARAM_AXES
from specjax.parallel import *  # noqa: F401,F403

on_mesh = functools.partial(parallel.on_mesh, axes=PARAM_AXES)
