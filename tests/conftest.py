"""Test configuration: float64 and strict rank promotion for every test, XLA and garbage-collector
settings that keep the suite fast, and the grouping of tests by model."""

import gc
import os

# JAX 0.10's concurrency-optimised CPU scheduler has crashed (segfault) and deadlocked while
# compiling our larger programs on 2-core machines; the classic scheduler is safe and as fast here.
# Tests evaluate each compiled program a few times, so XLA's cheapest optimisation level, which
# halves compile time, makes the suite about twice as fast; results agree to rounding. At that
# level XLA's older elemental emitters compile a contact step in half the time of its fusion
# emitters, and the program runs faster too (measured on a stack of boxes: 6.9 -> 3.3 s, and
# 29 -> 20 s for the reverse mode of a 20-step rollout).
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_cpu_enable_concurrency_optimized_scheduler=false"
                           + " --xla_backend_optimization_level=0"
                           + " --xla_llvm_disable_expensive_passes=true"
                           + " --xla_cpu_use_fusion_emitters=false").strip()

import jax  # pylint: disable=wrong-import-position
import pytest  # pylint: disable=wrong-import-position

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

# Tracing and differentiating a step allocates millions of short-lived Python objects, and with
# CPython's default thresholds a full collection, which walks a worker's whole heap (JAX, MuJoCo,
# the compiled programs), ran every 8 s and took 0.75 s: 11% of the time of the gradient and
# sensor tests. The modules imported by now are frozen out of the collections and the thresholds
# raised: the collector's time on those tests fell from 33.6 to 7.4 s. On the whole suite, run
# side by side on a clean clone, the summed test time fell by 4% (2596 -> 2503 s) and the largest
# process grew by 3% (5.44 -> 5.62 GB).
gc.collect()
gc.freeze()
gc.set_threshold(20_000, 20, 100)


def _group(item) -> str:
  params = getattr(getattr(item, "callspec", None), "params", {})
  model = params.get("name", params.get("model"))
  if isinstance(model, str):
    return f"model:{model}"
  shared = sorted(name for name, defs in item._fixtureinfo.name2fixturedefs.items()
                  if defs[-1].scope == "module" and defs[-1].func.__module__ == item.module.__name__)
  return f"{item.module.__name__}::{shared[0] if shared else item.originalname}"


def pytest_itemcollected(item):
  """Groups the tests by model for pytest-xdist's ``--dist loadgroup``: every test of one model
  (its ``name`` or ``model`` parameter) runs in one worker, so each model's compiled programs are
  built once and can be dropped afterwards; tests sharing a module-scoped fixture of their module
  run in one worker, which builds it once; other parametrized tests stay with their function's
  cache."""
  item.add_marker(pytest.mark.xdist_group(_group(item)))


def pytest_collection_modifyitems(items):
  """Runs each group's tests consecutively, also without xdist."""
  first: dict[str, int] = {}
  for item in items:
    first.setdefault(_group(item), len(first))
  items.sort(key=lambda item: first[_group(item)])


_last_group: list[str] = [""]


def pytest_runtest_setup(item):
  """Drops JAX's compiled programs when a worker moves on to another model: they are not used
  again, and kept for a hundred models they grow a worker by gigabytes."""
  group = next(mark.args[0] for mark in item.iter_markers("xdist_group"))
  if group != _last_group[0] and _last_group[0].startswith("model:"):
    jax.clear_caches()
  _last_group[0] = group
