# %% [markdown]
# # Batched rollout throughput
#
# `flexor.rollout.batch_rollout` is `jax.vmap` over `flexor.rollout`, which is one `lax.scan`
# over `flexor.step`: a batch of B simulations advances in lock step as one program. This
# notebook measures simulated steps per second (B x steps / wall time) against B, on the CPU
# and, where JAX sees one, on the accelerator, for the bundled `arm` model (slide, ball, hinge
# and free joints, gravity, springs, damping; no contacts) in float32.
#
# Timings exclude compilation (each batch size compiles once, before it is timed) and take the
# best of a few repeats. Set `FLEXOR_NOTEBOOK_SMALL=1` to time two tiny batches only (the test
# suite does; its numbers say nothing about performance).

# %%
import os
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import flexor
from flexor import examples
from flexor.rollout import batch_rollout

SMALL = os.environ.get("FLEXOR_NOTEBOOK_SMALL") == "1"
NSTEP, REPEATS = (10, 1) if SMALL else (200, 3)
CPU_BATCHES = [1, 4] if SMALL else [1, 4, 16, 64, 256, 1024]
ACCELERATOR_BATCHES = [1, 4] if SMALL else [1, 16, 256, 1024, 4096, 16384, 65536]

model = flexor.load_mjcf(examples.path("arm"), dtype=jnp.float32)
devices = {"cpu": jax.devices("cpu")[0]}
if jax.default_backend() != "cpu":
  devices[jax.default_backend()] = jax.devices()[0]
print("devices:", {name: str(device) for name, device in devices.items()})

# %%
@jax.jit
def simulate(m, d):
  final, _ = batch_rollout(m, d, nstep=NSTEP, fields=())
  return final.qpos


def steps_per_second(device, batch):
  """Simulated steps per second for ``batch`` rollouts of NSTEP steps on ``device``."""
  m = jax.device_put(model, device)
  d = flexor.make_data(model, batch_shape=(batch,))
  # Different initial velocities, so the batch does not hold one simulation repeated.
  qvel = jax.random.normal(jax.random.key(batch), d.qvel.shape, d.qvel.dtype)
  d = jax.device_put(d.replace(qvel=qvel), device)
  simulate(m, d).block_until_ready()  # compile
  best = np.inf
  for _ in range(REPEATS):
    start = time.perf_counter()
    simulate(m, d).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return batch * NSTEP / best


results = {}
for name, device in devices.items():
  batches = CPU_BATCHES if name == "cpu" else ACCELERATOR_BATCHES
  results[name] = (batches, [steps_per_second(device, b) for b in batches])
  for b, rate in zip(*results[name]):
    print(f"{name:5s} batch {b:6d}: {rate:12,.0f} steps/s")

# %%
fig, ax = plt.subplots(figsize=(6, 4))
for name, (batches, rates) in results.items():
  ax.loglog(batches, rates, "o-", label=name)
ax.set_xlabel("batch size B")
ax.set_ylabel("simulated steps per second")
ax.set_title(f"arm, float32, {NSTEP}-step rollouts")
ax.grid(alpha=0.3, which="both")
ax.legend()
plt.show()
