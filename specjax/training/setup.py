"""Config -> (target model, train prompt ids, held-out prompt ids)."""
from __future__ import annotations

from specjax.training import data as data_lib
from specjax.training import toy


def setup_target(config):
  """config.target "toy" builds the toy target and random prompts; anything else is a
  `load_model` source whose tokenizer encodes the project's prompt set (chat template
  applied when config.prompts.chat). num_train / num_heldout > 0 keep the first ones.
  config.prompts.train_sets (default ("train",)) names the training splits; the train
  prompts come as a dict {split: ids}, each split with its own cached pools."""
  p = config.prompts
  if config.target == "toy":
    t = toy.toy_target(seed=config.seed, **config.toy)
    train = toy.toy_prompts(p.num_train, config.seed + 1, t.cfg.vocab_size)
    held = toy.toy_prompts(p.num_heldout, config.seed + 2, t.cfg.vocab_size)
    return t, train, held
  from specjax.loading import load_model
  mesh = None
  if config.get("mesh"):  # tensor parallel: each device reads its own slice of the target
    from specjax.parallel import make_mesh
    mesh = make_mesh(config.mesh)
  target = load_model(config.target, mesh=mesh)
  sets = tuple(p.get("train_sets", ("train",)))
  for held_out in ("heldout", "eval"):
    if held_out in sets:
      raise ValueError(f"config.prompts.train_sets must not name the {held_out!r} split: it is "
                       "kept out of training; name training splits only (e.g. 'train,train_extra').")
  rows_train = {s: data_lib.load_prompts(s) for s in sets}
  rows_held = data_lib.load_prompts("heldout")
  if p.num_train:
    rows_train = {s: rows[:p.num_train] for s, rows in rows_train.items()}
  if p.num_heldout:
    rows_held = rows_held[:p.num_heldout]
  enc = lambda rows: data_lib.encode_prompts(target, rows, chat=p.chat, max_len=p.max_prompt_len)
  return target, {s: enc(rows) for s, rows in rows_train.items()}, enc(rows_held)
