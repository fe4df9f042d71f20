"""The seed card's settings (k=4, 12 greedy tokens, same raw prompt, no chat template) on
the embedded target SmolLM2-135M-Instruct with the shipped default draft.

    python scripts/speculate.py --config=experiments/seed_card/config_embedded.py \
        --json_out=experiments/seed_card/card_embedded.json

If the default draft is not available, the card falls back to ngram:3 and says so.
"""
from configs import speculate


def get_config():
  c = speculate.get_config()
  c.k = "4"
  c.max_new_tokens = 12
  c.prompt = "Alan Turing theorized that computers would one day become"
  c.chat = False
  c.target = "smollm2-135m"
  c.draft = "smollm2-135m-draft-lm"
  c.fallback_draft = "ngram:3"
  return c
