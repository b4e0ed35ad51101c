"""flexor: differentiable, batched simulation of MuJoCo MJCF models in pure JAX."""

from flexor.types import Data, Model, Option, make_data
