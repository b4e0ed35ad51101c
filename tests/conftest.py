"""Test configuration: float64 and strict rank promotion for every test."""

import os

# JAX 0.10's concurrency-optimised CPU scheduler has crashed (segfault) and deadlocked while
# compiling our larger programs on 2-core machines; the classic scheduler is safe and as fast here.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_cpu_enable_concurrency_optimized_scheduler=false").strip()

import jax  # pylint: disable=wrong-import-position

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")
