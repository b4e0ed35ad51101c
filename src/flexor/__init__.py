"""flexor: differentiable, batched simulation of MuJoCo MJCF models in pure JAX."""

from flexor.types import ContactGradient, Data, Model, Option, make_data
from flexor.io import load_mjcf, load_mjcf_string
from flexor.errors import MJCFError
from flexor.forward import forward, inverse
from flexor.integrate import step, with_adaptive_integration
from flexor.rollout import batch_mesh, batch_rollout, rollout, shard_batch
from flexor.gradient_report import GradientReport, gradient_report
from flexor.collision import with_contact_gradient
