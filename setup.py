"""specjax: pure-functional JAX speculative decoding."""
from setuptools import find_packages, setup

setup(
    name="specjax",
    version="0.1.0",
    description="Pure-functional JAX/Flax research codebase for speculative decoding.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # specjax/data (prompt sets) and specjax/assets (the shipped drafts, one directory each)
    # hold no Python: they are listed as data-only packages so setuptools ships them
    # without its "absent from the packages configuration" warnings.
    packages=find_packages(include=["specjax", "specjax.*"]) + ["specjax.assets", "specjax.data"],
    package_data={"specjax.data": ["*.jsonl", "*.json"], "specjax.assets": ["*/*"]},
    install_requires=[
        "jax>=0.4.35",
        "flax>=0.10",
        "optax>=0.2",
        "orbax-checkpoint>=0.11",
        "transformers>=4.45",
        "ml-collections>=0.1.1",
        "absl-py>=2.0",
        "gguf>=0.10",
        "safetensors>=0.4",
        "tokenizers>=0.20",
        "huggingface_hub>=0.25",
        "numpy>=1.26",
        "matplotlib>=3.8",
        "tqdm>=4.66",
        "tensorboardX>=2.6",
        "filelock>=3.12",  # jax locks its bounded compilation cache with it
    ],
    extras_require={
        # torch is for reference parity in tests and peer benchmarks only; the library never imports it.
        # accelerate: transformers' own GGUF loader (the reference in tests) requires it.
        "test": ["pytest>=8", "pytest-xdist>=3", "torch==2.13.0", "accelerate>=1.0"],
    },
)
