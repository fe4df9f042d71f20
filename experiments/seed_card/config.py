"""The seed card's settings: k = 4, 12 greedy tokens on the same raw prompt, no chat
template, on two pairs of models (the argument picks one):

    python scripts/speculate.py --config=experiments/seed_card/config.py:gpt2 \
        --json_out=experiments/seed_card/card_gpt2.json
    python scripts/speculate.py --config=experiments/seed_card/config.py:embedded \
        --json_out=/tmp/card_embedded.json

  gpt2      the classic card: target gpt2, draft distilgpt2. Needs their weights (a Hugging
            Face cache, or local directories via --config.target=/path --config.draft=/path);
            without them it stops with the loader's error.
  embedded  the embedded target SmolLM2-135M-Instruct with the 2-block LM draft; if that
            draft is not available, the card falls back to ngram:3 and says so.
"""
from configs import speculate

PAIRS = {"gpt2": ("gpt2", "distilgpt2", ""),
         "embedded": ("smollm2-135m", "smollm2-135m-draft-lm", "ngram:3")}


def get_config(arg=None):
  if arg not in PAIRS:
    raise ValueError(f"give gpt2 or embedded (which pair of models), not {arg!r}.")
  c = speculate.get_config()
  c.target, c.draft, c.fallback_draft = PAIRS[arg]
  c.k = "4"  # a string field in configs/speculate.py ("auto" or a number)
  c.max_new_tokens = 12
  c.prompt = "Alan Turing theorized that computers would one day become"
  c.chat = False
  return c
