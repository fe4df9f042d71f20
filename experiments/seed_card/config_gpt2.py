"""The classic seed card: gpt2 target, distilgpt2 draft, k=4, 12 greedy tokens.

    python scripts/speculate.py --config=experiments/seed_card/config_gpt2.py \
        --json_out=experiments/seed_card/card_gpt2.json

Needs the gpt2 and distilgpt2 weights (a Hugging Face cache or local directories via
--config.target=/path --config.draft=/path); without them it stops with the loader's error.
"""
from configs import speculate


def get_config():
  c = speculate.get_config()
  c.target = "gpt2"
  c.draft = "distilgpt2"
  c.fallback_draft = ""
  c.k = "4"  # a string field in configs/speculate.py ("auto" or a number)
  c.max_new_tokens = 12
  c.prompt = "Alan Turing theorized that computers would one day become"
  c.chat = False
  return c
