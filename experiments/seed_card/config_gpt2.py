"""The classic seed card: gpt2 target, distilgpt2 draft, k=4, 12 greedy tokens.

    python scripts/speculate.py --config=experiments/seed_card/config_gpt2.py \
        --json_out=experiments/seed_card/card_gpt2.json

Same as configs/seed_card.py; needs the gpt2 and distilgpt2 weights (Hugging Face cache,
hub, or local directories via --config.target=/path --config.draft=/path).
"""
from configs import seed_card


def get_config():
  return seed_card.get_config()
