"""Model from a compiled ``mujoco.MjModel`` (needs the optional ``mujoco`` package).

flexor's own compiler (``load_mjcf``) is the normal path. This one takes MuJoCo's compiled
primary fields instead, which lets the test suite check the simulation stages independently of
the compiler, and lets users simulate models built with MuJoCo's ``MjSpec``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexor.mjcf.assemble import assemble, make_option
from flexor.types import Model

_COPY = (
    "body_parentid body_pos body_quat body_ipos body_iquat body_mass body_inertia body_gravcomp "
    "body_mocapid body_sameframe geom_sameframe site_sameframe jnt_type jnt_bodyid jnt_pos jnt_axis jnt_group jnt_limited jnt_actfrclimited "
    "jnt_actgravcomp jnt_solref jnt_solimp jnt_stiffness jnt_range jnt_actfrcrange jnt_margin "
    "dof_solref dof_solimp dof_frictionloss dof_armature dof_damping geom_type geom_contype "
    "geom_conaffinity geom_condim geom_bodyid geom_dataid geom_group geom_priority geom_solmix "
    "geom_solref geom_solimp geom_size geom_rbound geom_pos geom_quat geom_friction geom_margin "
    "geom_gap site_bodyid site_pos site_quat site_size actuator_trntype actuator_dyntype "
    "actuator_gaintype actuator_biastype actuator_trnid actuator_actadr actuator_actnum "
    "actuator_ctrllimited actuator_forcelimited actuator_actlimited actuator_actearly "
    "actuator_dynprm actuator_gainprm actuator_biasprm actuator_ctrlrange actuator_forcerange "
    "actuator_actrange actuator_gear actuator_cranklength actuator_lengthrange tendon_num "
    "tendon_adr tendon_limited tendon_range tendon_stiffness tendon_damping tendon_lengthspring "
    "wrap_type wrap_objid wrap_prm eq_type eq_obj1id eq_obj2id eq_active0 eq_data eq_solref "
    "eq_solimp qpos0 qpos_spring mesh_vertadr mesh_vertnum mesh_vert key_time key_qpos key_qvel "
    "key_act key_ctrl key_mpos key_mquat").split()


def from_mujoco(m: Any, dtype: Any = None) -> Model:
  """Returns a flexor Model with the same structure and parameters as ``m`` (a mujoco.MjModel)."""
  import mujoco  # pylint: disable=import-outside-toplevel

  fields: dict[str, Any] = {}
  for name in _COPY:
    value = np.array(getattr(m, name))
    if name == "tendon_lengthspring" and value.ndim == 1:
      value = value.reshape(-1, 2)
    fields[name] = value
  fields["key_mpos"] = fields["key_mpos"].reshape(m.nkey, m.nmocap, 3)
  fields["key_mquat"] = fields["key_mquat"].reshape(m.nkey, m.nmocap, 4)
  for kind, obj in (("body", mujoco.mjtObj.mjOBJ_BODY), ("jnt", mujoco.mjtObj.mjOBJ_JOINT),
                    ("geom", mujoco.mjtObj.mjOBJ_GEOM), ("site", mujoco.mjtObj.mjOBJ_SITE),
                    ("actuator", mujoco.mjtObj.mjOBJ_ACTUATOR),
                    ("tendon", mujoco.mjtObj.mjOBJ_TENDON), ("key", mujoco.mjtObj.mjOBJ_KEY)):
    count = {"body": m.nbody, "jnt": m.njnt, "geom": m.ngeom, "site": m.nsite,
             "actuator": m.nu, "tendon": m.ntendon, "key": m.nkey}[kind]
    fields[f"names_{kind}"] = tuple(mujoco.mj_id2name(m, obj, i) or "" for i in range(count))
  o = m.opt
  option = make_option(
      dtype, timestep=o.timestep, gravity=np.array(o.gravity), wind=np.array(o.wind),
      magnetic=np.array(o.magnetic), density=o.density, viscosity=o.viscosity,
      impratio=o.impratio, tolerance=o.tolerance, o_margin=o.o_margin,
      o_solref=np.array(o.o_solref), o_solimp=np.array(o.o_solimp),
      o_friction=np.array(o.o_friction), integrator=o.integrator, cone=o.cone,
      jacobian=o.jacobian, solver=o.solver, iterations=o.iterations,
      ls_iterations=o.ls_iterations, noslip_iterations=o.noslip_iterations,
      disableflags=o.disableflags, enableflags=o.enableflags)
  return assemble(fields, option, dtype)
