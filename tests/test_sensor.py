"""Sensors (flexor.sensor, flexor.mjcf.compile_sensor) against MuJoCo 4.0's mj_forward.

* Conformance of sensordata per model and sensor type at random states: a model of our own with
  every supported type, each frame object type and reference frame, cutoffs, joint and tendon
  limits, connect and weld constraints and contacts with touch sites of every volume type
  (pyramidal and elliptic cones), and dm_control models with sensors at states reached by
  stepping MuJoCo (so feet and hands touch the floor).
* The compiled sensor fields against MuJoCo's compiler.
* jit and vmap, a gradient of framepos against central differences, DisableBit.SENSOR, and
  MJCFError for an unknown attribute, a dangling reference and unsupported types.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import flexor
import support
from flexor import make_data
from flexor.errors import MJCFError
from flexor.forward import forward
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.types import DisableBit, Model, SensorType

# Relative error |a - b| / (1 + |b|). Position and velocity sensors are short sums of products
# (measured ~1e-15); acceleration, force and touch sensors follow the constraint solve, which
# converges to MuJoCo's solution to its tolerance (measured ~2e-12 on humanoid's contacts).
TOL = 1e-10
NSTATE = 4

_XML = """
<mujoco model="sensors">
  <option timestep="0.005" magnetic="0.1 -0.4 0.3" cone="{cone}"/>
  <default><geom condim="{condim}"/></default>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <site name="world_site" pos="0.1 0.2 0.3" euler="10 20 30"/>
    <body name="arm" pos="0 0 1.2">
      <joint name="hinge" axis="0 1 0" range="-1 1" limited="true" damping="0.1"/>
      <geom name="upper" type="capsule" fromto="0 0 0 0.4 0 0" size="0.05"/>
      <site name="s_upper" pos="0.2 0 0.05" type="box" size="0.06 0.06 0.06" euler="10 20 30"/>
      <body name="fore" pos="0.4 0 0">
        <joint name="slide" type="slide" axis="1 0 0" range="-0.1 0.1" limited="true"/>
        <geom name="fore_geom" type="box" size="0.1 0.04 0.03" pos="0.1 0 0" euler="5 0 10"/>
        <site name="s_fore" pos="0.2 0.01 0" euler="0 30 60"/>
        <body name="wrist" pos="0.2 0 0">
          <joint name="ball" type="ball" range="0 0.5" limited="true"/>
          <geom name="hand" type="sphere" size="0.05" pos="0.05 0.02 0" mass="0.3"/>
          <site name="s_hand" pos="0.05 0 0.01" euler="20 0 -40"/>
        </body>
      </body>
    </body>
    <body name="box" pos="0.8 0 0.1">
      <freejoint name="box_free"/>
      <geom name="box_geom" type="box" size="0.1 0.15 0.1"/>
      <site name="t_box" type="box" size="0.12 0.17 0.04" pos="0 0 -0.08"/>
      <site name="t_sphere" type="sphere" size="0.25"/>
      <site name="t_far" type="sphere" size="0.05" pos="0 0 0.3"/>
    </body>
    <body name="ball_body" pos="-0.6 0 0.1">
      <freejoint/>
      <geom name="ball_geom" type="sphere" size="0.1"/>
      <site name="t_ellipsoid" type="ellipsoid" size="0.12 0.1 0.05" pos="0 0 -0.1"/>
      <site name="t_cylinder" type="cylinder" size="0.05 0.02" pos="0 0 -0.13"/>
      <site name="t_capsule" type="capsule" size="0.03 0.1" pos="0 0 -0.2" euler="0 90 0"/>
    </body>
    <body name="pend" pos="0 1 1">
      <freejoint/>
      <geom name="pend_geom" type="capsule" fromto="0 0 0 0 0 -0.4" size="0.03"/>
      <site name="s_pend" pos="0 0 -0.1" euler="30 0 0"/>
    </body>
    <body name="welded" pos="0 -1 1">
      <freejoint/>
      <geom type="box" size="0.05 0.05 0.05"/>
      <site name="s_welded" pos="0.05 0 0"/>
    </body>
  </worldbody>
  <tendon>
    <fixed name="fixed" limited="true" range="-0.05 0.3">
      <joint joint="hinge" coef="1"/><joint joint="slide" coef="0.5"/>
    </fixed>
    <spatial name="spatial"><site site="s_upper"/><site site="s_hand"/></spatial>
  </tendon>
  <equality>
    <connect body1="pend" anchor="0 0 0"/>
    <weld body1="welded" body2="pend" torquescale="2"/>
  </equality>
  <actuator>
    <motor name="m_hinge" joint="hinge" gear="2"/>
    <position name="p_slide" joint="slide" kp="10"/>
    <motor name="m_fixed" tendon="fixed"/>
    <general name="g_fixed" tendon="fixed" gainprm="3"/>
  </actuator>
  <sensor>
    <jointpos joint="hinge"/>
    <jointpos joint="slide" cutoff="0.05"/>
    <jointvel joint="hinge" cutoff="0.5"/>
    <tendonpos tendon="fixed"/>
    <tendonpos tendon="spatial"/>
    <tendonvel tendon="spatial"/>
    <actuatorpos actuator="m_hinge"/>
    <actuatorvel actuator="p_slide"/>
    <actuatorfrc actuator="p_slide"/>
    <actuatorfrc actuator="m_fixed" cutoff="0.2"/>
    <jointactuatorfrc joint="hinge"/>
    <tendonactuatorfrc tendon="fixed"/>
    <ballquat joint="ball"/>
    <ballangvel joint="ball"/>
    <jointlimitpos joint="hinge"/>
    <jointlimitpos joint="ball"/>
    <jointlimitvel joint="slide"/>
    <jointlimitfrc joint="hinge"/>
    <jointlimitfrc joint="ball"/>
    <tendonlimitpos tendon="fixed"/>
    <tendonlimitvel tendon="fixed"/>
    <tendonlimitfrc tendon="fixed"/>
    <framepos objtype="body" objname="fore"/>
    <framepos objtype="xbody" objname="fore" reftype="site" refname="s_upper"/>
    <framepos objtype="geom" objname="hand" reftype="body" refname="box" cutoff="0.3"/>
    <framepos objtype="site" objname="world_site"/>
    <framequat objtype="body" objname="wrist"/>
    <framequat objtype="geom" objname="fore_geom" reftype="xbody" refname="wrist"/>
    <framequat objtype="site" objname="s_hand" reftype="geom" refname="upper"/>
    <framexaxis objtype="site" objname="s_fore"/>
    <frameyaxis objtype="xbody" objname="box" reftype="site" refname="s_hand"/>
    <framezaxis objtype="geom" objname="fore_geom" reftype="body" refname="arm"/>
    <framelinvel objtype="site" objname="s_hand"/>
    <framelinvel objtype="body" objname="wrist" reftype="site" refname="s_upper"/>
    <framelinvel objtype="site" objname="world_site" reftype="xbody" refname="fore"/>
    <frameangvel objtype="geom" objname="hand" reftype="xbody" refname="box"/>
    <frameangvel objtype="xbody" objname="ball_body"/>
    <framelinacc objtype="site" objname="s_hand"/>
    <framelinacc objtype="body" objname="box"/>
    <frameangacc objtype="geom" objname="fore_geom"/>
    <frameangacc objtype="site" objname="world_site"/>
    <subtreecom body="arm"/>
    <subtreecom body="world"/>
    <subtreelinvel body="fore"/>
    <subtreelinvel body="world"/>
    <subtreeangmom body="arm"/>
    <subtreeangmom body="world"/>
    <accelerometer site="s_fore"/>
    <accelerometer site="s_pend"/>
    <velocimeter site="s_hand"/>
    <gyro site="s_fore" cutoff="1"/>
    <force site="s_fore"/>
    <force site="s_pend"/>
    <force site="s_welded"/>
    <torque site="s_hand"/>
    <torque site="s_welded"/>
    <torque site="t_box"/>
    <magnetometer site="s_hand"/>
    <touch site="t_box"/>
    <touch site="t_sphere" cutoff="5"/>
    <touch site="t_far"/>
    <touch site="t_ellipsoid"/>
    <touch site="t_cylinder"/>
    <touch site="t_capsule"/>
    <contact/>
    <contact geom1="box_geom" data="found force torque dist pos normal tangent" num="5"
             reduce="mindist"/>
    <contact body2="box" geom1="floor" data="found force torque pos" reduce="netforce"/>
    <contact subtree1="world" num="3" data="force normal" reduce="maxforce"/>
    <contact site="t_box" data="found dist pos" num="2"/>
    <contact geom2="box_geom" data="found force torque normal tangent linvel angvel" num="6"/>
    <contact body1="ball_body" body2="world" data="force linvel angvel" num="2"/>
    <contact subtree2="arm" data="found"/>
    <contact subtree1="box" subtree2="box" data="found"/>
    <contact body1="pend" data="found force pos normal tangent" reduce="netforce"/>
    <e_kinetic/>
    <clock/>
  </sensor>
</mujoco>
"""

OWN = {"own/pyramidal": _XML.format(cone="pyramidal", condim=3),
       "own/elliptic": _XML.format(cone="elliptic", condim=6)}
# the elliptic model's solver program takes ~100 s to compile: slow tier
OWN_SLOW = ("own/elliptic",)
DMC = ("dmc/walker",)
DMC_SLOW = ("dmc/humanoid", "dmc/finger", "dmc/hopper", "dmc/dog", "dmc/manipulator", "dmc/stacker", "dmc/swimmer", "dmc/fish",
            "dmc/cheetah", "dmc/quadruped", "dmc/humanoid_CMU")


def _own_states(m: mujoco.MjModel, rng: np.random.Generator) -> list[mujoco.MjData]:
  """Random poses of our model: joints around and past their limits, the free box and ball
  resting slightly inside the floor, pendulum and welded body off their constraints."""
  states = []
  for _ in range(NSTATE):
    d = mujoco.MjData(m)
    d.qpos[0] = rng.uniform(-1.2, 1.2)
    d.qpos[1] = rng.uniform(-0.15, 0.15)
    axis = rng.standard_normal(3)
    angle = rng.uniform(0.0, 0.8)
    d.qpos[2:6] = np.concatenate([[np.cos(angle / 2)],
                                  np.sin(angle / 2) * axis / np.linalg.norm(axis)])
    quat = rng.standard_normal(4) * np.array([5.0, 0.3, 0.3, 0.3])
    d.qpos[6:13] = np.concatenate([[0.8, 0.0, 0.1 - rng.uniform(0, 0.003)],
                                   quat / np.linalg.norm(quat)])
    quat = rng.standard_normal(4)
    d.qpos[13:20] = np.concatenate([[-0.6, 0.0, 0.1 - rng.uniform(0, 0.003)],
                                    quat / np.linalg.norm(quat)])
    d.qpos[20:27] = np.concatenate([[0.02, 1.0, 0.98], [1.0, 0.05, 0.0, 0.0]])
    d.qpos[27:34] = np.concatenate([[0.0, -1.01, 1.0], [1.0, 0.0, 0.03, 0.0]])
    d.qvel[:] = rng.standard_normal(m.nv)
    d.ctrl[:] = rng.uniform(-1, 1, m.nu)
    d.time = rng.uniform(0, 10)
    mujoco.mj_forward(m, d)
    states.append(d)
  return states


def _stepped_states(m: mujoco.MjModel, rng: np.random.Generator) -> list[mujoco.MjData]:
  """States reached by stepping MuJoCo under random controls, with a random velocity kick."""
  d = mujoco.MjData(m)
  states = []
  for _ in range(NSTATE):
    for _ in range(100):
      d.ctrl[:] = rng.uniform(-1, 1, m.nu)
      mujoco.mj_step(m, d)
    d.qvel[:] += 0.3 * rng.standard_normal(m.nv)
    mujoco.mj_forward(m, d)
    states.append(mujoco.MjData(m))
    for name in ("qpos", "qvel", "act", "ctrl", "sensordata"):
      getattr(states[-1], name)[:] = getattr(d, name)
    states[-1].time = d.time
  return states


def _load(name: str) -> tuple[mujoco.MjModel, Model]:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # narrow-phase pairs flexor leaves out
    if name in OWN:
      return mujoco.MjModel.from_xml_string(OWN[name]), flexor.load_mjcf_string(OWN[name])
    path = support.model_paths()[name]
    return mujoco.MjModel.from_xml_path(path), flexor.load_mjcf(path)


_forward = jax.jit(forward)


@functools.cache
def _case(name: str) -> tuple[mujoco.MjModel, Model, np.ndarray, np.ndarray]:
  """(MuJoCo model, flexor model, flexor sensordata, MuJoCo sensordata), (NSTATE, nsensordata)."""
  mj, fm = _load(name)
  rng = np.random.default_rng(0)
  states = _own_states(mj, rng) if name in OWN else _stepped_states(mj, rng)
  ours, theirs = [], []
  for s in states:
    d = make_data(fm)
    d = d.replace(**{k: jnp.asarray(getattr(s, k), d.qpos.dtype) for k in ("qpos", "qvel", "act",
                                                                           "ctrl", "time")})
    ours.append(np.asarray(_forward(fm, d).sensordata))
    theirs.append(np.array(s.sensordata))
  return mj, fm, np.stack(ours), np.stack(theirs)


def _types(name: str) -> list[str]:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    m = mujoco.MjModel.from_xml_string(OWN[name]) if name in OWN else \
        mujoco.MjModel.from_xml_path(support.model_paths()[name])
  return sorted({SensorType(int(t)).name.lower() for t in m.sensor_type})


def _cases():
  cases = []
  default = tuple(n for n in OWN if n not in OWN_SLOW) + DMC
  for names, marks in ((default, ()), (OWN_SLOW + DMC_SLOW, pytest.mark.slow)):
    for name in names:
      cases += [pytest.param(name, t, id=f"{name}-{t}", marks=marks) for t in _types(name)]
  return cases


@pytest.mark.parametrize("model,sensor", _cases())
def test_conformance(model: str, sensor: str):
  mj, _, ours, theirs = _case(model)
  for i in np.flatnonzero(mj.sensor_type == SensorType[sensor.upper()]):
    adr, dim = mj.sensor_adr[i], mj.sensor_dim[i]
    err = support.relerr(ours[:, adr:adr + dim], theirs[:, adr:adr + dim])
    assert err <= TOL, (f"{model}: {sensor} sensor {i} relative error {err:.2e}\n"
                        f"{ours[:, adr:adr + dim]}\n{theirs[:, adr:adr + dim]}")


@pytest.mark.parametrize("model", ["own/pyramidal", *DMC] + [
    pytest.param(name, marks=pytest.mark.slow) for name in OWN_SLOW + DMC_SLOW])
def test_compiled_fields(model: str):
  """sensor_* fields, sizes and names against MuJoCo's compiler."""
  mj, fm = _load(model)
  assert (fm.nsensor, fm.nsensordata) == (mj.nsensor, mj.nsensordata)
  for field in ("type", "datatype", "needstage", "objtype", "objid", "reftype", "refid", "dim",
                "adr", "cutoff", "noise", "intprm"):
    np.testing.assert_array_equal(np.asarray(getattr(fm, f"sensor_{field}")),
                                  getattr(mj, f"sensor_{field}"), err_msg=field)
  names = tuple(mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_SENSOR, i) or ""
                for i in range(mj.nsensor))
  assert fm.names_sensor == names


def test_own_model_exercises_contacts_and_limits():
  """The conformance states of our model have touching contacts and active limits."""
  mj, fm, ours, _ = _case("own/pyramidal")
  touch = np.flatnonzero(mj.sensor_type == SensorType.TOUCH)
  values = ours[:, mj.sensor_adr[touch]]
  assert np.count_nonzero(values > 0) >= NSTATE and np.count_nonzero(values == 0) >= NSTATE
  limit = np.flatnonzero(mj.sensor_type == SensorType.JOINTLIMITFRC)
  assert np.count_nonzero(ours[:, mj.sensor_adr[limit]]) > 0
  assert fm.nconmax and fm.neq


@pytest.mark.slow
def test_touch_rays_from_pushing_contacts_match_all_pairs(monkeypatch):
  """Touch sensors cast rays only from the contacts that push, gathered into a fixed number of
  slots per site type, slot-fuls at a time while some world has pairs left. Our model's
  conformance states under vmap, with 1 and 2 slots per type (states with more pushing pairs
  take several rounds), give forward's sensordata again."""
  mj, fm = _load("own/pyramidal")
  states = _own_states(mj, np.random.default_rng(0))
  d = make_data(fm)
  batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[_forward(fm, d.replace(
      **{k: jnp.asarray(getattr(s, k), d.qpos.dtype) for k in ("qpos", "qvel", "act", "ctrl",
                                                             "time")})) for s in states])
  want = np.asarray(batch.sensordata)
  touch = mj.sensor_adr[mj.sensor_type == SensorType.TOUCH]
  assert np.count_nonzero(want[:, touch] > 0) >= NSTATE
  for capacity in (1, 2):
    monkeypatch.setattr(flexor.constraint, "active_capacity", lambda n, c=capacity: c)
    got = jax.jit(jax.vmap(flexor.sensor.sensor_acc, in_axes=(None, 0)))(fm, batch).sensordata
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


_GRAD_XML = """
<mujoco>
  <worldbody>
    <body name="a"><joint name="h1" axis="0 1 0"/>
      <geom fromto="0 0 0 0.3 0 0" size="0.03" type="capsule"/>
      <body pos="0.3 0 0"><joint name="h2" axis="1 0 1"/><geom size="0.05" pos="0.1 0 0"/>
        <site name="tip" pos="0.2 0.05 0"/></body></body>
    <site name="ref" pos="0.1 0.2 0.3" euler="0 40 20"/>
  </worldbody>
  <sensor><framepos objtype="site" objname="tip" reftype="site" refname="ref"/>
    <framelinvel objtype="site" objname="tip"/><clock name="clock"/></sensor>
</mujoco>
"""


def test_vmap_equals_loop_and_named_lookup():
  fm = flexor.load_mjcf_string(_GRAD_XML)
  rng = np.random.default_rng(1)
  qpos, qvel = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
  batch = make_data(fm, batch_shape=(3,)).replace(qpos=jnp.asarray(qpos), qvel=jnp.asarray(qvel),
                                                  time=jnp.arange(3.0))
  out = jax.vmap(_forward, in_axes=(None, 0))(fm, batch).sensordata
  for k in range(3):
    one = _forward(fm, make_data(fm).replace(qpos=jnp.asarray(qpos[k]), qvel=jnp.asarray(qvel[k]),
                                             time=jnp.asarray(float(k))))
    np.testing.assert_allclose(np.asarray(out[k]), np.asarray(one.sensordata), rtol=1e-12,
                               atol=1e-12)
  clock = fm.sensor_adr[fm.name2id("sensor", "clock")]
  np.testing.assert_array_equal(np.asarray(out[:, clock]), [0.0, 1.0, 2.0])


@pytest.mark.parametrize("integrator", ["Euler", "RK4"])
def test_sensordata_after_step(integrator: str):
  """After mj_step, sensordata holds the values of the step's first forward: RK4's
  intermediate stages skip the sensors."""
  xml = _GRAD_XML.replace("<worldbody>", f"<option integrator='{integrator}'/><worldbody>")
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  md.qpos[:], md.qvel[:] = (0.3, -0.5), (1.0, 2.0)
  fm = flexor.load_mjcf_string(xml)
  d = make_data(fm).replace(qpos=support.snapshot(md.qpos), qvel=support.snapshot(md.qvel))
  mujoco.mj_step(mj, md)
  ours = jax.jit(flexor.step)(fm, d).sensordata
  np.testing.assert_allclose(np.asarray(ours), md.sensordata, rtol=TOL, atol=TOL)


def test_disabled_sensors_leave_sensordata():
  fm = flexor.load_mjcf_string(_GRAD_XML.replace("<worldbody>", "<option><flag sensor='disable'/>"
                                                 "</option><worldbody>"))
  assert fm.opt.disabled(DisableBit.SENSOR)
  d = _forward(fm, make_data(fm).replace(qvel=jnp.ones(2), time=jnp.asarray(3.0)))
  assert not np.any(np.asarray(d.sensordata))


def test_framepos_gradient_matches_central_differences():
  fm = flexor.load_mjcf_string(_GRAD_XML)
  d0 = make_data(fm)

  @jax.jit
  def pos(qpos):
    return flexor.forward(fm, d0.replace(qpos=qpos, qvel=jnp.ones_like(d0.qvel))).sensordata[:3]

  qpos = jnp.array([0.3, -0.7])
  jac = np.asarray(jax.jit(jax.jacrev(pos))(qpos))
  eps = 1e-6
  fd = np.stack([(np.asarray(pos(qpos.at[i].add(eps))) - np.asarray(pos(qpos.at[i].add(-eps))))
                 / (2 * eps) for i in range(2)], axis=1)
  np.testing.assert_allclose(jac, fd, atol=1e-8)
  # framelinvel = d(framepos in world)/dt; with qvel = 1 its value is the sum of the columns
  # of the world-frame position Jacobian
  out = flexor.forward(fm, d0.replace(qpos=qpos, qvel=jnp.ones(2)))
  mat = np.asarray(out.site_xmat[fm.name2id("site", "ref")])
  np.testing.assert_allclose(mat @ jac.sum(axis=1), np.asarray(out.sensordata[3:6]), atol=1e-8)


def _sensor_xml(sensor: str) -> str:
  return ("<mujoco>\n<asset><mesh name='c' vertex='0 0 0 1 0 0 0 1 0 0 0 1'/></asset>"
          "<worldbody>\n<body name='b'>\n<joint name='j'/>\n"
          "<geom name='g' size='0.1'/>\n<site name='s'/>\n</body>\n"
          "<site name='m' type='mesh' mesh='c'/></worldbody>\n<sensor>\n"
          f"{sensor}\n</sensor>\n</mujoco>")


@pytest.mark.parametrize("sensor,element,attribute,match", [
    ("<jointpos joint='j' bogus='1'/>", "jointpos", "bogus", "bogus"),
    ("<jointpos joint='nope'/>", "jointpos", "joint", "unknown joint 'nope'"),
    ("<framepos objtype='site' objname='nope'/>", "framepos", "objname", "unknown site"),
    ("<framepos objtype='site' objname='s' reftype='geom' refname='nope'/>", "framepos",
     "refname", "unknown geom"),
    ("<distance geom1='g' geom2='g'/>", "distance", None, "must be different"),
    ("<distance geom1='g' body1='b' geom2='g'/>", "distance", "geom1", "exactly one"),
    ("<fromto body2='b'/>", "fromto", "geom1", "exactly one"),
    ("<framepos objtype='camera' objname='c'/>", "framepos", "objname", "unknown camera 'c'"),
    ("<camprojection site='s'/>", "camprojection", "camera", "required attribute missing"),
    ("<rangefinder/>", "rangefinder", "site", "exactly one of 'site' and 'camera'"),
    ("<rangefinder site='s' camera='c'/>", "rangefinder", "site", "exactly one"),
    ("<jointpos joint='j' noise='-1'/>", "jointpos", "noise", "negative noise"),
    ("<framequat objtype='site' objname='s' cutoff='1'/>", "framequat", "cutoff", "cutoff"),
    ("<ballquat joint='j'/>", "ballquat", "joint", "ball"),
    ("<jointlimitpos joint='j'/>", "jointlimitpos", "joint", "limited"),
    ("<jointpos joint='j' delay='0.1'/>", "jointpos", "delay", "history buffer"),
    ("<jointpos joint='j' nsample='2' interval='-0.1'/>", "jointpos", "interval",
     "negative interval"),
    ("<jointpos joint='j' nsample='2' interval='0.1 0.01'/>", "jointpos", "interval",
     "positive phase"),
    ("<jointpos joint='j' nsample='2' interval='0.1 -0.1'/>", "jointpos", "interval",
     "greater than -period"),
    ("<jointpos joint='j' nsample='2' interval='0.1 0 1'/>", "jointpos", "interval",
     "1 to 2 numbers"),
    ("<jointpos joint='j' nsample='2' interp='spline'/>", "jointpos", "interp",
     "invalid keyword"),
    ("<contact geom1='g' body1='b'/>", "contact", "body1", "at most one"),
    ("<contact subtree2='nope'/>", "contact", "subtree2", "unknown body"),
    ("<contact num='0'/>", "contact", "num", "must be positive"),
    ("<contact data='force found'/>", "contact", "data", "in order"),
    ("<contact data='pos grip'/>", "contact", "data", "invalid keyword 'grip'"),
    ("<contact reduce='sum'/>", "contact", "reduce", "invalid keyword"),
    ("<contact data='linvel' reduce='netforce'/>", "contact", "reduce", "incompatible"),
    ("<touch site='m'/>", "touch", "site", "mesh site"),
    ("<user/>", "user", "dim", "required attribute missing"),
    ("<user dim='1' objtype='joint'/>", "user", "objtype", "together"),
    ("<user dim='1' objtype='light' objname='l'/>", "user", "objtype", "not supported"),
])
def test_errors(sensor: str, element: str, attribute: str | None, match: str):
  with pytest.raises(MJCFError, match=match) as info:
    flexor.load_mjcf_string(_sensor_xml(sensor))
  assert (info.value.line, info.value.element, info.value.attribute) == (10, element, attribute)


def test_repeated_name():
  with pytest.raises(MJCFError, match="repeated sensor name"):
    flexor.load_mjcf_string(_sensor_xml("<jointpos name='x' joint='j'/>\n"
                                        "<jointvel name='x' joint='j'/>"))


_RANGEFINDERS = """
<mujoco>
  <asset>
    <hfield name="h" nrow="3" ncol="4" size="1 1 .3 .1"
            elevation="0 .2 .4 .6  1 .8 .6 .4  .1 .1 .9 .9"/>
    <material name="glass" rgba="1 1 1 0"/>
  </asset>
  <worldbody>
    <geom type="plane" size="4 4 .1" pos="0 0 -1"/>
    <geom type="hfield" hfield="h" pos="2 0 -.8"/>
    <geom type="box" size=".3 .3 .3" pos="0 0 -.5" material="glass"/>
    <body pos="0 0 .5">
      <freejoint/>
      <geom type="capsule" size=".05 .2" euler="0 90 0"/>
      <site name="down" pos=".05 .02 0" euler="180 0 0"/>
      <site name="up" pos="-.1 0 0"/>
      <site name="slant" pos="0 .1 0" euler="0 140 0"/>
      <body pos="0 0 -.3">
        <joint type="hinge" axis="1 0 0"/>
        <geom type="cylinder" size=".1 .05" mass=".1"/>
      </body>
    </body>
  </worldbody>
  <sensor>
    <rangefinder site="down"/>
    <rangefinder site="down" data="dist normal"/>
    <rangefinder site="up" data="dist dir origin point normal depth"/>
    <rangefinder site="slant" data="dir point normal depth"/>
    <rangefinder site="slant" cutoff=".5"/>
  </sensor>
</mujoco>
"""


@pytest.mark.slow
def test_rangefinder_matches_mujoco():
  """Site rangefinders with each data field, hits on the field, the plane and a child body's
  cylinder, misses (-1), a cutoff, the transparent box ignored and the site's body excluded."""
  mj = mujoco.MjModel.from_xml_string(_RANGEFINDERS)
  fm = flexor.load_mjcf_string(_RANGEFINDERS)
  np.testing.assert_array_equal(fm.sensor_intprm, mj.sensor_intprm)
  np.testing.assert_array_equal(fm.sensor_adr, mj.sensor_adr)
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(1)
  ours, theirs = [], []
  for _ in range(12):
    md.qpos[:3] = rng.uniform([-.5, -.5, .2], [2.5, .5, .8])
    quat = rng.standard_normal(4)
    md.qpos[3:7] = quat / np.linalg.norm(quat)
    md.qpos[7] = rng.uniform(-2, 2)
    mujoco.mj_forward(mj, md)
    d = make_data(fm).replace(qpos=support.snapshot(md.qpos))
    ours.append(np.asarray(_forward(fm, d).sensordata))
    theirs.append(md.sensordata.copy())
  ours, theirs = np.stack(ours), np.stack(theirs)
  np.testing.assert_allclose(ours, theirs, rtol=TOL, atol=TOL)
  for column in (5, 28):                     # dist of "up", depth of "slant"
    assert np.any(theirs[:, column] < 0) and np.any(theirs[:, column] > 0)


_ENERGY = """
<mujoco>
  <option><flag energy="{energy}"/></option>
  <worldbody>
    <body pos="0 0 1">
      <freejoint/>
      <geom size=".1" mass="2"/>
      <body pos=".3 0 0">
        <joint name="h" axis="0 1 0" stiffness="3 1 2" springref=".2" springyield="{yld}"/>
        <geom size=".05" mass=".5"/>
        <site name="s1"/>
        <body pos=".2 0 0">
          <joint type="ball" stiffness="2 .5 .7"/>
          <geom size=".04" mass=".3"/>
          <body pos=".1 0 0">
            <joint type="slide" stiffness="5" springref=".05"/>
            <geom size=".03" mass=".2"/>
            <site name="s3"/>
          </body>
        </body>
      </body>
    </body>
    <body pos="0 2 1">
      <joint type="free" stiffness="4 1 2"/>
      <geom size=".1"/>
    </body>
  </worldbody>
  <tendon>
    <spatial stiffness="7 3 1" springlength=".25 .3"><site site="s1"/><site site="s3"/></spatial>
    <fixed stiffness="2" springlength=".1"><joint joint="h" coef="1"/></fixed>
  </tendon>
  <sensor>{sensors}</sensor>
</mujoco>
"""


@pytest.mark.parametrize("energy,sensors,yld", [
    ("enable", "", 0), ("disable", "<e_potential/><e_kinetic/>", 0), ("enable", "", 0.5),
    ("disable", "<e_kinetic/>", 0)])
def test_energy_matches_mujoco(energy: str, sensors: str, yld: float):
  """d.energy and the energy sensors over 60 steps, as MuJoCo: gravity, joint springs of every
  type with polynomial profiles, plastic references (springyield), a tendon's dead band; with
  the energy flag, or only where e_potential computes them (without it, zeros)."""
  xml = _ENERGY.format(energy=energy, sensors=sensors, yld=yld)
  mj, fm = mujoco.MjModel.from_xml_string(xml), flexor.load_mjcf_string(xml)
  md, d = mujoco.MjData(mj), make_data(fm)
  rng = np.random.default_rng(0)
  step = jax.jit(flexor.step)
  for i in range(60):
    if i % 20 == 0:
      md.qvel[:] = rng.standard_normal(mj.nv)
      d = d.replace(qvel=support.snapshot(md.qvel))
    mujoco.mj_step(mj, md)
    d = step(fm, d)
    np.testing.assert_allclose(np.asarray(d.energy), md.energy, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(d.sensordata), md.sensordata, rtol=1e-12, atol=1e-12)
  assert (md.energy[0] != 0) == (energy == "enable" or "e_potential" in sensors)


def _sensordata_at(mj: mujoco.MjModel, fm: Model, qpos: np.ndarray):
  """Sensordata (n, nsensordata) of flexor (jit and vmap over the states) and MuJoCo at qpos."""
  ours = jax.jit(jax.vmap(lambda q: _forward(fm, make_data(fm).replace(qpos=q)).sensordata))(
      jnp.asarray(qpos))
  md, theirs = mujoco.MjData(mj), []
  for q in qpos:
    md.qpos[:] = q
    mujoco.mj_forward(mj, md)
    theirs.append(md.sensordata.copy())
  return np.asarray(ours), np.stack(theirs)


_INSIDE = """
<mujoco>
  <asset>
    <mesh name="hull" scale=".6 .4 .5" vertex="0 0 0  1 0 0  0 1 0  0 0 1  1 1 .5  .2 .9 .8"/>
  </asset>
  <worldbody>
    <site name="sphere" type="sphere" size=".3"/>
    <site name="mesh" type="mesh" mesh="hull" pos="-.2 -.1 0" euler="10 20 30"/>
    <site name="capsule" type="capsule" size=".2 .3" pos=".2 0 0" euler="20 30 0"/>
    <site name="ellipsoid" type="ellipsoid" size=".3 .2 .4" euler="0 10 20"/>
    <site name="cylinder" type="cylinder" size=".25 .2" euler="40 0 10"/>
    <site name="box" type="box" size=".3 .2 .25" euler="5 15 25"/>
    <body name="a" pos="0 0 .1">
      <freejoint/>
      <geom name="ga" size=".05" pos=".1 0 0"/>
      <site name="sa" pos="0 .1 0"/>
      <body name="massless" pos=".1 .1 0">
        <body pos=".05 0 0"><geom size=".01" pos=".02 0 0"/></body>
      </body>
    </body>
  </worldbody>
  <sensor>{sensors}</sensor>
</mujoco>
"""


def test_user_sensors_are_zeros_as_mujoco_leaves_them():
  """``<user>`` sensors compile to MuJoCo's fields (object, dim, stage, datatype, cutoff) and,
  without MuJoCo's mjcb_sensor callback, read zero at every stage, between sensors that do
  compute."""
  xml = _sensor_xml(
      "<user dim='3' needstage='vel' datatype='positive' objtype='site' objname='s' cutoff='2'/>"
      "<user dim='2'/><jointpos joint='j'/><user dim='0'/>"
      "<user dim='1' objtype='joint' objname='j' needstage='pos'/><user dim='1' needstage='none'/>"
      "<jointvel joint='j'/>")
  mj, fm = mujoco.MjModel.from_xml_string(xml), flexor.load_mjcf_string(xml)
  for field in ("type", "datatype", "needstage", "objtype", "objid", "dim", "adr", "cutoff"):
    np.testing.assert_array_equal(getattr(fm, f"sensor_{field}"), getattr(mj, f"sensor_{field}"))
  qpos = np.array([[0.3], [-0.2]])
  ours, theirs = _sensordata_at(mj, fm, qpos)
  np.testing.assert_array_equal(ours, theirs)


def test_insidesite_matches_mujoco():
  """insidesite for every site volume and object type (a massless body by its subtree's centre
  of mass), over random poses in and out of the sites; a mesh site's volume is its mesh's
  convex hull, placed in the site's frame by the mesh's offset."""
  sensors = "".join(f'<insidesite site="{site}" objtype="{kind}" objname="{name}"/>'
                    for site in ("sphere", "capsule", "ellipsoid", "cylinder", "box", "mesh")
                    for kind, name in (("body", "a"), ("xbody", "a"), ("geom", "ga"),
                                       ("site", "sa"), ("body", "massless")))
  xml = _INSIDE.format(sensors=sensors)
  mj, fm = mujoco.MjModel.from_xml_string(xml), flexor.load_mjcf_string(xml)
  for field in ("type", "datatype", "needstage", "objtype", "objid", "reftype", "refid"):
    np.testing.assert_array_equal(getattr(fm, f"sensor_{field}"), getattr(mj, f"sensor_{field}"))
  np.testing.assert_allclose(fm.site_size, mj.site_size, rtol=1e-6)
  rng = np.random.default_rng(0)
  qpos = np.tile(mj.qpos0, (60, 1))
  qpos[:, :3] = rng.uniform(-.45, .45, (60, 3))
  quat = rng.standard_normal((60, 4))
  qpos[:, 3:7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
  ours, theirs = _sensordata_at(mj, fm, qpos)
  np.testing.assert_array_equal(ours, theirs)
  assert 0.05 < theirs.mean() < 0.95


_DISTANCES = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="3 3 .1"/>
    <body name="a" pos="0 0 .5">
      <freejoint/>
      <geom name="s" size=".1"/>
      <geom name="c" type="capsule" size=".05 .2" pos=".3 0 0" euler="0 70 0"/>
      <geom name="b" type="box" size=".1 .15 .05" pos="-.3 0 0" euler="10 20 30"/>
    </body>
    <body name="z" pos=".2 .4 .4">
      <freejoint/>
      <geom name="s2" size=".12"/>
      <geom name="y" type="cylinder" size=".1 .1" pos="0 .3 0"/>
      <geom name="e" type="ellipsoid" size=".1 .1 .2" pos="0 -.3 0"/>
    </body>
  </worldbody>
  <sensor>{sensors}</sensor>
</mujoco>
"""


def _two_free_bodies(mj: mujoco.MjModel, seed: int, n: int = 40) -> np.ndarray:
  """n random poses (n, nq) of two free bodies: the first above the floor, the second within
  0.4 of it, both randomly turned."""
  rng = np.random.default_rng(seed)
  qpos = np.tile(mj.qpos0, (n, 1))
  qpos[:, :3] = rng.uniform([-.3, -.3, 0], [.3, .3, .6], (n, 3))
  qpos[:, 7:10] = qpos[:, :3] + rng.uniform(-.4, .4, (n, 3))
  for adr in (3, 10):
    quat = rng.standard_normal((n, 4))
    qpos[:, adr:adr + 4] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
  return qpos


def test_geom_distance_sensors_match_mujoco():
  """distance, normal and fromto sensors between geoms and bodies of the primitive pair types,
  within their cutoffs and beyond (the cutoff, zeros), deep penetrations clipped by the cutoff,
  over random poses."""
  sensors = """
    <distance geom1="s" geom2="s2" cutoff="1"/> <distance geom1="floor" geom2="c" cutoff=".6"/>
    <normal geom1="c" geom2="s2" cutoff="2"/> <fromto geom1="y" geom2="s" cutoff="1"/>
    <fromto body1="a" geom2="floor" cutoff=".7"/> <distance body1="a" geom2="s2" cutoff=".5"/>
    <fromto geom1="b" geom2="floor" cutoff="1"/> <distance geom1="c" geom2="b" cutoff=".1"/>
    <normal geom1="floor" geom2="y" cutoff="3"/> <distance geom1="s2" geom2="c" cutoff=".3"/>
    <fromto geom1="b" geom2="s2" cutoff="1"/> <distance geom1="floor" geom2="s" cutoff=".05"/>"""
  xml = _DISTANCES.format(sensors=sensors)
  mj, fm = mujoco.MjModel.from_xml_string(xml), flexor.load_mjcf_string(xml)
  for field in ("type", "datatype", "needstage", "objtype", "objid", "reftype", "refid", "dim"):
    np.testing.assert_array_equal(getattr(fm, f"sensor_{field}"), getattr(mj, f"sensor_{field}"))
  ours, theirs = _sensordata_at(mj, fm, _two_free_bodies(mj, seed=0))
  np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-10)
  dist = theirs[:, mj.sensor_adr[mj.sensor_type == SensorType.GEOMDIST]]
  cutoff = mj.sensor_cutoff[mj.sensor_type == SensorType.GEOMDIST]
  assert np.any(dist < cutoff) and np.any(dist == cutoff) and np.any(dist == -cutoff)


_CONVEX_DISTANCES = """
<mujoco>
  <default>
    <geom contype="0" conaffinity="0"/>  <!-- distance sensors measure geoms that do not collide -->
  </default>
  <asset>
    <mesh name="wedge" vertex="0 0 0  .2 0 0  0 .2 0  0 0 .2  .2 .2 0" scale="1 .8 1.2"/>
  </asset>
  <worldbody>
    <body name="a" pos="0 0 .5">
      <freejoint/>
      <geom name="s" size=".1"/>
      <geom name="c" type="capsule" size=".05 .2" pos=".3 0 0" euler="0 70 0"/>
      <geom name="b" type="box" size=".1 .15 .05" pos="-.3 0 0" euler="10 20 30"/>
      <geom name="m" type="mesh" mesh="wedge" pos="0 .3 0"/>
    </body>
    <body name="z" pos=".2 .4 .4">
      <freejoint/>
      <geom name="y" type="cylinder" size=".1 .1" pos="0 .3 0"/>
      <geom name="e" type="ellipsoid" size=".1 .13 .2" pos="0 -.3 0"/>
      <geom name="b2" type="box" size=".08 .05 .12"/>
    </body>
  </worldbody>
  <sensor>
    <distance geom1="s" geom2="e" cutoff="1"/> <fromto geom1="e" geom2="b" cutoff="1"/>
    <normal geom1="y" geom2="b" cutoff="2"/> <fromto geom1="c" geom2="y" cutoff=".5"/>
    <distance geom1="b" geom2="b2" cutoff="1"/> <fromto geom1="m" geom2="e" cutoff="1"/>
    <fromto geom1="b2" geom2="m" cutoff="1"/> <distance geom1="m" geom2="y" cutoff=".2"/>
    <fromto body1="a" body2="z" cutoff=".8"/> <distance body1="z" body2="a" cutoff="2"/>
  </sensor>
</mujoco>
"""


@pytest.mark.slow
def test_geom_distance_sensors_between_convex_geoms_match_mujoco():
  """distance, normal and fromto sensors over the pairs MuJoCo measures with native CCD
  (mj_geomDistanceCCD: GJK's distance apart, EPA's depth overlapping): ellipsoids, cylinders,
  capsules, boxes and a mesh, geom and body pairs, over random poses."""
  mj = mujoco.MjModel.from_xml_string(_CONVEX_DISTANCES)
  fm = flexor.load_mjcf_string(_CONVEX_DISTANCES)
  ours, theirs = _sensordata_at(mj, fm, _two_free_bodies(mj, seed=1))
  # on curved geoms GJK and EPA stop within ccd_tolerance (1e-6) of the answer: distances
  # agree to 2e-9 (EPA's depths) or rounding, the witness points (fromto, normal) to where
  # each search stopped
  is_dist = np.zeros(mj.nsensordata, bool)
  is_dist[mj.sensor_adr[mj.sensor_type == SensorType.GEOMDIST]] = True
  np.testing.assert_allclose(ours[:, is_dist], theirs[:, is_dist], rtol=0, atol=1e-8)
  np.testing.assert_allclose(ours[:, ~is_dist], theirs[:, ~is_dist], rtol=0, atol=1e-5)
  dist = theirs[:, is_dist]
  assert np.any(dist < 0) and np.any((dist > 0) & (dist < .2))


@pytest.mark.slow
def test_distance_and_energy_gradients_match_finite_differences():
  """d sensordata / d qpos of geom distance, normal and fromto sensors and of the potential
  energy, by reverse mode, against central differences."""
  sensors = """
    <distance geom1="s" geom2="s2" cutoff="1"/> <normal geom1="c" geom2="s2" cutoff="2"/>
    <fromto geom1="b" geom2="floor" cutoff="1"/> <distance geom1="y" geom2="s" cutoff="2"/>
    <e_potential/>"""
  xml = _DISTANCES.format(sensors=sensors)
  fm = flexor.load_mjcf_string(xml)
  qpos0 = jnp.asarray(fm.qpos0).at[7:10].set(jnp.array([0.3, 0.2, 0.6]))

  def sense(dq):
    d = make_data(fm).replace(qpos=qpos0.at[np.r_[0:3, 7:10]].add(dq))
    return _forward(fm, d).sensordata

  _check_jacobian(sense, 6, atol=1e-6, largest=0.1)


def _check_jacobian(sense, n: int, atol: float, largest: float) -> None:
  """Reverse-mode d sense / dx at x = 0 (n,) against central differences (eps 1e-6); the
  Jacobian is finite and somewhere larger than ``largest``."""
  x = jnp.zeros(n)
  jac = np.asarray(jax.jit(jax.jacrev(sense))(x))
  eps = 1e-6
  fd = np.stack([(sense(x.at[i].set(eps)) - sense(x.at[i].set(-eps))) / (2 * eps)
                 for i in range(n)], axis=1)
  assert np.all(np.isfinite(jac)) and np.abs(jac).max() > largest
  np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=atol)


def test_plane_mesh_distances_match_mujoco():
  """A plane and a mesh: MuJoCo measures them with mjc_PlaneConvex (the hull's support vertex
  and the face beside it), with the cutoff as margin; a Model read from MuJoCo too."""
  xml = ("<mujoco><asset><mesh name='t' vertex='0 0 0 .3 0 0 0 .2 0 0 0 .4 .1 .1 .1'/></asset>"
         "<worldbody><geom name='a' type='plane' size='1 1 1'/><body pos='0 0 .5'><freejoint/>"
         "<geom name='b' type='mesh' mesh='t'/></body></worldbody><sensor>"
         "<distance geom1='a' geom2='b' cutoff='.6'/><fromto geom1='b' geom2='a' cutoff='1'/>"
         "<normal geom1='a' geom2='b' cutoff='1'/></sensor></mujoco>")
  mj = mujoco.MjModel.from_xml_string(xml)
  rng = np.random.default_rng(2)
  qpos = np.tile(mj.qpos0, (30, 1))
  qpos[:, 2] = rng.uniform(-.2, .8, 30)
  quat = rng.standard_normal((30, 4))
  qpos[:, 3:7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
  for fm in (flexor.load_mjcf_string(xml), from_mujoco(mj)):
    ours, theirs = _sensordata_at(mj, fm, qpos)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-10)
  dist = theirs[:, 0]
  assert np.any(dist < 0) and np.any((dist > 0) & (dist < .6)) and np.any(dist == .6)


_CONTACT_GRAD = """
<mujoco>
  <option tolerance="1e-12" gravity="0 0 -9.81"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="ball" pos="0 0 0.095"><freejoint/><geom type="sphere" size="0.1"/></body>
  </worldbody>
  <sensor>
    <contact body2="ball" data="found force dist pos normal linvel" num="2"/>
    <contact geom1="floor" data="force torque pos" reduce="netforce"/>
  </sensor>
</mujoco>"""


def test_contact_sensor_gradient_matches_finite_differences():
  """d sensordata / d (qpos, qvel) of contact sensors on a ball pressed into the floor while
  sliding (the force comes from the constraint solve), by reverse mode, against central
  differences; and vmap over states equals a loop."""
  fm = flexor.load_mjcf_string(_CONTACT_GRAD)
  qpos0, qvel0 = jnp.asarray(fm.qpos0), jnp.array([0.3, -0.2, 0.05, 0.4, 0.1, -0.3])

  def sense(x):
    d = make_data(fm).replace(qpos=qpos0.at[:3].add(x[:3]), qvel=qvel0 + x[3:])
    return _forward(fm, d).sensordata

  _check_jacobian(sense, 9, atol=1e-5, largest=1.0)
  xs = jnp.asarray(np.random.default_rng(0).uniform(-0.01, 0.01, (3, 9)))
  np.testing.assert_allclose(jax.vmap(sense)(xs), np.stack([sense(x) for x in xs]), rtol=1e-12,
                             atol=1e-12)


def test_float32_model_computes_its_sensors_in_float32():
  """A float32 model (the RL setting): every sensor of the own model (contact sensors and their
  flipped frames included) is computed without a float64 value."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    fm = flexor.load_mjcf_string(OWN["own/pyramidal"], dtype=jnp.float32)
  jaxpr = jax.make_jaxpr(forward)(fm, make_data(fm)).jaxpr
  assert not support.float64_values(jaxpr)
