"""Test configuration: float64, strict rank promotion, and the conformance model list."""

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")
