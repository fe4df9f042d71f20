"""Speculative decoding card: one prompt, target vs target+draft, measured side by side.

    python scripts/speculate.py [--config=configs/speculate.py] [--config.k=6] [--json_out=card.json]
    python scripts/speculate.py --config.mesh=1,8 --config.dtype=bfloat16 [--distributed]
"""
import json
import os
import sys

from absl import app, flags, logging

from config_cli import define_config

_CONFIG = define_config("configs/speculate.py", "Card config.")
from specjax import compile_cache  # noqa: E402
from specjax.apps import card  # noqa: E402  (after the config check: a bad flag fails fast)
_JSON_OUT = flags.DEFINE_string("json_out", None, "Write the card's fields as JSON here.")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False,
                                 "Call jax.distributed.initialize() first (multi-host).")


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:  # the card, warnings and errors only
    logging.set_verbosity(logging.WARNING)
  if _DISTRIBUTED.value:
    import jax
    jax.distributed.initialize()
  compile_cache.enable()  # before loading: its programs are cached too
  try:
    result = card.run_card(_CONFIG.value)
  except ValueError as e:  # LoadError and bad settings: say what is wrong, no traceback
    sys.exit(f"error: {e}")
  print(card.format_card(result))
  if _JSON_OUT.value:
    with open(_JSON_OUT.value, "w") as f:
      json.dump(result, f, indent=2)
    print(f"wrote {_JSON_OUT.value}")


if __name__ == "__main__":
  app.run(main)
