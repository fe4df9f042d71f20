"""Shared fixtures: tiny random Hugging Face checkpoints written with `save_pretrained`.

Each fixture is session-scoped and returns the path of a directory holding
config.json, generation_config.json, model.safetensors and a tiny byte-level BPE
tokenizer (ChatML chat template, specials <|endoftext|>=0, <|im_start|>=1, <|im_end|>=2).
Weights are re-drawn larger than transformers' init (std 0.1, norm scales around 1,
non-zero biases) so a mis-mapped tensor shows up in logit parity.

torch and transformers are imported inside the fixtures, so test files that do not
use them pay nothing.

The specjax cache ($SPECJAX_CACHE, default ~/.cache/specjax: the materialized Hugging
Face form of a shipped draft) points at a temporary directory for the whole session,
subprocesses included, so the tests never write to the home directory.
"""
from __future__ import annotations

import gc
import os
import shutil
import sys

import pytest

# No persistent compilation cache in a plain pytest run (subprocesses included). Four
# clean-clone runs of `make test` under pytest-xdist aborted inside XLA, three in jax's
# write of a loop's executable to that cache (`put_executable_and_time`), each in a
# long-lived worker that had run many files. `tests/run_files.py` (one short process a
# file, a crashed file rerun once) turns on one cache for its run's files, fresh each run:
# a JAX_ENABLE_COMPILATION_CACHE given from outside is used as it is.
os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
# float32 products in float32 on every backend: on a GPU jax's default runs them in
# TF32 (10 mantissa bits), and the numerics tests, which compare two float32 paths to
# 1e-4, failed there by 3e-3 (experiments/gpu/README.md, the 2026-12-04 lease); the CPU
# computes them in float32 either way.
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
# One torch (OpenMP) thread: `make test` runs two files at once on two cores, and torch's
# two spinning threads beside another process ran transformers' generate of 16 tokens on
# SmolLM2-135M in 7-14 s against 1.3 s with one; tests/loading/test_loading.py took 118
# CPU-s against 67. Read when torch is first imported, which the fixtures do later.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The tests' programs are tiny, so compiling them is most of their time. XLA's CPU backend
# at LLVM -O0 ran tests/decoding/test_tree.py in 137 s against 201 s at its default, back to
# back; with its older elemental emitters instead of the MLIR fusion emitters the same file
# took 95 CPU-s against 185 (backend compile 62 s against 100 s over its 798 programs).
# Flags given from outside win. Fake-device subprocesses append their device count to this
# (`tiny_models.fake_devices_env`).
# Files that mostly run programs rather than compile them (the sampling laws draw many
# rounds) keep XLA's default -O2 when they run alone, as `make test` runs each file:
# tests/test_exact_sampling.py took 38 CPU-s at -O2 against 50 at -O0.
# One LLVM module a program instead of XLA's split for parallel codegen: three tiny-model
# generate calls (a chain at k = 2 and 3, a static tree) took 5.3-5.5 CPU-s against 6.0-6.3.
from run_files import FAST_EXIT, RUN_HEAVY  # noqa: E402 (tests/ is on the path: pytest.ini)
_files = [a for a in sys.argv[1:] if a.endswith(".py") or ".py::" in a]
_level = "2" if _files and all(a.split("::")[0].endswith(RUN_HEAVY) for a in _files) else "0"
for _flag, _value in (("xla_backend_optimization_level", _level),
                      ("xla_cpu_use_fusion_emitters", "false"),
                      ("xla_cpu_parallel_codegen_split_count", "1")):
  if _flag not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --{_flag}={_value}".strip()


TINY_VOCAB = 300
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding drafts tokens and verifies them in one pass.",
    "Hello world! 12345 apples cost 3.14 dollars, isn't it?",
    "A small model proposes, a large model disposes.",
    "user assistant system: what is the capital of France? Paris.",
] * 20


@pytest.fixture(scope="module", autouse=True)
def _fresh_jax_caches():
  """Each test file ends by dropping jax's compiled programs: a worker process that
  accumulates every program of many files crashed inside XLA's compiler (a segfault in
  `backend_compile_and_load`, in whichever file came late in that worker)."""
  yield
  import jax
  jax.clear_caches()


@pytest.fixture(scope="session", autouse=True)
def specjax_cache(tmp_path_factory):
  """$SPECJAX_CACHE -> a session temporary directory (what needs it is rebuilt there)."""
  from specjax.paths import CACHE_ENV
  path = tmp_path_factory.mktemp("specjax_cache")
  old = os.environ.get(CACHE_ENV)
  os.environ[CACHE_ENV] = str(path)
  yield str(path)
  if old is None:
    os.environ.pop(CACHE_ENV, None)
  else:
    os.environ[CACHE_ENV] = old


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory):
  """A trained byte-level BPE (< TINY_VOCAB tokens) saved as a fast tokenizer."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  from transformers import PreTrainedTokenizerFast
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=TINY_VOCAB - 10, special_tokens=SPECIALS,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator(_CORPUS, trainer)
  fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>",
                                 eos_token="<|im_end|>", unk_token=None,
                                 pad_token="<|endoftext|>", chat_template=CHATML)
  path = tmp_path_factory.mktemp("tiny_tokenizer")
  fast.save_pretrained(path)
  return str(path)


def _randomize(model, seed: int) -> None:
  """Re-draws every parameter: norm scales 1 + 0.2 N(0,1), everything else 0.1 N(0,1)."""
  import torch
  gen = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=gen)
      is_scale = p.ndim == 1 and ("norm" in name or ".ln_" in name) and name.endswith("weight")
      p.copy_(1.0 + 0.2 * noise if is_scale else 0.1 * noise)


def save_tiny(tmp_path_factory, tokenizer_dir: str, name: str, config, seed: int = 0) -> str:
  """Builds a random model from a transformers config and saves it with the tokenizer."""
  import torch
  import transformers
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(config)
  _randomize(model, seed)
  path = tmp_path_factory.mktemp(name)
  model.save_pretrained(path)
  for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    try:
      shutil.copy(f"{tokenizer_dir}/{f}", path / f)
    except FileNotFoundError:
      pass
  return str(path)


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory, tiny_tokenizer_dir):
  """GPT2LMHeadModel: 2 layers, width 64, 4 heads, tied head, learned positions."""
  import transformers
  cfg = transformers.GPT2Config(vocab_size=TINY_VOCAB, n_positions=64, n_embd=64, n_layer=2,
                                n_head=4, bos_token_id=0, eos_token_id=0, layer_norm_epsilon=1e-5)
  return save_tiny(tmp_path_factory, tiny_tokenizer_dir, "tiny_gpt2", cfg, seed=1)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, tiny_tokenizer_dir):
  """LlamaForCausalLM: GQA (4 query / 2 kv heads), untied head, rope_theta 5000."""
  import transformers
  cfg = transformers.LlamaConfig(
      vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
      rms_norm_eps=1e-5, rope_theta=5000.0, tie_word_embeddings=False, bos_token_id=1,
      eos_token_id=2)
  return save_tiny(tmp_path_factory, tiny_tokenizer_dir, "tiny_llama", cfg, seed=2)


@pytest.fixture(scope="session")
def tiny_llama_tied_dir(tmp_path_factory, tiny_tokenizer_dir):
  """LlamaForCausalLM: tied embeddings, GQA 4/1, head_dim 32 != width / heads."""
  import transformers
  cfg = transformers.LlamaConfig(
      vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=1, head_dim=32, max_position_embeddings=128,
      rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
  return save_tiny(tmp_path_factory, tiny_tokenizer_dir, "tiny_llama_tied", cfg, seed=3)


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory, tiny_tokenizer_dir):
  """Qwen2ForCausalLM: q/k/v bias, GQA 4/2, untied head, two eos ids."""
  import transformers
  cfg = transformers.Qwen2Config(
      vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
      rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False, eos_token_id=[2, 0])
  return save_tiny(tmp_path_factory, tiny_tokenizer_dir, "tiny_qwen2", cfg, seed=4)


# Seconds jax spent building programs in this process, by stage (jax.monitoring's duration
# events; a program loaded from a persistent cache still traces and lowers).
_COMPILE_STAGES = {"/jax/core/compile/jaxpr_trace_duration": "trace",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
                   "/jax/core/compile/backend_compile_duration": "compile"}
_COMPILE_SECONDS = dict.fromkeys(_COMPILE_STAGES.values(), 0.0)
_COMPILE_COUNT = [0]


def _on_duration(event: str, duration: float, **_) -> None:
  stage = _COMPILE_STAGES.get(event)
  if stage:
    _COMPILE_SECONDS[stage] += duration
    _COMPILE_COUNT[0] += stage == "compile"


def pytest_configure(config):
  import jax
  jax.monitoring.register_event_duration_secs_listener(_on_duration)


def pytest_terminal_summary(terminalreporter):
  """The process's CPU seconds (its own and its finished subprocesses'), which a loaded
  machine stretches less than wall time; `tests/run_files.py` reports it per file. Then
  what jax spent building this process's programs (subprocesses not included)."""
  import resource
  used = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
             for f in ("ru_utime", "ru_stime"))
  terminalreporter.write_line(f"cpu {used:.0f} s")
  terminalreporter.write_line(
      f"jax programs {_COMPILE_COUNT[0]}: " + ", ".join(f"{k} {v:.1f} s" for k, v in _COMPILE_SECONDS.items()))


def pytest_collection_finish(session):
  """Python's cyclic garbage collector, tuned for tracing: jax's tracing allocates many
  short-lived objects, and at the default threshold (700) the collector ran about 2,800
  times in tests/decoding/test_tree.py, 3.0 of its 71 CPU-s; with what collection imported
  frozen (never scanned again) and a threshold of 50,000, 650 times in 0.5 s."""
  gc.collect()
  gc.freeze()
  gc.set_threshold(50_000, 20, 100)


_EXIT_STATUS = []


def pytest_sessionfinish(session, exitstatus):
  _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
  """Under tests/run_files.py ($SPECJAX_TESTS_FAST_EXIT), the process ends here with
  pytest's exit status, once everything is reported: the interpreter's teardown of jax's
  compiled programs took about 0.7 s a process and decides nothing."""
  if os.environ.get(FAST_EXIT) and _EXIT_STATUS:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_EXIT_STATUS[-1])
