"""Tokenizers and stop tokens, without torch.

* Hugging Face directories: `tokenizer.json` loaded with `PreTrainedTokenizerFast`
  (not `AutoTokenizer`, whose import pulls in torch through transformers' config
  machinery); `tokenizer_config.json` / `chat_template.jinja` supply the chat template.
* GGUF files: a byte-level BPE (`tokenizer.ggml.model == "gpt2"`) rebuilt from the
  `tokenizer.ggml.*` fields with the `tokenizers` library, split the way llama.cpp
  splits for the file's `tokenizer.ggml.pre`, wrapped with the file's chat template.
* Stop ids: the declared eos ids plus any special token llama.cpp also treats as
  end-of-generation (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, ...), so a chat model
  stops at the end of its turn whichever of them it emits.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Iterable, Optional

if TYPE_CHECKING:  # annotation only: transformers is imported where a tokenizer is built
  from transformers import PreTrainedTokenizerFast

log = logging.getLogger(__name__)

# Token texts llama.cpp adds to its end-of-generation set (llama-vocab.cpp).
EOG_TEXTS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
             "<end_of_turn>", "<|end_of_text|>", "<EOT>", "<｜end▁of▁sentence｜>")

# GPT-2's pre-tokenizer regex is the ByteLevel default; these `tokenizer.ggml.pre`
# values additionally split every digit on its own (llama.cpp: "\p{N}" first).
_DIGIT_SPLIT_PRE = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone",
                    "minerva")
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_REGEX_PRE = {"llama3": _LLAMA3_SPLIT, "llama-v3": _LLAMA3_SPLIT, "llama-bpe": _LLAMA3_SPLIT,
              "smaug-bpe": _LLAMA3_SPLIT, "falcon3": _LLAMA3_SPLIT,
              "qwen2": _QWEN2_SPLIT, "deepseek-r1-qwen": _QWEN2_SPLIT}
_GPT2_PRE = ("default", "gpt2", "gpt-2", "mpt", "olmo", "jais")

_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types


def from_directory(directory: str) -> Optional["PreTrainedTokenizerFast"]:
  """The fast tokenizer of a Hugging Face directory, or None when it ships none."""
  from transformers import PreTrainedTokenizerFast
  if os.path.isfile(os.path.join(directory, "tokenizer.json")):
    return PreTrainedTokenizerFast.from_pretrained(directory)
  if all(os.path.isfile(os.path.join(directory, f)) for f in ("vocab.json", "merges.txt")):
    return _from_vocab_merges(directory)
  log.warning("%s has no tokenizer.json; the model loads without a tokenizer.", directory)
  return None


def _from_vocab_merges(directory: str):
  """GPT-2 style vocab.json + merges.txt (old checkpoints without tokenizer.json)."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers
  from transformers import PreTrainedTokenizerFast
  bpe = models.BPE.from_file(os.path.join(directory, "vocab.json"),
                             os.path.join(directory, "merges.txt"))
  tok = Tokenizer(bpe)
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  eos = "<|endoftext|>" if tok.token_to_id("<|endoftext|>") is not None else None
  return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, bos_token=eos)


def _bytes_to_unicode() -> dict[int, str]:
  """GPT-2's reversible byte -> printable character map (the byte-level alphabet)."""
  bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1)))
  cs = bs[:]
  n = 0
  for b in range(256):
    if b not in bs:
      bs.append(b)
      cs.append(256 + n)
      n += 1
  return dict(zip(bs, map(chr, cs)))


def _pre_tokenizer(pre: Optional[str]):
  from tokenizers import Regex, pre_tokenizers
  if pre in _REGEX_PRE:
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_REGEX_PRE[pre]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  if pre in _DIGIT_SPLIT_PRE:
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
  if pre not in _GPT2_PRE and pre is not None:
    log.warning("Unknown GGUF pre-tokenizer %r; splitting text like GPT-2.", pre)
  return byte_level


def from_gguf(meta: dict, source: str) -> Optional["PreTrainedTokenizerFast"]:
  """A PreTrainedTokenizerFast rebuilt from a GGUF's `tokenizer.*` metadata, or None.

  Only byte-level BPE vocabularies (`tokenizer.ggml.model == "gpt2"`, used by SmolLM2,
  Llama 3, Qwen2, GPT-2) are rebuilt; other kinds load without a tokenizer.
  """
  kind = meta.get("tokenizer.ggml.model")
  if kind != "gpt2" or "tokenizer.ggml.tokens" not in meta:
    log.warning("%s: GGUF tokenizer kind %r is not supported; loading without a tokenizer.",
                source, kind)
    return None
  from tokenizers import AddedToken, Tokenizer, decoders, models, processors
  from transformers import PreTrainedTokenizerFast

  tokens = list(meta["tokenizer.ggml.tokens"])
  types = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))
  alphabet = _bytes_to_unicode()
  spelled = set(alphabet.values())
  # Tokens written in plain text (not in the byte alphabet) are respelled byte-wise.
  vocab = {(t if set(t) <= spelled else "".join(alphabet[b] for b in t.encode("utf-8"))): i
           for i, t in enumerate(tokens)}
  merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
  tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
  tok.pre_tokenizer = _pre_tokenizer(meta.get("tokenizer.ggml.pre"))
  tok.decoder = decoders.ByteLevel()
  tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                          for t, ty in zip(tokens, types) if ty == _CONTROL and set(t) <= spelled])
  tok.add_tokens([AddedToken(t, special=False, normalized=False)
                  for t, ty in zip(tokens, types) if ty == _USER_DEFINED])

  def token(key: str) -> Optional[str]:
    i = meta.get(f"tokenizer.ggml.{key}")
    return tokens[i] if i is not None and 0 <= i < len(tokens) else None

  bos = token("bos_token_id")
  if meta.get("tokenizer.ggml.add_bos_token", False) and bos is not None:
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])])
  return PreTrainedTokenizerFast(
      tokenizer_object=tok, bos_token=bos, eos_token=token("eos_token_id"),
      unk_token=token("unknown_token_id"), pad_token=token("padding_token_id"),
      chat_template=meta.get("tokenizer.chat_template"))


def stop_ids(declared: Iterable[Optional[int]], special_tokens: dict[str, int],
             vocab_size: int) -> tuple[int, ...]:
  """Declared eos ids first, then special tokens llama.cpp also ends generation on.

  special_tokens maps special-token text -> id; ids outside the vocabulary are dropped.
  """
  out: list[int] = []
  for i in list(declared) + [special_tokens.get(t) for t in EOG_TEXTS]:
    if i is not None and 0 <= int(i) < vocab_size and int(i) not in out:
      out.append(int(i))
  return tuple(out)


def as_id_list(value) -> list[int]:
  """An eos/bos id field (int, list of ints or None) as a list."""
  if value is None:
    return []
  return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def special_tokens_of(tokenizer) -> dict[str, int]:
  """text -> id of the tokenizer's special added tokens ({} without a tokenizer)."""
  if tokenizer is None:
    return {}
  return {t.content: i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
