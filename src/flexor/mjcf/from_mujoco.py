"""Model from a compiled ``mujoco.MjModel`` (needs the optional ``mujoco`` package).

flexor's own compiler (``load_mjcf``) is the normal path. This one takes MuJoCo's compiled
primary fields instead, which lets the test suite check the simulation stages independently of
the compiler, and lets users simulate models built with MuJoCo's ``MjSpec``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexor.mjcf.assemble import assemble, make_option
from flexor.types import Model, field_table

# Every primary Model field has an mjModel field of the same name; derived ones are recomputed.
_COPY = tuple(name for name, spec in field_table(Model).items() if not spec["derived"])
_KEYS = ("key_time", "key_qpos", "key_qvel", "key_act", "key_ctrl", "key_mpos", "key_mquat",
         "key_plastic")


def from_mujoco(m: Any, dtype: Any = None, convex: bool = True) -> Model:
  """Returns a flexor Model with the same structure and parameters as ``m`` (a mujoco.MjModel);
  ``convex`` as for :func:`flexor.load_mjcf`."""
  import mujoco  # pylint: disable=import-outside-toplevel

  fields: dict[str, Any] = {}
  for name in _COPY + _KEYS:
    value = np.array(m.stat.meaninertia if name == "stat_meaninertia" else getattr(m, name))
    if name == "tendon_lengthspring" and value.ndim == 1:
      value = value.reshape(-1, 2)
    fields[name] = value
  fields["size_nconmax"] = m.nconmax
  numeric = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_NUMERIC, "max_geom_pairs")
  fields["max_geom_pairs"] = (max(int(m.numeric_data[m.numeric_adr[numeric]]), -1)
                              if numeric >= 0 else -1)
  fields["key_mpos"] = fields["key_mpos"].reshape(m.nkey, m.nmocap, 3)
  fields["key_mquat"] = fields["key_mquat"].reshape(m.nkey, m.nmocap, 4)
  fields["key_plastic"] = fields["key_plastic"].reshape(m.nkey, m.nplastic)
  for kind, obj in (("body", mujoco.mjtObj.mjOBJ_BODY), ("jnt", mujoco.mjtObj.mjOBJ_JOINT),
                    ("geom", mujoco.mjtObj.mjOBJ_GEOM), ("site", mujoco.mjtObj.mjOBJ_SITE),
                    ("cam", mujoco.mjtObj.mjOBJ_CAMERA), ("light", mujoco.mjtObj.mjOBJ_LIGHT),
                    ("actuator", mujoco.mjtObj.mjOBJ_ACTUATOR),
                    ("tendon", mujoco.mjtObj.mjOBJ_TENDON), ("sensor", mujoco.mjtObj.mjOBJ_SENSOR),
                    ("key", mujoco.mjtObj.mjOBJ_KEY)):
    count = {"body": m.nbody, "jnt": m.njnt, "geom": m.ngeom, "site": m.nsite,
             "cam": m.ncam, "light": m.nlight,
             "actuator": m.nactuator, "tendon": m.ntendon, "sensor": m.nsensor,
             "key": m.nkey}[kind]
    fields[f"names_{kind}"] = tuple(mujoco.mj_id2name(m, obj, i) or "" for i in range(count))
  o = m.opt
  option = make_option(
      dtype, timestep=o.timestep, gravity=np.array(o.gravity), wind=np.array(o.wind),
      magnetic=np.array(o.magnetic), density=o.density, viscosity=o.viscosity,
      impratio=o.impratio, tolerance=o.tolerance, ls_tolerance=o.ls_tolerance,
      noslip_tolerance=o.noslip_tolerance,
      ccd_tolerance=o.ccd_tolerance,
      ccd_iterations=o.ccd_iterations, o_margin=o.o_margin,
      o_solref=np.array(o.o_solref), o_solimp=np.array(o.o_solimp),
      o_friction=np.array(o.o_friction), integrator=o.integrator, cone=o.cone,
      jacobian=o.jacobian, solver=o.solver, iterations=o.iterations,
      ls_iterations=o.ls_iterations, noslip_iterations=o.noslip_iterations,
      disableflags=o.disableflags, enableflags=o.enableflags,
      disableactuator=o.disableactuator)
  return assemble(fields, option, dtype, convex)
