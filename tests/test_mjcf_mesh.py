"""Mesh loading and processing, mesh geoms and mesh-derived inertia against MuJoCo's compiler.

References: dm_control's ``dog.xml`` (162 mesh geoms from binary STL files) and MJX's
``convex.xml`` (scaled STL meshes), plus small synthetic OBJ, MSH and STL meshes passed to MuJoCo
as in-memory assets. Vertices are compared as MuJoCo stores them (float32), frames and inertias
in float64.
"""

from __future__ import annotations

import math
import os
import struct

import mujoco
import numpy as np
import pytest

import flexor
from flexor.mjcf import frames, inertia, mesh, mesh_builtin
from flexor.types import GeomType

import support

# The compiler arithmetic is repeated operation by operation, so the expected error is 0; this
# bound leaves room for one rounding in a differently ordered libm or summation.
TOL = 1e-12

_DOG = os.path.join(support._suite_dir(), "dog.xml")  # pylint: disable=protected-access
_CONVEX = os.path.join(support.SHARED_CORPUS, "mjx_test_data", "convex.xml")
_INERTIA = {mujoco.mjtMeshInertia.mjMESH_INERTIA_LEGACY: "legacy",
            mujoco.mjtMeshInertia.mjMESH_INERTIA_EXACT: "exact",
            mujoco.mjtMeshInertia.mjMESH_INERTIA_SHELL: "shell",
            mujoco.mjtMeshInertia.mjMESH_INERTIA_CONVEX: "convex"}


def _err(a, b) -> float:
  a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
  return float(np.max(np.abs(a - b) / (1 + np.abs(b)))) if a.size else 0.0


def _load_spec_meshes(path: str, spec: mujoco.MjSpec) -> dict[str, mesh.MeshInfo]:
  meshdir = os.path.join(os.path.dirname(path), spec.meshdir)
  infos = {}
  for m in spec.meshes:
    with open(os.path.join(meshdir, m.file), "rb") as f:
      data = f.read()
    infos[m.name] = mesh.load_mesh(data, m.file, scale=m.scale, refpos=m.refpos,
                                   refquat=m.refquat, inertia_mode=_INERTIA[m.inertia])
  return infos


def _geom_frame(spec: mujoco.MjSpec, g) -> tuple[np.ndarray, np.ndarray]:
  """The geom's MJCF pos and resolved orientation, before any mesh offset."""
  kind = {mujoco.mjtOrientation.mjORIENTATION_QUAT: ("quat", g.quat),
          mujoco.mjtOrientation.mjORIENTATION_EULER: ("euler", g.alt.euler),
          mujoco.mjtOrientation.mjORIENTATION_AXISANGLE: ("axisangle", g.alt.axisangle),
          mujoco.mjtOrientation.mjORIENTATION_XYAXES: ("xyaxes", g.alt.xyaxes),
          mujoco.mjtOrientation.mjORIENTATION_ZAXIS: ("zaxis", g.alt.zaxis)}[g.alt.type]
  seq = "".join(spec.compiler.eulerseq)
  quat = frames.orient_quat(kind[0], kind[1], degrees=bool(spec.compiler.degree), eulerseq=seq)
  return np.array(g.pos), quat


def _compiled_geoms(spec, model, infos):
  """Per geom: (pos, quat, size, mass, inertia) from flexor's functions."""
  out = []
  for g in spec.geoms:
    pos, quat = _geom_frame(spec, g)
    gtype, size, info = int(g.type), np.array(g.size), None
    if gtype == GeomType.MESH:
      info = infos[g.meshname]
      pos, quat, size = mesh.mesh_geom(pos, quat, info)
    elif not math.isnan(g.fromto[0]):
      pos, quat, size = inertia.geom_fromto(gtype, g.fromto, size)
    mass = None if math.isnan(g.mass) else g.mass
    gm, gi = inertia.geom_mass_inertia(
        gtype, size, density=g.density, mass=mass,
        shellinertia=g.typeinertia == mujoco.mjtGeomInertia.mjINERTIA_SHELL, mesh=info)
    out.append((pos, quat, size, gm, gi, inertia.geom_rbound(gtype, size, info)))
  return out


@pytest.mark.parametrize("path", [_DOG, _CONVEX], ids=["dog", "convex"])
def test_reference_models(path):
  if not os.path.exists(path):
    pytest.skip(f"{path} not present")
  spec = mujoco.MjSpec.from_file(path)
  # every body's inertia from its geoms, so that mesh masses and inertias are checked too
  spec.compiler.inertiafromgeom = mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_TRUE
  model = spec.compile()
  infos = _load_spec_meshes(path, spec)

  for i in range(model.nmesh):
    info = infos[model.mesh(i).name]
    adr, num = model.mesh_vertadr[i], model.mesh_vertnum[i]
    np.testing.assert_array_equal(info.vert.astype(np.float32), model.mesh_vert[adr:adr + num])
    fadr, fnum = model.mesh_faceadr[i], model.mesh_facenum[i]
    np.testing.assert_array_equal(info.face, model.mesh_face[fadr:fadr + fnum])
    assert _err(info.pos, model.mesh_pos[i]) <= TOL
    assert _err(info.quat, model.mesh_quat[i]) <= TOL

  geoms = _compiled_geoms(spec, model, infos)
  nmesh_geoms = 0
  for gid, (pos, quat, size, _, _, rbound) in enumerate(geoms):
    name = model.geom(gid).name
    nmesh_geoms += model.geom_type[gid] == GeomType.MESH
    assert _err(pos, model.geom_pos[gid]) <= TOL, name
    assert _err(quat, model.geom_quat[gid]) <= TOL, name
    assert _err(size, model.geom_size[gid]) <= TOL, name
    assert _err(rbound, model.geom_rbound[gid]) <= TOL, name
  assert nmesh_geoms == {_DOG: 162, _CONVEX: 3}[path]

  lo, hi = spec.compiler.inertiagrouprange
  for b in range(1, model.nbody):
    sel = [g for g in range(model.ngeom)
           if model.geom_bodyid[g] == b and lo <= model.geom_group[g] <= hi]
    if not sel:
      continue
    mass, ipos, iquat, inert = inertia.body_inertial(
        [geoms[g][3] for g in sel], np.array([geoms[g][4] for g in sel]),
        np.array([geoms[g][0] for g in sel]), np.array([geoms[g][1] for g in sel]))
    name = model.body(b).name
    assert _err(mass, model.body_mass[b]) <= TOL, name
    assert _err(ipos, model.body_ipos[b]) <= TOL, name
    assert _err(iquat, model.body_iquat[b]) <= TOL, name
    assert _err(inert, model.body_inertia[b]) <= TOL, name


# ----------------------------------------------------------------------------- synthetic meshes

_CUBE_OBJ = b"""# unit cube: quads, an unused repeated vertex, texture coordinates, relative indices
v 0 0 0
v 1 0 0
v 1 1 0
v 0 1 0
v 0 0 1
v 1 0 1
v 1 1 1
v 0 1 1
v 0 0 0
vt 0 0
f 1/1 4/1 3/1 2/1
f 5/1 6/1 7/1 8/1
f 1/1 2/1 6/1 5/1
f 2/1 3/1 7/1 6/1
f 3/1 4/1 8/1 7/1
f -6/1 -9/1 -5/1 -2/1
"""

# a hexagonal pyramid, base given as one polygon; apex off-centre
_HEX_OBJ = (b"v 0 0 0\nv 2 0 0\nv 3 1 0\nv 2 2 0\nv 0 2 0\nv -1 1 0\nv 1.3 .7 2\n"
            b"f 6 5 4 3 2 1\nf 1 2 7\nf 2 3 7\nf 3 4 7\nf 4 5 7\nf 5 6 7\nf 6 1 7\n")

# a wedge whose slanted quad is not planar: its diagonal choice matters
_SKEW_OBJ = (b"v 0 0 0\nv 2 0 0\nv 2 1 0\nv 0 1 0\nv 0 0 1\nv 2 0 1.5\nv 2 1 .7\nv 0 1 1\n"
             b"f 1 4 3 2\nf 5 6 7 8\nf 1 2 6 5\nf 2 3 7 6\nf 3 4 8 7\nf 4 1 5 8\n")


def _tetra_stl() -> bytes:
  tris = [((0, 0, 0), (0, 1, 0), (1, 0, 0)), ((0, 0, 0), (1, 0, 0), (0, 0, 1.5)),
          ((0, 0, 0), (0, 0, 1.5), (0, 1, 0)), ((1, 0, 0), (0, 1, 0), (0, 0, 1.5))]
  body = b"".join(struct.pack("<3f", 0, 0, 0) + b"".join(struct.pack("<3f", *v) for v in t)
                  + b"\0\0" for t in tris)
  return b"\0" * 80 + struct.pack("<i", len(tris)) + body


def _octa_msh() -> bytes:
  vert = np.array([[1, 0, 0], [-1, 0, 0], [0, 2, 0], [0, -2, 0], [0, 0, 3], [0, 0, -3]],
                  dtype="<f4")
  face = np.array([[0, 2, 4], [2, 1, 4], [1, 3, 4], [3, 0, 4], [2, 0, 5], [1, 2, 5], [3, 1, 5],
                   [0, 3, 5]], dtype="<i4")
  return struct.pack("<4i", len(vert), 0, 0, len(face)) + vert.tobytes() + face.tobytes()


def _ascii(tris) -> bytes:
  out = b"solid t\n"
  for t in tris:
    out += b"facet normal 0 0 0\n outer loop\n"
    out += b"".join(b"  vertex %r %r %r\n" % tuple(float(x) for x in v) for v in t)
    out += b" endloop\nendfacet\n"
  return out + b"endsolid t\n"


_MESHES = {"cube.obj": _CUBE_OBJ, "hex.obj": _HEX_OBJ, "skew.obj": _SKEW_OBJ,
           "tetra.stl": _tetra_stl(), "octa.msh": _octa_msh()}
_OPTIONS = [
    {},
    {"scale": (0.5, 2.0, 1.5)},
    {"scale": (-1.0, 1.0, 1.0)},
    {"scale": (-0.3, -0.4, -0.5)},
    {"refpos": (0.1, 0.2, -0.3), "refquat": (0.9, 0.1, -0.3, 0.2)},
    {"inertia_mode": "exact"},
    {"inertia_mode": "shell"},
    {"inertia_mode": "shell", "scale": (2.0, 1.0, 0.5)},
]


@pytest.mark.parametrize("options", _OPTIONS, ids=lambda o: ",".join(o) or "default")
@pytest.mark.parametrize("fname", sorted(_MESHES))
def test_synthetic_meshes(fname, options):
  attrs = " ".join(f"{k if k != 'inertia_mode' else 'inertia'}="
                   f"'{v if isinstance(v, str) else ' '.join(map(repr, v))}'"
                   for k, v in options.items())
  xml = (f"<mujoco><asset><mesh name='m' file='{fname}' {attrs}/></asset><worldbody>"
         "<body pos='1 2 3'><geom type='mesh' mesh='m' pos='.1 .2 .3' euler='10 20 30' "
         "density='700'/></body></worldbody></mujoco>")
  try:
    model = mujoco.MjModel.from_xml_string(xml, assets={fname: _MESHES[fname]})
  except ValueError as e:
    with pytest.raises(ValueError):
      mesh.load_mesh(_MESHES[fname], fname, **options)
    pytest.skip(f"MuJoCo rejects it too: {e}")
  info = mesh.load_mesh(_MESHES[fname], fname, **options)
  np.testing.assert_array_equal(info.vert.astype(np.float32), model.mesh_vert)
  np.testing.assert_array_equal(info.face, model.mesh_face)
  assert _err(info.pos, model.mesh_pos[0]) <= TOL
  assert _err(info.quat, model.mesh_quat[0]) <= TOL
  quat = frames.orient_quat("euler", (10, 20, 30), degrees=True, eulerseq="xyz")
  pos, quat, size = mesh.mesh_geom((0.1, 0.2, 0.3), quat, info)
  assert _err(pos, model.geom_pos[0]) <= TOL
  assert _err(quat, model.geom_quat[0]) <= TOL
  assert _err(size, model.geom_size[0]) <= TOL
  assert _err(inertia.geom_rbound(GeomType.MESH, size, info), model.geom_rbound[0]) <= TOL
  gm, gi = inertia.geom_mass_inertia(GeomType.MESH, size, density=700, mesh=info)
  assert _err(gm, model.body_mass[1]) <= TOL
  assert _err(gi, model.body_inertia[1]) <= TOL
  assert _err(pos, model.body_ipos[1]) <= TOL
  assert _err(quat, model.body_iquat[1]) <= TOL


def test_ascii_stl_matches_binary():
  """MuJoCo reads only binary STL; flexor also reads ASCII STL, to the same mesh."""
  tris = [((0, 0, 0), (0, 1, 0), (1, 0, 0)), ((0, 0, 0), (1, 0, 0), (0, 0, 1.5)),
          ((0, 0, 0), (0, 0, 1.5), (0, 1, 0)), ((1, 0, 0), (0, 1, 0), (0, 0, 1.5))]
  a = mesh.load_mesh(_ascii(tris), "t.stl")
  b = mesh.load_mesh(_tetra_stl(), "t.stl")
  np.testing.assert_array_equal(a.vert, b.vert)
  np.testing.assert_array_equal(a.face, b.face)
  assert a.volume == b.volume


@pytest.mark.parametrize("data,name", [
    (b"", "e.stl"), (b"\0" * 84, "z.stl"), (b"v 0 0 0\nf 1 2 3\n", "bad.obj"),
    (b"v 0 0\n", "bad.obj"), (struct.pack("<4i", 2, 0, 0, 0), "bad.msh"), (b"x", "m.ply"),
    (b"v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 2 3\n", "flat.obj"),
])
def test_bad_meshes(data, name):
  with pytest.raises(ValueError):
    mesh.load_mesh(data, name)


def test_unknown_mode():
  with pytest.raises(ValueError):
    mesh.load_mesh(_CUBE_OBJ, "c.obj", inertia_mode="bogus")


# a cube whose top face is pushed in: not convex, so its hull differs from its surface
_DENT_OBJ = (b"v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nv 0 0 1\nv 1 0 1\nv 1 1 1\nv 0 1 1\n"
             b"v .5 .5 .3\nf 1 4 3 2\nf 1 2 6 5\nf 2 3 7 6\nf 3 4 8 7\nf 4 1 5 8\n"
             b"f 5 6 9\nf 6 7 9\nf 7 8 9\nf 8 5 9\n")


def _mesh_case(xml_mesh: str, assets: dict[str, bytes]):
  xml = (f"<mujoco><asset>{xml_mesh}</asset><worldbody><body><geom type='mesh' mesh='m' "
         "density='700'/></body></worldbody></mujoco>")
  return mujoco.MjModel.from_xml_string(xml, assets=assets)


@pytest.mark.parametrize("fname", sorted(_MESHES) + ["dent.obj"])
@pytest.mark.parametrize("scale", [(1.0, 1.0, 1.0), (0.5, 2.0, 1.5)])
def test_convex_inertia(fname, scale):
  data = _DENT_OBJ if fname == "dent.obj" else _MESHES[fname]
  model = _mesh_case(f"<mesh name='m' file='{fname}' inertia='convex' "
                     f"scale='{' '.join(map(repr, scale))}'/>", {fname: data})
  info = mesh.load_mesh(data, fname, scale=scale, inertia_mode="convex")
  assert _err(info.pos, model.mesh_pos[0]) <= TOL
  assert _err(info.quat, model.mesh_quat[0]) <= TOL
  # the frame's rounding can flip the last float32 bit of a vertex
  np.testing.assert_allclose(info.vert.astype(np.float32), model.mesh_vert, rtol=0, atol=1e-6)
  gm, gi = inertia.geom_mass_inertia(GeomType.MESH, model.geom_size[0], density=700, mesh=info)
  assert _err(gm, model.body_mass[1]) <= TOL
  assert _err(gi, model.body_inertia[1]) <= TOL
  if fname == "dent.obj":  # the hull is heavier than the dented cube
    assert info.volume > mesh.load_mesh(data, fname, scale=scale).volume


@pytest.mark.parametrize("seed", range(6))
def test_point_cloud_meshes(seed):
  """A mesh given only by vertices takes its convex hull as faces (MuJoCo: qhull's)."""
  pts = np.random.default_rng(seed).normal(size=(4 + 7 * seed, 3)).astype(np.float32)
  model = _mesh_case(f"<mesh name='m' vertex='{' '.join(repr(float(x)) for x in pts.ravel())}'/>",
                     {})
  info = mesh.process_mesh(pts, np.zeros((0, 3), dtype=np.int32), "m")
  assert len(info.face) == model.mesh_facenum[0]
  np.testing.assert_allclose(info.vert.astype(np.float32), model.mesh_vert, rtol=0, atol=1e-6)
  assert _err(info.pos, model.mesh_pos[0]) <= TOL
  assert _err(info.quat, model.mesh_quat[0]) <= TOL
  assert _err(info.volume * 700, model.body_mass[1]) <= TOL


@pytest.mark.parametrize("builtin,params", [("wedge", "4 3 60 30 0.3"), ("wedge", "5 2 180 90 0"),
                                            ("cone", "6 0"), ("cone", "7 0.4")])
def test_builtin_point_clouds(builtin, params):
  """The builtin meshes without faces (MuJoCo's wedge and cone) are the points MuJoCo makes,
  and their hull is the mesh (faces in another order than qhull's: compared as point clouds)."""
  model = _mesh_case(f"<mesh name='m' builtin='{builtin}' params='{params}'/>", {})
  vert, face, _ = mesh_builtin.make(builtin, np.array(params.split(), float))
  assert len(face) == 0
  info = mesh.process_mesh(vert, face, "m")
  assert len(info.face) == model.mesh_facenum[0] and len(info.vert) == model.mesh_vertnum[0]
  np.testing.assert_allclose(info.vert.astype(np.float32), model.mesh_vert, rtol=0, atol=1e-6)
  assert _err(info.pos, model.mesh_pos[0]) <= TOL
  assert _err(info.volume * 700, model.body_mass[1]) <= TOL


@pytest.mark.parametrize("builtin,params,word", [
    ("sphere", "5", "0..4"), ("sphere", "1 2", "needs 1 parameter"),
    ("hemisphere", "-1", "0..10"), ("supersphere", "2 1 1", "above 2"),
    ("supertorus", "8 1.5 1 1", "radius"), ("wedge", "2 2 200 30 0", "fields of view"),
    ("plate", "0 3", "positive"), ("torus", "3", "unknown builtin")])
def test_bad_builtin_meshes(tmp_path, builtin, params, word):
  path = tmp_path / "model.xml"
  path.write_text(f"<mujoco>\n<asset>\n<mesh name='m' builtin='{builtin}' params='{params}'/>"
                  "\n</asset>\n</mujoco>")
  with pytest.raises(flexor.MJCFError, match=word) as info:
    flexor.load_mjcf(path)
  assert (info.value.line, info.value.element) == (3, "mesh")
  with pytest.raises(Exception):   # MuJoCo refuses each of them too
    mujoco.MjModel.from_xml_path(str(path))


def test_convex_hull_is_closed_and_contains_the_points():
  rng = np.random.default_rng(1)
  pts = np.concatenate([rng.normal(size=(300, 3)), rng.uniform(-1, 1, size=(200, 3)),
                        np.array(np.meshgrid([0, 1], [0, 1], [0, 1])).reshape(3, -1).T * 3.0])
  hull = mesh.convex_hull(pts)
  edges = {tuple(e) for e in np.concatenate([hull[:, [0, 1]], hull[:, [1, 2]],
                                             hull[:, [2, 0]]]).tolist()}
  assert all((b, a) in edges for a, b in edges) and len(edges) == 3 * len(hull)
  a, b, c = pts[hull[:, 0]], pts[hull[:, 1]], pts[hull[:, 2]]
  normal = np.cross(b - a, c - a)
  normal /= np.linalg.norm(normal, axis=1, keepdims=True)
  assert np.max(np.einsum("fk,pk->pf", normal, pts) - np.einsum("fk,fk->f", normal, a)) < 1e-9
  with pytest.raises(ValueError):
    mesh.convex_hull(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0.0]]))


def _graph_sets(graph: np.ndarray) -> tuple[int, set[int], dict[int, set[int]], set[tuple]]:
  """A mesh_graph as (numface, hull vertex ids, {vertex id: neighbour ids}, {sorted triangle}):
  what must agree with MuJoCo's whatever order qhull gives."""
  numvert, numface = int(graph[0]), int(graph[1])
  edgeadr = graph[2:2 + numvert]
  globalid = graph[2 + numvert:2 + 2 * numvert]
  edges = graph[2 + 2 * numvert:2 + 3 * numvert + 3 * numface]
  neighbours = {}
  for i, a in enumerate(edgeadr):
    row = edges[a:a + int(np.argmax(edges[a:] < 0))]
    neighbours[int(globalid[i])] = {int(globalid[j]) for j in row}
  faces = graph[2 + 3 * numvert + 3 * numface:].reshape(-1, 3)
  return numface, set(globalid.tolist()), neighbours, {tuple(sorted(f)) for f in faces.tolist()}


def _polygons(model) -> dict[tuple[int, ...], np.ndarray]:
  """{vertex loop rotated to start at its smallest id: unit normal} of every mesh polygon."""
  out = {}
  for p in range(len(model.mesh_polyvertadr)):
    adr, num = model.mesh_polyvertadr[p], model.mesh_polyvertnum[p]
    loop = np.asarray(model.mesh_polyvert[adr:adr + num]).tolist()
    k = loop.index(min(loop))
    out[tuple(loop[k:] + loop[:k])] = np.asarray(model.mesh_polynormal[p], np.float64)
  return out


# MuJoCo's car.xml chassis: a point cloud under an uneven scale
_CAR = ("9 2 0  -10 10 10  9 -2 0  10 3 -10  10 -3 -10  -8 10 -10  -10 -10 10  -8 -10 -10  "
        "-5 0 20")
# a bevelled cube (MuJoCo's cube_3x3x3.xml cubelet): 6 squares, 12 bevels and 8 corners
_BEVEL = " ".join(f"{x} {y} {z}" for a in (0.85, -0.85) for b in (0.85, -0.85)
                  for x, y, z in ((1, a, b), (-1, a, b), (a, 1, b), (a, -1, b), (a, b, 1),
                                  (a, b, -1)))


def _one_mesh(fname: str) -> tuple[flexor.Model, mujoco.MjModel]:
  """Both engines' models of one free body holding mesh ``fname``: a file of _MESHES, "cloud"
  (60 random points), "car" (MuJoCo's car chassis) or "bevel" (its bevelled cubelet)."""
  if fname == "cloud":
    pts = np.random.default_rng(3).normal(size=(60, 3)).astype(np.float32)
    xml_mesh = f"<mesh name='m' vertex='{' '.join(repr(float(x)) for x in pts.ravel())}'/>"
  elif fname == "car":
    xml_mesh = f"<mesh name='m' scale='.01 .006 .0015' vertex='{_CAR}'/>"
  elif fname == "bevel":
    xml_mesh = f"<mesh name='m' scale='.0095 .0095 .0095' vertex='{_BEVEL}'/>"
  else:
    xml_mesh = f"<mesh name='m' file='{fname}'/>"
  xml = (f"<mujoco><asset>{xml_mesh}</asset><worldbody><body><freejoint/>"
         "<geom type='mesh' mesh='m'/></body></worldbody></mujoco>")
  assets = {fname: _MESHES[fname]} if fname in _MESHES else {}
  return (flexor.load_mjcf_string(xml, assets=assets, dtype=np.float64),
          mujoco.MjModel.from_xml_string(xml, assets=assets))


@pytest.mark.parametrize("fname", ["cube.obj", "skew.obj", "cloud"])
def test_hull_graph_matches_mujoco(fname):
  """A colliding mesh's mesh_graph has MuJoCo's layout and hull: the same vertices, triangle
  count and (where no facets are coplanar, so the triangulation is unique) the same neighbours
  and triangles; only qhull's order differs. Its polygons (coplanar hull faces merged) are
  MuJoCo's: the same vertex loops in the same direction, normals and map sizes; the extrema
  are the same vertices except where vertices tie along a direction."""
  ours, theirs = _one_mesh(fname)
  assert ours.mesh_graphadr.tolist() == theirs.mesh_graphadr.tolist() == [0]
  assert len(ours.mesh_graph) == len(theirs.mesh_graph)
  mine, ref = _graph_sets(np.asarray(ours.mesh_graph)), _graph_sets(theirs.mesh_graph)
  assert mine[:2] == ref[:2]
  if fname == "cloud":
    assert mine[2:] == ref[2:]
  polygons, expected = _polygons(ours), _polygons(theirs)
  assert polygons.keys() == expected.keys()
  assert max(np.abs(polygons[k] - expected[k]).max() for k in expected) < 1e-12
  np.testing.assert_array_equal(ours.mesh_polymapnum, theirs.mesh_polymapnum)
  if fname == "cloud":  # no ties: the extremal vertices themselves (but for direction 0)
    hull = lambda m, k: np.asarray(m.mesh_graph)[2 + m.mesh_graph[0] + m.mesh_extrema[0, k]]
    assert all(hull(ours, k) == hull(theirs, k) for k in range(27) if k != 13)


def _hull_rows_by_loop(m) -> list[dict]:
  """flexor's hull rows decoded mesh by mesh with plain loops over MuJoCo's mesh fields:
  {vertex id: (neighbour ids, polygon ids, previous vertex ids, quad vertex ids)}."""
  out = []
  graph = np.asarray(m.mesh_graph)
  for k in range(len(m.mesh_vertadr)):
    vertadr, adr = int(m.mesh_vertadr[k]), int(m.mesh_graphadr[k])
    if adr < 0 or m.mesh_vertnum[k] <= mesh.HULL_EXHAUSTIVE_MAX:
      ids, nbr = list(range(int(m.mesh_vertnum[k]))), {}
    else:
      numvert = int(graph[adr])
      edgeadr = graph[adr + 2:adr + 2 + numvert]
      ids = graph[adr + 2 + numvert:adr + 2 + 2 * numvert].tolist()
      edges = graph[adr + 2 + 2 * numvert:]
      nbr = {ids[i]: [ids[j] for j in edges[a:a + int(np.argmax(edges[a:] < 0))]]
             for i, a in enumerate(edgeadr)}
    rows = {}
    for v in ids:
      at = vertadr + v
      polys = (np.asarray(m.mesh_polymap[m.mesh_polymapadr[at]:][:m.mesh_polymapnum[at]])
               + int(m.mesh_polyadr[k])).tolist()
      prev, quad = [], []
      for p in polys:
        loop = np.asarray(m.mesh_polyvert[m.mesh_polyvertadr[p]:][:m.mesh_polyvertnum[p]])
        j = int(np.argmax(loop == v))
        prev.append(int(loop[j - 1]))
        quad.append([int(q) for q in m.mesh_polyquad[m.mesh_polyvertadr[p] + j] if q >= 0])
      rows[v] = (nbr.get(v, []), polys, prev, quad)
    out.append(rows)
  return out


@pytest.mark.parametrize("fname", ["cube.obj", "skew.obj", "cloud", "car", "bevel"])
def test_polygon_tables_are_mujocos(fname):
  """The hull's triangles come in qhull's order, and the polygons merged from them are MuJoCo
  4.0.1's to the bit: the same loops from the same first vertex, in the order its hash map
  visits them, the same polygon map, and Newell's normals. The multi-contact search clips a
  polygon from its first vertex and picks its quadrilateral by a search that starts there."""
  ours, theirs = _one_mesh(fname)
  faces = lambda g: g[2 + 3 * g[0] + 3 * g[1]:].reshape(-1, 3)
  np.testing.assert_array_equal(faces(np.asarray(ours.mesh_graph)), faces(theirs.mesh_graph))
  for name in ("mesh_polyvertadr", "mesh_polyvertnum", "mesh_polyvert", "mesh_polymapadr",
               "mesh_polymapnum", "mesh_polymap", "mesh_polynormal"):
    np.testing.assert_array_equal(np.asarray(getattr(ours, name)), getattr(theirs, name),
                                  err_msg=name)


def _torus(rings: int = 24, sides: int = 12) -> np.ndarray:
  """Vertices (rings * sides, 3) of a torus (radii 3 and 1): many equally far points, where the
  order in which qhull adds them decides which ones a vertex limit keeps."""
  u = 2 * np.pi * np.arange(rings)[:, None] / rings
  v = 2 * np.pi * np.arange(sides)[None, :] / sides
  pts = np.stack([(3 + np.cos(v)) * np.cos(u), (3 + np.cos(v)) * np.sin(u),
                  np.sin(v) + 0 * u], axis=-1)
  return pts.reshape(-1, 3).astype(np.float32)


@pytest.mark.parametrize("limit", [4, 5, 12, 64, 1000])
@pytest.mark.parametrize("shape", ["torus", "cloud"])
def test_maxhullvert_cuts_the_hull_as_mujoco(shape, limit):
  """``maxhullvert`` stops qhull once the hull has that many vertices, with MuJoCo's own qhull
  options: the same hull (vertices, and triangles in their order; the graph lists the vertices
  in another order, see ``mesh.hull_graph``), polygons and convex inertia, and the same
  accelerations of the cut hull resting on a plane."""
  pts = _torus() if shape == "torus" else np.random.default_rng(5).normal(
      size=(200, 3)).astype(np.float32)
  vertex = " ".join(repr(float(x)) for x in pts.ravel())
  xml = (f"<mujoco><asset><mesh name='m' maxhullvert='{limit}' inertia='convex' "
         f"vertex='{vertex}'/></asset><worldbody><geom type='plane' size='9 9 .1'/>"
         "<body pos='0 0 2.5' euler='.3 .2 .1'><freejoint/><geom type='mesh' mesh='m'/></body>"
         "</worldbody></mujoco>")
  ours = flexor.load_mjcf_string(xml, dtype=np.float64)
  theirs = mujoco.MjModel.from_xml_string(xml)
  graph, expected = np.asarray(ours.mesh_graph), theirs.mesh_graph
  nvert, nface = expected[:2]
  assert graph[:2].tolist() == [nvert, nface] and nvert <= limit
  np.testing.assert_array_equal(np.sort(graph[2 + nvert:2 + 2 * nvert]),
                                np.sort(expected[2 + nvert:2 + 2 * nvert]))
  np.testing.assert_array_equal(graph[-3 * nface:], expected[-3 * nface:])
  for name in ("mesh_polyvertadr", "mesh_polyvertnum", "mesh_polyvert", "mesh_polymap",
               "mesh_polynormal", "body_mass", "body_inertia", "body_ipos", "body_iquat"):
    np.testing.assert_allclose(np.asarray(getattr(ours, name)), getattr(theirs, name),
                               rtol=1e-12, atol=1e-12, err_msg=name)
  md = mujoco.MjData(theirs)
  md.qpos[2] = 1.0 if shape == "torus" else 0.5
  mujoco.mj_forward(theirs, md)
  d = flexor.forward(ours, flexor.make_data(ours).replace(qpos=md.qpos.copy()))
  assert md.ncon > 0
  np.testing.assert_allclose(np.asarray(d.qacc), md.qacc, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("path", [_CONVEX], ids=["convex"])
def test_hull_tables(path):
  """The hull rows the mesh colliders index (mesh.hull_tables) hold, for every mesh of the
  model, MuJoCo's hull graph, polygons at each vertex, loop neighbours, plane-contact quads and
  polygon loops, each vertex once."""
  if not os.path.exists(path):
    pytest.skip(f"{path} not present")
  m = flexor.load_mjcf(path)
  vert_of = lambda rows: [int(m.hull_vertid[r]) for r in rows if r >= 0]
  ends = np.append(m.mesh_hulladr, len(m.hull_vertid))
  for k, expected in enumerate(_hull_rows_by_loop(m)):
    vertadr = int(m.mesh_vertadr[k])
    rows = range(ends[k], ends[k + 1])
    assert sorted(int(m.hull_vertid[r]) - vertadr for r in rows) == sorted(expected)
    for r in rows:
      nbr, polys, prev, quad = expected[int(m.hull_vertid[r]) - vertadr]
      local = lambda ids: [v - vertadr for v in ids]
      assert local(vert_of(m.hull_nbr[r])) == nbr
      assert [p for p in m.hull_poly[r] if p >= 0] == polys
      assert local(vert_of(m.hull_prev[r][:len(polys)])) == prev
      assert [local(vert_of(q)) for q in m.hull_quad[r][:len(polys)]] == quad
    big = m.mesh_vertnum[k] > mesh.HULL_EXHAUSTIVE_MAX
    assert m.mesh_hullstart[k].tolist() == (
        [int(m.mesh_hulladr[k]) + int(s) for s in m.mesh_extrema[k]] if big
        else [int(m.mesh_hulladr[k])] * 27)
  for p in range(len(m.mesh_polyvertadr)):
    loop = m.mesh_polyvert[m.mesh_polyvertadr[p]:][:m.mesh_polyvertnum[p]]
    k = int(np.searchsorted(m.mesh_polyadr, p, side="right") - 1)
    assert [v - m.mesh_vertadr[k] for v in vert_of(m.mesh_polyloop[p][:len(loop)])] == \
        loop[::-1].tolist()


def test_meshes_that_do_not_collide_have_no_hull_rows():
  """MuJoCo builds no graph for a mesh no colliding geom uses (dog.xml's 162 meshes); such a
  mesh beyond the exhaustive size gets no hull rows, so its size costs the colliders nothing."""
  m = flexor.load_mjcf(_DOG)
  assert np.all(m.mesh_graphadr < 0) and len(m.hull_vertid) == 0
  assert np.all(m.mesh_hullstart == -1)
