"""Distillation: train a draft for a target. One job, variants by argument (big_vision style).

    python scripts/distill.py --config=configs/distill.py --workdir=/tmp/distill_smollm2
    python scripts/distill.py --config=configs/distill.py:tiny --workdir=/tmp/distill_tiny
    python scripts/distill.py --config=configs/distill.py:lm --workdir=/tmp/distill_smollm2_lm
    python scripts/distill.py --config=configs/distill.py:selfgen --workdir=/tmp/selfgen_draft
    python scripts/distill_medusa.py --config=configs/distill.py:medusa --workdir=/tmp/medusa_smollm2
    python scripts/distill_medusa.py --config=configs/distill.py:medusa_tiny --workdir=/tmp/medusa_tiny
    python scripts/distill.py --config=configs/distill.py:eagle3_tiny --workdir=/tmp/eagle3_tiny
    python scripts/distill.py --config=configs/distill.py:peagle_tiny --workdir=/tmp/peagle_tiny
    python scripts/distill.py --config=configs/distill.py:dflash_tiny --workdir=/tmp/dflash_tiny
    python scripts/export_hf.py --config=configs/distill.py --workdir=/tmp/distill_smollm2 \
        --asset=specjax/assets/smollm2-135m-draft-templated

Variants (each function below says what it trains and why):
  smollm2      (default) the templated-prompt EAGLE-style feature draft for SmolLM2-135M
               (`smollm2-135m-draft-templated`)
  tiny         a toy target and draft, seconds (smoke test of the whole pipeline)
  lm           the 2-block LM draft for SmolLM2-135M (`smollm2-135m-draft-lm`)
  selfgen      the feature draft continued on self-generated data (`smollm2-135m-draft`)
  medusa       Medusa-1 heads for SmolLM2-135M (`smollm2-135m-medusa`)
  medusa_tiny  Medusa heads on the toy target, seconds
  eagle3       an EAGLE-3 draft for SmolLM2-135M (speculators-exportable)
  eagle3_tiny  an EAGLE-3 draft on the toy target, seconds
  peagle       a P-EAGLE draft for SmolLM2-135M (speculators' peagle format)
  peagle_tiny  a P-EAGLE draft on the toy target, seconds
  dflash       a DFlash draft for SmolLM2-135M (speculators' dflash format)
  dflash_tiny  a DFlash draft on the toy target, seconds
Configs of single past runs live in their experiment folder (experiments/*/config.py)
and import this module. Rerunning a command on the same workdir resumes it.
"""
import ml_collections

from configs import common

C = ml_collections.ConfigDict


def _run(c, *, batch_size, num_steps, log_every, ckpt_every, keep_checkpoints=2):
  c.batch_size = batch_size
  c.num_steps = num_steps
  c.log_every = log_every
  c.ckpt_every = ckpt_every
  c.keep_checkpoints = keep_checkpoints
  return c


def smollm2():
  """The templated-prompt feature draft for SmolLM2-135M-Instruct (the starting point of
  the shipped `smollm2-135m-draft`, see `selfgen`).

  Draft: one Llama block over fc([embed(token j+1); target feature f_j]) that predicts the
  target's last hidden state f_{j+1}; the target's final norm and an FR-Spec reduced head
  over the 4096 most frequent ids turn it into a distribution (other ids get q = 0, so
  verification stays exact). Data: one temperature-1 and one greedy target continuation
  per prompt of the training and extra training splits (678 prompts, disjoint from the
  held-out split); the target's features are cached in the workdir. Loss: forward KL on
  the draft's support plus feature_weight x smooth-L1 on unit-RMS features (EAGLE), with
  unroll_steps = 3 (EAGLE-3's training-time test). On 2 CPU cores: ~40 min of sampling,
  ~15 min of features, ~70 min of training (800 steps).
  """
  c = C()
  c.seed = 0
  c.mesh = ""  # "" = all devices data parallel; "2,4" / "data=2,model=4": data x model
  c.target = "smollm2-135m"
  c.prompts = common.prompts(train_sets=("train", "train_extra"))
  # init: LM drafts only (a feature draft's block always starts random, N(0, init_std)).
  # feature_layers: target layers read; (-1,) the last only, (2, 15, -1) EAGLE-3 style.
  # init_from: a shipped draft asset to continue from (its layers, fc and head ids).
  c.draft = C(dict(kind="feature", n_layers=1, init="random", init_std=0.02,
                   head_vocab_size=4096, train_embeddings=False, feature_noise=0.05,
                   feature_weight=1.0, unroll_steps=3, feature_layers=(-1,), init_from=""))
  c.data = C(dict(
      source="target", draft_fraction=0.5, refresh_every=0, greedy_pool=True,
      teacher="topk", teacher_top_k=32, samples_per_prompt=1,
      max_new_tokens=128, seq_len=256, temperature=1.0, sample_batch_size=16))
  c.loss = C(dict(name="fkl", beta=0.5))
  c.optim = common.optim()
  c.grad_accum = 1  # micro-batches per update (batch_size must divide by it)
  c.precision = "float32"  # or "bfloat16": bf16 compute, float32 master weights and losses
  c.eval = C(dict(every=100, engine=True, num_prompts=16, max_new_tokens=48, k=4,
                  temperature=0.0))
  return _run(c, batch_size=16, num_steps=800, log_every=5, ckpt_every=25)


def tiny():
  """Distillation on a toy target in seconds: a tiny random Llama with peaked
  distributions (`specjax.training.toy`); the draft has its width, shares its embeddings
  and starts from random layers, so it can learn the target exactly: alpha climbs to 1."""
  c = C()
  c.seed = 0
  c.mesh = ""
  c.target = "toy"  # "toy" or a load_model source such as "smollm2-135m"
  c.toy = common.toy()
  c.prompts = common.prompts(num_train=64, num_heldout=8)
  c.draft = C(dict(n_layers=1, init="random", init_std=0.3, head_vocab_size=0,
                   train_embeddings=False))
  c.data = C(dict(
      source="target",  # "target", "draft" or "mix" (draft_fraction of each batch from the draft)
      draft_fraction=0.5, refresh_every=0,  # draft pools are resampled every refresh_every steps
      teacher="online",  # "online" (target runs in the train step) or "topk" (stored top-K)
      teacher_top_k=16, samples_per_prompt=1, max_new_tokens=16, seq_len=32, temperature=1.0,
      sample_batch_size=16))
  c.loss = C(dict(name="fkl", beta=0.5))  # fkl | rkl | jsd | tvd
  c.optim = common.optim(lr=1e-2, warmup_steps=5, weight_decay=0.0)
  c.eval = C(dict(every=30, engine=True, num_prompts=8, max_new_tokens=16, k=4, temperature=0.0))
  return _run(c, batch_size=8, num_steps=60, log_every=1, ckpt_every=20)


def lm():
  """The 2-block LM draft for SmolLM2-135M-Instruct, transformers-compatible: the target's
  first two blocks, its frozen shared embeddings, an FR-Spec head over the 4096 most
  frequent ids. Data: one temperature-1 target continuation per training prompt with the
  target's top-32 log-probabilities stored as a sparse teacher. ~35 min on 2 CPU cores;
  add --config.data.teacher=online on an accelerator."""
  c = smollm2()
  c.prompts = common.prompts()
  c.draft = C(dict(n_layers=2, init="target", init_std=0.02, head_vocab_size=4096,
                   train_embeddings=False))
  del c.data["greedy_pool"]
  del c.grad_accum, c.precision
  c.eval.every = 50
  c.num_steps = 300
  return c


def selfgen():
  """The feature draft continued on self-generated data: the recipe of the shipped
  `smollm2-135m-draft`, sized for a 2-core CPU.

  Starts from the templated-prompt draft (`draft.init_from`, its head ids kept). Data:
  every training pair of `data.generated_dir` (the target's own prompts and answers,
  `configs/generate_data.py`, written under the cache root by default) plus one
  temperature-1 continuation per training-split prompt. Checkpoints are selected on the
  generated data's own selection split (eval.select = "generated"), so neither
  prompts_eval.jsonl nor the held-out split shapes the draft. Run
      python scripts/generate_data.py --config=configs/generate_data.py --config.num_pairs=5000
  first; `--stop_at=N` ends a chunk at step N.
  """
  c = smollm2()
  c.draft.init_from = "smollm2-135m-draft-templated"  # the draft of the default variant
  c.prompts.train_sets = ("train",)
  c.data.greedy_pool = False
  c.data.generated_dir = common.cache_dir("selfgen_smollm2")  # configs/generate_data.py's default
  c.data.generated_max_pairs = 0
  c.optim.lr = 5e-4
  c.num_steps = 1000
  c.eval = C(dict(every=100, engine=True, num_prompts=24, max_new_tokens=48, k=4,
                  temperature=0.0, select="generated", select_prompts=24))
  return c


def medusa():
  """Medusa-1 heads for SmolLM2-135M-Instruct: 4 heads (a zero-initialised residual block
  SiLU(W x + b) + x each) on the target's final-normed last hidden state, projected by the
  target's frozen output embedding onto the 4096 most frequent continuation ids. Head i
  predicts token t + 2 + i; loss: head i's cross-entropy weighted decay**i. Data: one
  greedy continuation (64 tokens) of each of the first 192 training prompts with the
  target's hidden states; batches of 256 positions. ~25 min on a quiet 2-core CPU. Export:
      python scripts/distill_medusa.py --config=configs/distill.py:medusa \\
          --workdir=/tmp/medusa_smollm2 --export=specjax/assets/smollm2-135m-medusa
  """
  c = C()
  c.seed = 0
  c.target = "smollm2-135m"
  c.prompts = common.prompts(num_train=192, train_sets=("train",))
  c.medusa = C(dict(n_heads=4, n_layers=1, head_vocab_size=4096, init_std=0.0, decay=0.8))
  c.data = C(dict(temperatures=(0.0,), max_new_tokens=64, seq_len=192, sample_batch_size=32))
  c.optim = common.optim(weight_decay=0.0)
  c.eval = C(dict(every=100, engine=True, num_prompts=8, max_new_tokens=32, k=4,
                  num_heldout_pool=32))
  return _run(c, batch_size=256, num_steps=300, log_every=10, ckpt_every=25)  # batch: positions


def medusa_tiny():
  """Medusa heads on the toy target in seconds. The toy target is mostly a bigram map, so
  its continuations are predictable several tokens ahead from its hidden state: the heads'
  accuracy and the engine's alpha climb well above their values at initialisation."""
  c = C()
  c.seed = 0
  c.target = "toy"
  c.toy = common.toy()
  c.prompts = common.prompts(num_train=64, num_heldout=8)
  c.medusa = C(dict(n_heads=3, n_layers=1, head_vocab_size=0, init_std=0.0, decay=0.8))
  c.data = C(dict(temperatures=(1.0, 0.0), max_new_tokens=16, seq_len=32, sample_batch_size=16))
  c.optim = common.optim(lr=1e-2, warmup_steps=5, weight_decay=0.0)
  c.eval = C(dict(every=30, engine=True, num_prompts=8, max_new_tokens=16, k=3))
  return _run(c, batch_size=64, num_steps=60, log_every=5, ckpt_every=20)


def eagle3():
  """An EAGLE-3 draft for SmolLM2-135M-Instruct (30 layers): one decoder layer over
  fc(target layer inputs (2, 15, 27)) and the token embedding, a 4096-id draft vocabulary
  (d2t/t2d, the most frequent continuation ids), the training-time test over 3 steps
  (`specjax.training.eagle3`). Export the result in speculators' format (what vLLM reads)
  with scripts/export_draft.py. Sized for a 2-core CPU on the data `dflash` and `peagle`
  train on, for a comparison at equal training compute: one temperature-1 and one greedy
  continuation (64 tokens) of each prompt of the training and extra training splits (the
  templated feature draft's 678 prompts), the target's top-32 teacher and features stored
  once (data.teacher = "topk"; "online" runs the target in every step), batch 16,
  1,000 steps. experiments/eagle3_smollm2/ has the run.
  """
  c = medusa()
  del c["medusa"]
  c.prompts.num_train, c.prompts.train_sets = 0, ("train", "train_extra")  # the feature draft's
  c.eagle3 = C(dict(n_layers=1, aux_layers=(2, 15, 27), draft_vocab_size=4096, init_std=0.02,
                    ttt_steps=3, decay=1.0, norm_before_residual=False, norm_output=False))
  c.data = C(dict(temperatures=(1.0, 0.0), max_new_tokens=64, seq_len=192, sample_batch_size=32,
                  teacher="topk", teacher_top_k=32))
  c.optim = common.optim(weight_decay=0.0)
  c = _run(c, batch_size=16, num_steps=1000, log_every=10, ckpt_every=50)  # batch: sequences
  c.eval.every = 200
  return c


def eagle3_tiny():
  """An EAGLE-3 draft on the toy target (2 layers, aux ids (0, 1, 2)) in seconds, with a
  48-of-64 draft vocabulary: held-out agreement and the engine's alpha climb."""
  c = medusa_tiny()
  del c["medusa"]
  c.toy.n_layers = 2
  c.eagle3 = C(dict(n_layers=1, aux_layers=(0, 1, 2), draft_vocab_size=48, init_std=0.1,
                    ttt_steps=3, decay=1.0))
  c.optim = common.optim(lr=3e-3, warmup_steps=5, weight_decay=0.0)
  c.eval = C(dict(every=30, engine=True, num_prompts=8, max_new_tokens=16, k=3,
                  num_heldout_pool=8))
  return _run(c, batch_size=32, num_steps=60, log_every=5, ckpt_every=20)


def peagle():
  """A P-EAGLE draft for SmolLM2-135M-Instruct: EAGLE-3's draft (one layer over fc(target
  layer inputs (2, 15, 27)) and the token embedding, 4096-id draft vocabulary) plus the
  learned mask_hidden and mask token <repo_name> (id 3, absent from chat data) read at the
  parallel positions; 8 depths (k = 8 drafts from one draft pass); the embeddings train
  too, as speculators' P-EAGLE (`specjax.training.peagle`). Sized for a 2-core CPU as
  `dflash` is, on the same data: the training and extra training splits' continuations at
  T = 1 and greedy with the target's top-32 teacher and features stored once, and per row
  every anchor at depth 0 plus 32 whole rollouts drawn per step (max_anchors; every
  element of a 192-token row at 8 depths is 1,528 elements). Export with
  scripts/export_draft.py (speculators' peagle format). experiments/parallel_drafting/.
  """
  c = dflash()
  del c["dflash"]
  c.peagle = C(dict(n_layers=1, aux_layers=(2, 15, 27), draft_vocab_size=4096, init_std=0.02,
                    n_depths=8, mask_token_id=3, mask_init_std=1.0, train_embeddings=True,
                    max_anchors=32))
  c.eval.num_heldout_pool = 8  # every element of each held-out row is scored
  return c


def peagle_tiny():
  """A P-EAGLE draft on the toy target (2 layers, aux ids (0, 1, 2)) in seconds, 3 depths,
  a 48-of-64 draft vocabulary and the last id as mask token: held-out agreement per depth
  and the engine's alpha climb."""
  c = eagle3_tiny()
  del c["eagle3"]
  c.peagle = C(dict(n_layers=1, aux_layers=(0, 1, 2), draft_vocab_size=48, init_std=0.1,
                    n_depths=3, mask_token_id=-1, mask_init_std=1.0, train_embeddings=True))
  return c


def dflash():
  """A DFlash (block diffusion) draft for SmolLM2-135M-Instruct: one Qwen3-style layer
  (speculators' DFlash layer) whose keys and values include fc(target layer inputs
  (2, 15, 27), speculators' default for 30 layers) at the context positions, a block of 9
  (the anchor and 8 mask tokens <repo_name>, id 3, absent from chat data: k = 8 drafts from
  one draft pass), a 4096-id draft vocabulary; speculators' fixed-exp-decay KL (gamma 4);
  the embeddings stay the target's (`specjax.training.dflash`). Sized for a 2-core CPU:
  one temperature-1 and one greedy continuation (64 tokens) of each prompt of the training
  and extra training splits (the templated feature draft's 678 prompts) with the target's
  top-32 teacher and features stored once (data.teacher = "topk"; "online"
  runs the target in every step, ~20 s a step here) and 32 anchors a row drawn per step
  (speculators' max_anchors). Export with scripts/export_draft.py (speculators' dflash
  format). experiments/parallel_drafting/ has the run.
  """
  c = eagle3()  # its prompts, data and stored teacher
  del c["eagle3"]
  c.dflash = C(dict(n_layers=1, aux_layers=(2, 15, 27), block_size=9, mask_token_id=3,
                    draft_vocab_size=4096, init_std=0.02, gamma=4.0, max_anchors=32))
  c.eval.k = 8  # ~2.3 s a step here
  return c


def dflash_tiny():
  """A DFlash draft on the toy target (2 layers, aux ids (0, 1, 2)) in seconds: a block of
  4 (3 drafts a pass), a 48-of-64 draft vocabulary and the last id as mask token: held-out
  agreement per slot and the engine's alpha climb."""
  c = eagle3_tiny()
  del c["eagle3"]
  c.dflash = C(dict(n_layers=1, aux_layers=(0, 1, 2), block_size=4, mask_token_id=-1,
                    draft_vocab_size=48, init_std=0.1, gamma=4.0))
  c.optim = common.optim(lr=1e-2, warmup_steps=5, weight_decay=0.0)
  return c


VARIANTS = {"smollm2": smollm2, "tiny": tiny, "lm": lm, "selfgen": selfgen, "medusa": medusa,
            "medusa_tiny": medusa_tiny, "eagle3": eagle3, "eagle3_tiny": eagle3_tiny,
            "peagle": peagle, "peagle_tiny": peagle_tiny, "dflash": dflash,
            "dflash_tiny": dflash_tiny}


def get_config(arg=None):
  return common.variant("distill", arg, VARIANTS, "smollm2")
