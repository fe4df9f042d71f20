"""Exceptions shared across specjax."""
from __future__ import annotations


class LoadError(ValueError):
  """A model source could not be loaded.

  Messages name the source and say what to do about it (install a package,
  convert a checkpoint, pick a known registry name, ...).
  """
