"""jax-ml/jax#40412's reproducer of jaxlib 0.10.2's XLA:CPU YNN fusion segfault (a rank-7
f32 multiply-reduce with a size-1 dimension), run as it is and with YNN fusions off.

    python experiments/xla_ynn_crash/repro.py

Each case runs in a subprocess, so the segfault shows as its exit status (-11)."""
import os
import subprocess
import sys

CASE = """
import jax, jax.numpy as jnp
S = (3, 1, 2, 2, 8, 8, 8)
u = jax.random.normal(jax.random.PRNGKey(0), S, dtype=jnp.float32)
v = jax.random.normal(jax.random.PRNGKey(1), S, dtype=jnp.float32)
print(jax.jit(lambda a, b: jnp.sum(a * b, axis=3))(u, v).block_until_ready().shape)
"""

if __name__ == "__main__":
  import jax, jaxlib  # noqa: E401
  print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}")
  for name, flags in (("XLA's defaults", ""),
                      ("YNN fusions off (--xla_cpu_experimental_ynn_fusion_type=)",
                       "--xla_cpu_experimental_ynn_fusion_type=")):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags}
    proc = subprocess.run([sys.executable, "-c", CASE], env=env, capture_output=True, text=True)
    print(f"{name}: exit status {proc.returncode}, output {proc.stdout.strip() or '-'}")
