"""The `--config` flag of every script: one clear line for a bad override, fields in --help.

    from config_cli import define_config   # scripts/ is on sys.path when a script runs
    _CONFIG = define_config("configs/speculate.py", "Card config.")

`define_config` wraps ml_collections' `DEFINE_config_file(lock_config=True)`. Before
ml_collections parses the command line (it does so while the flag is defined, and
would answer `--config.kk=6` with a 50-line traceback), it loads the chosen config file
itself and checks every `--config.FIELD=VALUE` against it: an unknown field, or a
config file that does not exist, exits with ONE line naming it and the valid fields.
The flag's help text (`--help`) lists the config's fields with their defaults.
"""
from __future__ import annotations

import difflib
import importlib.util
import os
import re
import sys
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # config files import `configs.*`
  sys.path.insert(0, ROOT)


def _fail(message: str) -> None:
  sys.stderr.write(f"error: {message}\n")
  sys.exit(2)


def _split_spec(spec: str) -> tuple[str, Optional[str]]:
  """"path" or "path:arg" (ml_collections' get_config(arg) form) -> (path, arg)."""
  if not os.path.isfile(spec) and ":" in spec:
    path, arg = spec.rsplit(":", 1)
    if os.path.isfile(path):
      return path, arg
  return spec, None


def load_config(spec: str):
  """The ConfigDict of a config file (`get_config()` or `get_config(arg)`)."""
  path, arg = _split_spec(spec)
  if not os.path.isfile(path):
    _fail(f"--config={spec}: no such config file; the configs are in "
          f"{os.path.relpath(os.path.join(ROOT, 'configs'))}/.")
  module_spec = importlib.util.spec_from_file_location("_config_cli_probe", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  try:
    return module.get_config(arg) if arg is not None else module.get_config()
  except ValueError as e:  # the config's own check of its argument, e.g. "give 1 or 3"
    _fail(f"--config={spec}: {e}")


def fields(config, prefix: str = "") -> dict:
  """{"a.b": value} for every leaf field of a ConfigDict (nested dicts flattened)."""
  out = {}
  for key, value in config.items():
    name = prefix + key
    if hasattr(value, "items") and not isinstance(value, (str, bytes)):
      out.update(fields(value, name + "."))
    else:
      out[name] = value
  return out


def _short(value, width: int = 40) -> str:
  text = repr(value)
  return text if len(text) <= width else text[:width - 3] + "..."


def fields_help(config, source: str) -> str:
  """"fields of SOURCE (override with --config.FIELD=VALUE): a=1, b.c='x', ..."."""
  listing = ", ".join(f"{k}={_short(v)}" for k, v in fields(config).items())
  return f"Fields of {source} (override any with --config.FIELD=VALUE): {listing}."


def _overrides(argv, name: str) -> list[str]:
  pattern = re.compile(r"^--?(no)?{}\.([^=]+)".format(re.escape(name)))
  return [m.group(2) for m in map(pattern.match, argv) if m]


def _config_spec(argv, name: str) -> Optional[str]:
  for i, arg in enumerate(argv):
    if arg == f"--{name}" and i + 1 < len(argv):
      return argv[i + 1]
    if arg.startswith(f"--{name}="):
      return arg.split("=", 1)[1]
  return None


def check_overrides(config, overrides, spec: str, name: str = "config") -> None:
  """Exits with one line when an override names a field the config does not have."""
  flat = fields(config)
  prefixes = {k.rsplit(".", i)[0] for k in flat for i in range(1, k.count(".") + 1)}
  for field in overrides:
    if field in flat or field in prefixes:
      continue
    parent = field.rsplit(".", 1)[0] if "." in field else ""
    valid = [k for k in config.keys()] if not parent else [
        k[len(parent) + 1:] for k in flat if k.startswith(parent + ".")] or list(config.keys())
    close = difflib.get_close_matches(field, list(flat), n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    where = f"{parent!r} in {spec}" if parent and parent in prefixes else spec
    _fail(f"--{name}.{field}: {where} has no field {field.rsplit('.', 1)[-1]!r}{guess}; "
          f"valid fields: {', '.join(valid)}.")


def define_config(default: Optional[str], help_text: str, name: str = "config",
                  example: Optional[str] = None, argv=None):
  """`config_flags.DEFINE_config_file(name, default, ..., lock_config=True)` with the
  checks and help described in the module docstring. `default` and `example` are paths
  relative to the repository root; `example` names the config whose fields --help lists
  when there is no default."""
  from ml_collections import config_flags
  argv = sys.argv if argv is None else argv
  default_path = os.path.join(ROOT, default) if default else None
  spec = _config_spec(argv, name) or default_path
  if spec is not None:
    shown = os.path.relpath(spec) if spec == default_path else spec
    check_overrides(load_config(spec), _overrides(argv, name), shown, name)
  listed = default or example
  if listed:
    help_text = f"{help_text} {fields_help(load_config(os.path.join(ROOT, listed)), listed)}"
  holder = config_flags.DEFINE_config_file(name, default_path, help_text, lock_config=True)
  # absl files a flag under the module that defined it; --help lists the main module's.
  caller = sys._getframe(1).f_globals.get("__name__")
  from absl import flags
  flags.FLAGS.register_flag_by_module(sys.argv[0] if caller == "__main__" else caller,
                                      flags.FLAGS[name])
  return holder
