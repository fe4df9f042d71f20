"""The speculative-decoding card: target alone vs target + draft on one prompt."""
from __future__ import annotations

from absl import logging

from specjax.bench.timing import best_of
from specjax.decoding import generate
from specjax.errors import LoadError
from specjax.loading import load_model


def load_draft(source: str, fallback: str = "", target=None):
  """(label, draft): a loaded model, a drafter spec ("ngram:3"), or None for no draft.

  When `source` cannot be loaded here and `fallback` is set, the fallback is used.
  `target` (loaded) is reused by a draft that shares its embeddings.
  """
  if not source:
    return "none", None
  if ":" in source:
    return source, source
  try:
    return source, load_model(source, target=target)
  except LoadError as e:
    if not fallback:
      raise
    logging.warning("Draft %r unavailable (%s); using %r instead.", source, e, fallback)
    return load_draft(fallback, target=target)


def run_card(config) -> dict:
  """Loads, runs both decoders with identical settings, returns the card's fields."""
  target = load_model(config.target)
  draft_label, draft = load_draft(config.draft, config.fallback_draft, target)
  prompt = target.encode(config.prompt, chat=config.chat)
  common = dict(max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                top_k=config.top_k, top_p=config.top_p, seed=config.seed)
  k = "auto" if str(config.k) == "auto" else int(config.k)
  if k == "auto" and draft is not None:  # choose once (printed), then time that k
    k = generate(target, [prompt], draft=draft, k="auto", **common).k_choice["k"]
  spec = best_of(config.repeats, target, [prompt], draft=draft, k=k, **common)
  s = spec.stats
  card = {
      "target": config.target, "draft": draft_label, "k": k, "k_auto": str(config.k) == "auto",
      "temperature": config.temperature, "prompt": config.prompt, "output": spec.texts[0],
      "prompt_tokens": len(prompt), "new_tokens": int(s.new_tokens.sum()),
      "target_passes": int(s.target_passes.sum()), "draft_passes": int(s.draft_passes.sum()),
      "acceptance_rate": s.to_dict()["acceptance_rate"],
      "per_position_acceptance": s.to_dict()["per_position_acceptance"],
      "tokens_per_pass": s.to_dict()["tokens_per_pass"],
      "closed_form_tokens_per_pass": s.closed_form_tokens_per_pass,
      "speculative_tokens_per_s": s.tokens_per_s, "speculative_time_s": s.wall_time_s,
      "identical_to_target": None, "speedup": None,
  }
  if config.check_target:
    base = best_of(config.repeats, target, [prompt], **common)
    card["target_tokens_per_s"] = base.stats.tokens_per_s
    card["target_time_s"] = base.stats.wall_time_s
    card["identical_to_target"] = bool(spec.tokens == base.tokens)
    # Time per generated token, target alone over speculative (the two outputs may
    # differ in length when sampling).
    card["speedup"] = s.tokens_per_s / base.stats.tokens_per_s
  return card


def _fmt(x, spec="{:.3f}"):
  return "n/a" if x is None else spec.format(x)


def format_card(c: dict) -> str:
  lines = [
      f"prompt: {c['prompt']}",
      f"output: {c['output']}",
      "",
      f"target               {c['target']}",
      f"draft                {c['draft']}",
      f"k                    {c['k']}{' (auto)' if c.get('k_auto') else ''}",
      f"temperature          {c['temperature']}",
      f"new tokens           {c['new_tokens']}",
      f"target passes        {c['target_passes']} (prefill included)",
      f"draft passes         {c['draft_passes']}",
      f"acceptance rate      {_fmt(c['acceptance_rate'])}",
      f"tokens / pass        {_fmt(c['tokens_per_pass'])} "
      f"(closed form {_fmt(c['closed_form_tokens_per_pass'])})",
      f"speculative tok/s    {_fmt(c['speculative_tokens_per_s'], '{:.1f}')}",
  ]
  if c.get("target_tokens_per_s") is not None:
    lines += [
        f"target alone tok/s   {_fmt(c['target_tokens_per_s'], '{:.1f}')}",
        f"identical to target  {c['identical_to_target']}",
        f"speedup              {_fmt(c['speedup'], '{:.2f}')}x (measured in this run)",
    ]
  return "\n".join(lines)
