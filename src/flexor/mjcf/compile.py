"""The MJCF compiler: a checked element tree in, a :class:`flexor.types.Model` out.

Order of work follows MuJoCo's reader and compiler: ``<compiler>``, ``<option>``, default
classes, assets, the kinematic tree (``compile_body``), tendons (``compile_tendon``), actuators
(``compile_actuator``), equality constraints (``compile_equality``), contacts, sensors
(``compile_sensor``), keyframes; ``assemble`` then derives addresses, the dof tree and flexor's
tree tables.

What MuJoCo's compiler computes by simulating the model at qpos0 (``mj_setConst``,
springdamper, muscle length ranges) is left to ``flexor.setconst``; :func:`compile_model`
returns what that pass needs besides the Model.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from flexor.mjcf import attach, hfield, mesh, mesh_builtin
from flexor.mjcf.assemble import assemble, make_option, plastic_tables
from flexor.mjcf.compile_actuator import compile_actuators
from flexor.mjcf.compile_body import (INERTIA_FROM_GEOM, Compiler, Tree, TreeCompiler,
                                      check_moving_mass, check_unique_names)
from flexor.mjcf.compile_contact import compile_contact
from flexor.mjcf.compile_equality import compile_equality
from flexor.mjcf.compile_sensor import compile_sensors
from flexor.mjcf.compile_tendon import compile_tendons
from flexor.mjcf.defaults import ACTUATOR_TAGS, Attributes, Defaults, attributes
from flexor.mjcf.parse import Source
from flexor.mjcf.values import Names, Reader, max_geom_pairs, size_nconmax
from flexor.types import JNT_NQ, JNT_NV, DisableBit, EnableBit, GeomType, JointType, Model

_INTEGRATORS = {"Euler": 0, "RK4": 1, "implicit": 2, "implicitfast": 3}
_CONES = {"pyramidal": 0, "elliptic": 1}
_JACOBIANS = {"dense": 0, "sparse": 1, "auto": 2}
_SOLVERS = {"PGS": 0, "CG": 1, "Newton": 2}
# flags whose MuJoCo feature flexor does not build: the model loads and simulates without it
_NOT_BUILT_FLAGS = {
    "sleep": "sleeping islands are not built in flexor: resting bodies keep moving where MuJoCo "
             "freezes them",
    "speculative": "speculative contacts are not built in flexor: fast bodies can pass through "
                   "thin geoms where MuJoCo stops them",
    "nativeccd": "libccd (nativeccd disabled) is not built in flexor: convex pairs keep "
                 "MuJoCo's native GJK/EPA contacts"}
_ENABLE = {"disable": 0, "enable": 1}
_LENGTHRANGE_MODES = {"none": 0, "muscle": 1, "muscleuser": 2, "all": 3}


def _bare(source: Source, element) -> Reader:
  return Reader(source, Attributes(element, ()))


def _compiler(source: Source) -> Compiler:
  c = Compiler()
  for element in source.sections("compiler"):
    r = _bare(source, element)
    if r.text("coordinate", "local") == "global":
      raise r.error("global coordinates are no longer supported (MuJoCo 2.3.3 and older only)",
                    "coordinate")
    r.keyword("coordinate", {"local": 0, "global": 1}, 0)
    c.degrees = r.keyword("angle", {"radian": 0, "degree": 1}, int(c.degrees)) == 1
    # like MuJoCo, a bad eulerseq is an error only where an euler angle uses it
    c.eulerseq = r.text("eulerseq", c.eulerseq)
    c.autolimits = r.bool("autolimits", c.autolimits)
    c.inertiafromgeom = r.keyword("inertiafromgeom", INERTIA_FROM_GEOM, c.inertiafromgeom)
    group = r.ints("inertiagrouprange")
    if group is not None:
      if len(group) != 2:
        raise r.error(f"expected 2 integers, got {len(group)}", "inertiagrouprange")
      c.inertiagrouprange = (int(group[0]), int(group[1]))
    c.boundmass = r.positive("boundmass", r.float("boundmass", c.boundmass))
    c.boundinertia = r.positive("boundinertia", r.float("boundinertia", c.boundinertia))
    c.balanceinertia = r.bool("balanceinertia", c.balanceinertia)
    c.settotalmass = r.float("settotalmass", c.settotalmass)
    assetdir = r.text("assetdir")
    if assetdir is not None:
      c.meshdir = c.texturedir = assetdir
    c.meshdir = r.text("meshdir", c.meshdir)
    c.texturedir = r.text("texturedir", c.texturedir)
    c.fusestatic = r.bool("fusestatic", c.fusestatic)
    c.alignfree = r.bool("alignfree", c.alignfree)
    c.discardvisual = r.bool("discardvisual", c.discardvisual)
    c.fitaabb = r.bool("fitaabb", c.fitaabb)
  return c


def _option(source: Source, dtype: Any):
  values: dict[str, Any] = {}
  for element in source.sections("option"):
    r = _bare(source, element)
    timestep = r.float("timestep")
    if timestep is not None:
      if timestep <= 0:
        raise r.error(f"must be positive, got {timestep:g}", "timestep")
      values["timestep"] = timestep
    for name, n in (("gravity", 3), ("wind", 3), ("magnetic", 3)):
      if r.has(name):
        values[name] = r.floats(name, n)
    for name in ("density", "viscosity", "impratio", "tolerance", "ls_tolerance",
                 "noslip_tolerance", "ccd_tolerance", "o_margin"):
      if r.has(name):
        values[name] = r.float(name)
    if values.get("impratio", 1.0) <= 0:
      raise r.error("must be positive", "impratio")
    for name, n, default in (("o_solref", 2, (0.02, 1.0)),
                             ("o_solimp", 5, (0.9, 0.95, 0.001, 0.5, 2.0)),
                             ("o_friction", 5, (1.0, 1.0, 0.005, 0.0001, 0.0001))):
      if r.has(name):
        values[name] = r.floats(name, n, default, at_most=True)
    if r.text("integrator", "").strip() == "discrete":
      raise r.error("MuJoCo 4's discrete integrator is not supported by flexor yet", "integrator")
    for name, table in (("integrator", _INTEGRATORS), ("cone", _CONES), ("jacobian", _JACOBIANS),
                        ("solver", _SOLVERS)):
      if r.has(name):
        values[name] = r.keyword(name, table, 0)
    for name in ("iterations", "ls_iterations", "noslip_iterations", "ccd_iterations"):
      if r.has(name):
        values[name] = r.int(name)
        r.positive(name, values[name])
    groups = r.ints("actuatorgroupdisable")
    if groups is not None:
      for group in groups:
        if not 0 <= group <= 30:
          raise r.error(f"disabled actuator groups must be in 0..30, got {group}",
                        "actuatorgroupdisable")
      values["disableactuator"] = values.get("disableactuator", 0) | int(
          sum(1 << int(g) for g in set(groups.tolist())))
    for flag in element.iter("flag"):
      disable, enable = values.get("disableflags", 0), values.get("enableflags", 0)
      fr = _bare(source, flag)
      for attr in flag.attrib:
        on = fr.keyword(attr, _ENABLE, 1)
        if (attr in _NOT_BUILT_FLAGS) and on != (attr == "nativeccd"):
          warnings.warn(str(fr.error(_NOT_BUILT_FLAGS[attr], attr)))
        if attr == "passive":
          bits = DisableBit.SPRING | DisableBit.DAMPER
          disable = (disable & ~bits) | (0 if on else bits)
        elif attr.upper() in DisableBit.__members__:
          bit = DisableBit[attr.upper()]
          disable = (disable & ~bit) | (0 if on else bit)
        elif attr.upper() in EnableBit.__members__:
          bit = EnableBit[attr.upper()]
          enable = (enable & ~bit) | (bit if on else 0)
      values["disableflags"], values["enableflags"] = int(disable), int(enable)
  return make_option(dtype, **values)


def _assets(source: Source, defaults: Defaults, compiler: Compiler):
  """Meshes, height fields and materials by name: {name: (id, MeshInfo)},
  {name: (id, hfield.HField)}, {name: (id, rgba (4,))}."""
  meshes: dict[str, tuple[int, Any]] = {}
  hfields: dict[str, tuple[int, hfield.HField]] = {}
  materials: dict[str, tuple[int, np.ndarray]] = {}
  for asset in source.sections("asset"):
    for element in asset:
      if element.tag == "material":
        r = Reader(source, attributes(defaults, element))
        name = element.get("name", "")
        if name and name in materials:
          raise r.error(f"repeated material name {name!r}", "name")
        rgba = np.float32(r.floats("rgba", 4, (1.0, 1.0, 1.0, 1.0)))  # float in mjModel
        materials[name] = (len(materials), rgba)
      elif element.tag == "mesh":
        r = Reader(source, attributes(defaults, element))
        name = element.get("name")
        file = r.text("file")
        if name is None:
          if file is None:
            raise r.error("a mesh needs a name or a file", "name")
          name = os.path.splitext(os.path.basename(file))[0]
        if name in meshes:
          raise r.error(f"repeated mesh name {name!r}", "name")
        maxhullvert = r.int("maxhullvert", -1)
        if maxhullvert != -1 and maxhullvert < 4:
          raise r.error(f"maxhullvert must be larger than 3, got {maxhullvert}", "maxhullvert")
        options = dict(scale=r.floats("scale", 3, (1.0, 1.0, 1.0)),
                       refpos=r.floats("refpos", 3, (0.0, 0.0, 0.0)),
                       refquat=r.floats("refquat", 4, (1.0, 0.0, 0.0, 0.0)),
                       inertia_mode=r.text("inertia", "legacy"), maxhullvert=maxhullvert)
        builtin = r.text("builtin", "none")
        if builtin != "none":
          params = r.floats("params")
          if params is None:
            raise r.error("a builtin mesh needs 'params'", "params")
          try:
            vertex, face, forced = mesh_builtin.make(builtin, params)
            if forced is not None:
              options["inertia_mode"] = forced
            info = mesh.process_mesh(vertex, face, name, **options)
          except ValueError as e:
            raise r.error(str(e), "params") from None
        elif file is not None:
          data, path = source.read_file(file, element, "file", compiler.meshdir)
          try:
            info = mesh.load_mesh(data, path, content_type=r.text("content_type"), **options)
          except ValueError as e:
            raise r.error(str(e), "file") from None
        else:
          vertex, face = r.floats("vertex"), r.ints("face")
          face = np.zeros(0, np.int32) if face is None else face  # a point cloud: its hull
          if vertex is None or len(vertex) % 3 or len(face) % 3:
            raise r.error("a mesh without a file or a builtin needs 'vertex' (3n numbers) and "
                          "may have 'face' (3m integers); plugin meshes are not supported",
                          "vertex")
          try:
            info = mesh.process_mesh(vertex.reshape(-1, 3), face.reshape(-1, 3), name, **options)
          except ValueError as e:
            raise r.error(str(e), "vertex") from None
        meshes[name] = (len(meshes), info)
      elif element.tag == "texture":
        for attr in ("file", "fileright", "fileleft", "fileup", "filedown", "filefront",
                     "fileback"):
          if element.get(attr) is not None:
            source.read_file(element.get(attr), element, attr, compiler.texturedir)
      elif element.tag == "hfield":
        r = Reader(source, attributes(defaults, element))
        name = element.get("name")
        if name is None and r.text("file") is not None:
          name = os.path.splitext(os.path.basename(r.text("file")))[0]
        size = r.floats("size", 4)
        if size is None:
          raise r.error("required attribute missing", "size")
        for i, value in enumerate(size):
          if value <= 0 and i != 3 or value < 0:
            raise r.error(f"size[{i}] must be positive", "size")
        file = r.text("file")
        content = (source.read_file(file, element, "file", compiler.meshdir)
                   if file is not None else None)
        try:
          compiled = hfield.load(size, r.int("nrow", 0), r.int("ncol", 0), r.floats("elevation"),
                                 content, r.text("content_type"))
        except ValueError as e:
          attribute, message = str(e).split(": ", 1)
          raise r.error(message, attribute) from None
        hfields[name or ""] = (len(hfields), compiled)
  return meshes, hfields, materials


def _hull(source: Source, info: Any, colliding: bool) -> np.ndarray | None:
  """The mesh's convex hull triangles where MuJoCo makes one (processing made it, or a geom
  that can collide uses the mesh), else None; a colliding mesh without one is an error."""
  if info.hull is not None or not colliding:
    return info.hull
  try:
    # MuJoCo runs qhull on the vertices as given (qhull's order depends on them)
    if info.vert_asset is None:
      return mesh.convex_hull(info.vert, info.name, maxhullvert=info.maxhullvert)
    return mesh.convex_hull(info.vert_asset, info.name, final=info.vert,
                            maxhullvert=info.maxhullvert)
  except ValueError as e:
    named = lambda el: el.get("name") or os.path.splitext(os.path.basename(el.get("file")))[0]
    element = next((el for asset in source.sections("asset") for el in asset
                    if el.tag == "mesh" and named(el) == info.name), None)
    raise source.error(element, f"{e} (a colliding mesh needs one)", None) from None


def _mesh_fields(source: Source, infos: list[Any], colliding: set[int]) -> dict[str, np.ndarray]:
  """mesh_* fields of the meshes ``infos``. Those in ``colliding`` (ids used by a geom that can
  collide) and those whose processing made the convex hull get the hull's graph, extrema and
  polygons (MuJoCo's mjCMesh::MakeGraph, MakePolygons and the 27 grid extrema)."""
  if not infos:
    return {}
  num = np.array([len(info.vert) for info in infos], np.int32)
  # MuJoCo stores mesh vertices in single precision
  vert = np.concatenate([np.asarray(info.vert, np.float32) for info in infos]).astype(np.float64)
  graphs, extrema, loops, normals = [], np.zeros((len(infos), 27), np.int32), [], []
  polymap: list[list[int]] = []  # the polygons at each vertex of each mesh
  for i, info in enumerate(infos):
    hull = _hull(source, info, i in colliding)
    polygons: list[list[int]] = []
    graphs.append(None if hull is None else mesh.hull_graph(hull))
    if hull is not None:
      numvert = graphs[-1][0]
      extrema[i] = mesh.hull_extrema(info.vert, graphs[-1][2 + numvert:2 + 2 * numvert])
      polygons, n = mesh.hull_polygons(info.vert_asset, info.vert, hull)
      normals.append(n)
    loops.append(polygons)
    at: list[list[int]] = [[] for _ in range(len(info.vert))]
    for p, loop in enumerate(polygons):
      for v in loop:
        at[v].append(p)
    polymap += at
  sizes = [0 if g is None else len(g) for g in graphs]
  polynum = np.array([len(m) for m in loops], np.int32)
  polyvertnum = np.array([len(p) for m in loops for p in m], np.int32)
  mapnum = np.array([len(p) for p in polymap], np.int32)
  cumulative = lambda n: (np.cumsum(n) - n).astype(np.int32)
  graph = [g for g in graphs if g is not None]
  facenum = np.array([len(info.face) for info in infos], np.int32)
  return dict(mesh_vertadr=cumulative(num), mesh_vertnum=num, mesh_vert=vert.reshape(-1, 3),
              mesh_pos=np.array([info.pos for info in infos], np.float64).reshape(-1, 3),
              mesh_quat=np.array([info.quat for info in infos], np.float64).reshape(-1, 4),
              mesh_faceadr=cumulative(facenum), mesh_facenum=facenum,
              mesh_face=np.concatenate([info.face for info in infos]).astype(np.int32),
              mesh_graphadr=np.where([g is None for g in graphs], -1,
                                     cumulative(np.array(sizes))).astype(np.int32),
              mesh_graph=np.concatenate(graph) if graph else np.zeros(0, np.int32),
              mesh_extrema=extrema, mesh_polynum=polynum, mesh_polyadr=cumulative(polynum),
              mesh_polynormal=np.concatenate(normals) if normals else np.zeros((0, 3)),
              mesh_polyvertadr=cumulative(polyvertnum), mesh_polyvertnum=polyvertnum,
              mesh_polyvert=np.array([v for m in loops for p in m for v in p], np.int32),
              mesh_polymapadr=cumulative(mapnum), mesh_polymapnum=mapnum,
              mesh_polymap=np.array([p for at in polymap for p in at], np.int32))


def _colliding_meshes(fields: dict[str, Any], referred: set[str]) -> set[int]:
  """Ids of the meshes some mesh geom uses that has contype or conaffinity or is referred to,
  or some mesh site uses (MuJoCo's SetNeedHull; insidesite tests the site's hull)."""
  g_type, dataid = fields["geom_type"], fields["geom_dataid"]
  names = fields["names_geom"]
  return {int(dataid[i]) for i in range(len(g_type))
          if g_type[i] == GeomType.MESH and dataid[i] >= 0
          and (fields["geom_contype"][i] or fields["geom_conaffinity"][i] or names[i] in referred)
          } | {int(k) for k in fields["site_dataid"] if k >= 0}


def _nonvisual_geom_names(source: Source) -> set[str]:
  """Names of the geoms a ``<pair>``, a tendon's path, a sensor or a ``<tuple>`` refers to:
  MuJoCo marks them as not visual (``SetNotVisual``), so ``<compiler discardvisual>`` keeps them
  even without contype or conaffinity."""
  refs = [(e, a) for kind in ("contact", "tendon", "sensor") for section in source.sections(kind)
          for e in section.iter() if isinstance(e.tag, str)
          for a in ("geom", "geom1", "geom2") if e.get(a) is not None]
  refs += [(e, f"{side}name") for kind in ("sensor", "custom") for section in
           source.sections(kind) for e in section.iter() if isinstance(e.tag, str)
           for side in ("obj", "ref") if e.get(f"{side}type") == "geom"]
  return {e.get(a) for e, a in refs}


def _discard_visual(tree: Tree, infos: list[Any], referred: set[str]) -> list[Any]:
  """``<compiler discardvisual>``: drops geoms that neither collide (by contype/conaffinity) nor
  are referred to (names in ``referred``) nor use the ellipsoid fluid model
  (after they counted for inertia, as in MuJoCo), the meshes no remaining geom or site uses,
  and every material."""
  g, s = tree.geom, tree.site
  keep = [i for i in range(len(g["type"]))
          if g["contype"][i] or g["conaffinity"][i] or g["fluid"][i][0] > 0
          or g["name"][i] in referred]
  for key in g:
    g[key] = [g[key][i] for i in keep]
  used = sorted({d for d, t in zip(g["dataid"], g["type"]) if t == GeomType.MESH}
                | {d for d in s["dataid"] if d >= 0})
  remap = {old: new for new, old in enumerate(used)}
  g["dataid"] = [remap[d] if t == GeomType.MESH else d for d, t in zip(g["dataid"], g["type"])]
  s["dataid"] = [remap.get(d, -1) for d in s["dataid"]]
  g["matid"] = [-1] * len(keep)  # materials are visual: all are discarded
  return [infos[i] for i in used]


def _normalize_quats(qpos: np.ndarray, jnt_type: np.ndarray) -> None:
  """Normalizes the quaternions of ball and free joints in ``qpos`` (nq,), in place."""
  adr = 0
  for t in jnt_type:
    if t == JointType.FREE:
      qpos[adr + 3:adr + 7] /= np.linalg.norm(qpos[adr + 3:adr + 7])
    elif t == JointType.BALL:
      qpos[adr:adr + 4] /= np.linalg.norm(qpos[adr:adr + 4])
    adr += JNT_NQ[t]


def _refuse_flex(source: Source) -> None:
  """A ``<deformable><flex>`` adds flex objects (their contacts and elasticity) in MuJoCo."""
  for section in source.sections("deformable"):
    for element in section:
      if element.tag == "flex":
        raise source.error(element, "flex objects are not supported by flexor yet")


def _keyframes(source: Source, fields: dict[str, Any], nu: int, na: int, jnt_elements: list[Any],
               actuator_elements: list[Any], mocap_elements: list[Any]) -> dict[str, Any]:
  nq, nv = len(fields["qpos0"]), sum(
      {0: 6, 1: 3}.get(int(t), 1) for t in fields["jnt_type"])
  mocap = np.flatnonzero(fields["body_mocapid"] >= 0)
  mocap = mocap[np.argsort(fields["body_mocapid"][mocap])]
  nmocap = len(mocap)
  keys: dict[str, list[Any]] = {k: [] for k in "time qpos qvel act ctrl mpos mquat".split()}
  names = []
  nplastic = plastic_tables(fields, np.asarray(fields["jnt_type"]),
                            len(fields.get("tendon_num", ())))["nplastic"]
  given_plastic: list[np.ndarray] = []
  for section in source.sections("keyframe"):
    for element in section:
      r = _bare(source, element)
      plastic = r.floats("plastic", at_least=0) if r.has("plastic") else np.zeros(0)
      if len(plastic) > nplastic:
        raise r.error(f"expected at most {nplastic} numbers (the model's plastic state), got "
                      f"{len(plastic)}", "plastic")
      given_plastic.append(plastic)
      names.append(element.get("name", ""))
      keys["time"].append(r.float("time", 0.0))
      # MuJoCo 4.0 fills a short list from the default: value by value, and for mpos and mquat
      # mocap body by mocap body (a partial body's numbers are dropped)
      for name, n, unit, default in (
          ("qpos", nq, 1, fields["qpos0"]), ("qvel", nv, 1, np.zeros(nv)),
          ("act", na, 1, np.zeros(na)), ("ctrl", nu, 1, np.zeros(nu)),
          ("mpos", 3 * nmocap, 3, fields["body_pos"][mocap].ravel()),
          ("mquat", 4 * nmocap, 4, fields["body_quat"][mocap].ravel())):
        key = np.array(default, dtype=np.float64)
        value = r.floats(name, at_least=0) if r.has(name) else np.zeros(0)
        if len(value) > n:
          raise r.error(f"expected at most {n} numbers (the model's size), got {len(value)}",
                        name)
        given = len(value) // unit * unit
        key[:given] = value[:given]
        keys[name].append(key)
  for key in source.attached_keys:
    _attached_key(key, keys, fields, nv, jnt_elements, actuator_elements, mocap_elements)
    names.append(key.name)
  nkey = max([len(names)] + [_bare(source, e).int("nkey", 0) for e in source.sections("size")])
  for _ in range(nkey - len(names)):
    names.append("")
    for name, value in (("time", 0.0), ("qpos", fields["qpos0"]), ("qvel", np.zeros(nv)),
                        ("act", np.zeros(na)), ("ctrl", np.zeros(nu)),
                        ("mpos", fields["body_pos"][mocap].ravel()),
                        ("mquat", fields["body_quat"][mocap].ravel())):
      keys[name].append(np.array(value, dtype=np.float64))
  # NaN: not given, filled from the initial plastic state once setconst has the tendons' lengths
  key_plastic = np.full((nkey, nplastic), np.nan)
  for k, plastic in enumerate(given_plastic):
    key_plastic[k, :len(plastic)] = plastic
  for qpos in keys["qpos"]:
    _normalize_quats(qpos, fields["jnt_type"])
  for mquat in keys["mquat"]:
    for i in range(0, len(mquat), 4):
      mquat[i:i + 4] /= np.linalg.norm(mquat[i:i + 4])
  return dict(key_time=np.array(keys["time"]), key_qpos=np.array(keys["qpos"]).reshape(nkey, nq),
              key_qvel=np.array(keys["qvel"]).reshape(nkey, nv),
              key_act=np.array(keys["act"]).reshape(nkey, na),
              key_ctrl=np.array(keys["ctrl"]).reshape(nkey, nu),
              key_mpos=np.array(keys["mpos"]).reshape(nkey, nmocap, 3),
              key_mquat=np.array(keys["mquat"]).reshape(nkey, nmocap, 4),
              key_plastic=key_plastic, names_key=tuple(names))


def _attached_key(key: attach.AttachedKey, keys: dict[str, list[Any]], fields: dict[str, Any],
                  nv: int, jnt_elements: list[Any], actuator_elements: list[Any],
                  mocap_elements: list[Any]) -> None:
  """Appends an attached model's keyframe to ``keys``: what it sets on the elements it was
  attached with, the model's defaults elsewhere."""
  mocap_index = {id(e): i for i, e in enumerate(mocap_elements)}
  qpos, qvel = np.array(fields["qpos0"], np.float64), np.zeros(nv)
  jnt_index = {id(e): j for j, e in enumerate(jnt_elements)}
  jnt_type = np.asarray(fields["jnt_type"], int)
  qposadr = np.cumsum(JNT_NQ[jnt_type]) - JNT_NQ[jnt_type]
  dofnum = JNT_NV[jnt_type]
  dofadr = np.cumsum(dofnum) - dofnum
  for element, q, v in key.joints:
    j = jnt_index.get(id(element))
    if j is not None:
      qpos[qposadr[j]:qposadr[j] + len(q)], qvel[dofadr[j]:dofadr[j] + len(v)] = q, v
  ctrlnum = np.asarray(fields.get("actuator_ctrlnum", np.ones(len(actuator_elements))), int)
  ctrladr = np.cumsum(ctrlnum) - ctrlnum
  act = np.zeros(int(np.sum(fields.get("actuator_actnum", 0))))
  ctrl = np.zeros(int(np.sum(ctrlnum)))
  actuator_index = {id(e): a for a, e in enumerate(actuator_elements)}
  for element, a_values, c_values in key.actuators:
    a = actuator_index.get(id(element))
    if a is not None:
      adr = int(fields["actuator_actadr"][a])
      if adr >= 0:
        act[adr:adr + len(a_values)] = a_values
      ctrl[ctrladr[a]:ctrladr[a] + len(c_values)] = c_values
  mocap = np.flatnonzero(fields["body_mocapid"] >= 0)
  mocap = mocap[np.argsort(fields["body_mocapid"][mocap])]
  mpos, mquat = fields["body_pos"][mocap].copy(), fields["body_quat"][mocap].copy()
  for element, p, q in key.mocap:
    i = mocap_index.get(id(element))
    if i is not None:
      mpos[i], mquat[i] = p, q
  for name, value in (("time", key.time), ("qpos", qpos), ("qvel", qvel), ("act", act),
                      ("ctrl", ctrl), ("mpos", mpos.ravel()), ("mquat", mquat.ravel())):
    keys[name].append(value)


def _lengthrange_options(source: Source) -> dict[str, Any]:
  """The ``<compiler><lengthrange>`` attributes given (mjLROpt names; ``flexor.setconst`` holds
  MuJoCo's defaults for the others)."""
  opt: dict[str, Any] = {}
  for section in source.sections("compiler"):
    for element in section.iter("lengthrange"):
      r = _bare(source, element)
      if r.has("mode"):
        opt["mode"] = r.keyword("mode", _LENGTHRANGE_MODES, 1)
      for name in ("useexisting", "uselimit"):
        if r.has(name):
          opt[name] = r.bool(name, False)
      for name in ("accel", "maxforce", "timeconst", "timestep", "inttotal", "interval",
                   "tolrange"):
        if r.has(name):
          opt[name] = r.float(name)
  return opt


def _child_keys(child: Source) -> dict[str, Any]:
  """What mapping an attached model's keyframes needs (``attach.expand``'s ``child_keys``)."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # the child's own warnings come again with the parent's
    model, pending = _compile(child, np.float64, convex=False)
  out = {name: getattr(model, name) for name in (
      "key_time", "key_qpos", "key_qvel", "key_act", "key_ctrl", "key_mpos", "key_mquat",
      "names_key", "jnt_qposadr", "jnt_dofadr", "jnt_type", "actuator_actadr",
      "actuator_actnum", "actuator_ctrlnum")}
  return dict(out, **{k: pending[k] for k in ("jnt_elements", "actuator_elements",
                                              "mocap_elements")})


def _compile(source: Source, dtype: Any, convex: bool) -> tuple[Model, dict[str, Any]]:
  compiler = _compiler(source)
  attach.expand(source, compiler, _compiler, _child_keys)
  option = _option(source, dtype)
  _refuse_flex(source)
  defaults = Defaults(source)
  meshes, hfields, materials = _assets(source, defaults, compiler)
  builder = TreeCompiler(source, defaults, compiler, meshes, hfields, materials)
  tree = builder.compile()
  check_unique_names(source, tree)
  infos = [info for _, info in sorted(meshes.values(), key=lambda item: item[0])]
  referred = _nonvisual_geom_names(source)
  if compiler.discardvisual:
    infos = _discard_visual(tree, infos, referred)
    materials = {}
  fields = builder.finish()
  fields["site_type"] = np.array(tree.site["type"], dtype=np.int32)
  fields.update(_mesh_fields(source, infos, _colliding_meshes(fields, referred)))
  fields.update(hfield.hfield_fields([h for _, h in sorted(hfields.values(), key=lambda i: i[0])]))
  fields["mat_rgba"] = np.array([rgba for _, rgba in sorted(materials.values(),
                                                          key=lambda i: i[0])],
                               np.float64).reshape(-1, 4)
  names = {kind: Names(source, label, fields[f"names_{kind}"])
           for kind, label in (("body", "body"), ("jnt", "joint"), ("geom", "geom"),
                               ("site", "site"), ("cam", "camera"))}
  names["camera"] = names.pop("cam")
  fields.update(compile_tendons(source, defaults, compiler, names, fields))
  names["tendon"] = Names(source, "tendon", fields.get("names_tendon", ()))
  fields.update(compile_actuators(source, defaults, compiler, names, fields))
  fields.update(compile_equality(source, defaults, names, fields))
  fields.update(compile_contact(source, defaults, names, fields))
  fields.update(compile_sensors(source, names, fields))
  check_moving_mass(source, tree)
  nu = int(np.sum(fields.get("actuator_ctrlnum", 0)))
  actuator_elements = [element for section in source.sections("actuator")
                       for element in section if element.tag in ACTUATOR_TAGS]
  mocapid = np.asarray(tree.body["mocapid"])
  mocap_elements = [tree.body["element"][b] for b in np.argsort(mocapid) if mocapid[b] >= 0]
  fields.update(_keyframes(source, fields, nu, int(np.sum(fields.get("actuator_actnum", 0))),
                           tree.jnt["element"], actuator_elements, mocap_elements))
  fields["size_nconmax"] = size_nconmax(source)
  fields["max_geom_pairs"] = max_geom_pairs(source)
  pending = dict(springdamper=np.array(tree.springdamper, dtype=np.float64).reshape(-1, 2),
                 lengthrange=_lengthrange_options(source), actuator_elements=actuator_elements,
                 jnt_elements=tree.jnt["element"], mocap_elements=mocap_elements)
  return assemble(fields, option, dtype, convex), pending


def compile_model(source: Source, dtype: Any = None, convex: bool = True
                  ) -> tuple[Model, dict[str, Any]]:
  """Compiles a parsed, schema-checked MJCF source into a Model.

  Fields MuJoCo's compiler computes by running the model (acc0, lengths at qpos0, dampratio,
  springdamper, simulated lengthranges) are left for the compile-time constants pass,
  ``flexor.setconst``, which ``flexor.io`` runs next; this returns what it needs beside the
  Model:

  * ``springdamper``: (njnt, 2) float, each joint's ``springdamper`` (timeconst, dampratio), zeros
    where not given; joints with both positive get stiffness and damping from their inertia.
  * ``lengthrange``: dict of the ``<compiler><lengthrange>`` options given (mjLROpt names; mode
    0 none, 1 muscle, 2 muscleuser, 3 all).
  * ``actuator_elements``: the actuators' elements, in actuator order, to locate errors.

  Args:
    source: from :func:`flexor.mjcf.parse.load`.
    dtype: float dtype of the traced fields.
    convex: collide the GJK/EPA pairs (``contact_pairs.CONVEX``).
  Returns:
    (the Model, numbered as MuJoCo numbers it; the dict above).
  Raises:
    MJCFError: a value, reference or file is invalid.
  """
  return _compile(source, dtype, convex)
