"""Collision detection: contacts of the candidate geom pairs (MuJoCo's ``mj_collision``).

The candidates are found at compile time (``flexor.mjcf.contact_pairs``), each with a static
block of contact slots (``collision_conadr``, ``collision_connum``). Here every candidate runs
its narrow phase (``flexor.collision_primitive``), one vectorised kernel per geom-type pair (the
GJK/EPA pairs of ``flexor.collision_convex`` all share one), so compile time grows with the
number of type pairs, not of geom pairs. A slot whose contact the narrow phase does not produce
has ``contact_exist`` False.

A candidate whose geoms' bounding spheres (geom_rbound, grown by the pair's margin and gap)
lie apart has no narrow phase, as MuJoCo's mj_filterSphere; a type pair with many candidates
(above ``CHUNKED_ABOVE``) runs its kernel only on those that pass, a chunk at a time.

Large scenes have two more knobs. MJX's ``max_geom_pairs`` (a ``<custom><numeric>``) is a broad
phase: each type pair's kernel runs on that many candidates, those whose bounding spheres
(geom_rbound and the pair's margin) are nearest; pairs in reach beyond it are counted in
``ncollision_dropped``. ``<size nconmax>`` compacts the contacts into fewer Data slots (see
``flexor.mjcf.constraint_rows``), so the solver's rows are those of contacts that can exist at
once; contacts beyond it are counted in ``ncon_dropped``.

Contact parameters follow ``mj_contactParam``: an explicit ``<pair>`` brings its own; otherwise
the geom of higher priority decides, and at equal priority condim and friction are the maxima,
solref and solimp are mixed by solmix (direct-form solref: the minima), margins, gaps and
adhesions add. A contact is found up to margin + gap and has constraint rows below the margin;
an adhesive one (MuJoCo 4's ``adhesion``) keeps a single frictionless row in the gap, dim 1.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from flexor import collision_convex, collision_hfield, collision_multi, collision_primitive, math
from flexor.mjcf import constraint_rows
from flexor.types import ContactGradient, Data, DisableBit, EnableBit, GeomType, Model

_MINMU = 1e-5  # mjMINMU: smallest friction coefficient
# A type pair with more candidates than CHUNKED_ABOVE runs its narrow phase on the candidates
# whose bounding spheres overlap (``_near``), CHUNK at a time (``math.chunked``): a large scene
# pays for the pairs that are close, where one world is simulated; under vmap every chunk runs.
CHUNK = 64
CHUNKED_ABOVE = 2 * CHUNK
_UNBOUNDED = (GeomType.PLANE, GeomType.HFIELD)


def _mix(m: Model, g1: np.ndarray, g2: np.ndarray) -> dict[str, jax.Array]:
  """Contact parameters of dynamic geom pairs (n,): friction (n, 5), solref, solimp and adhesion
  (each geom's pull adds up)."""
  p1, p2 = m.geom_priority[g1], m.geom_priority[g2]
  first, second = jnp.asarray(p1 > p2), jnp.asarray(p1 < p2)
  s1, s2 = m.geom_solmix[g1], m.geom_solmix[g2]
  small1, small2 = s1 < 1e-15, s2 < 1e-15
  mix = jnp.where(small1 & small2, 0.5, jnp.where(small1, 0.0, jnp.where(
      small2, 1.0, s1 / jnp.where(small1 | small2, 1.0, s1 + s2))))[:, None]
  ref1, ref2 = m.geom_solref[g1], m.geom_solref[g2]
  standard = (ref1[:, :1] > 0) & (ref2[:, :1] > 0)
  solref = jnp.where(standard, mix * ref1 + (1 - mix) * ref2, jnp.minimum(ref1, ref2))
  solimp = mix * m.geom_solimp[g1] + (1 - mix) * m.geom_solimp[g2]
  fri = jnp.maximum(m.geom_friction[g1], m.geom_friction[g2])

  def pick(own1, own2, mixed):
    shape = (-1,) + (1,) * (mixed.ndim - 1)
    return jnp.where(first.reshape(shape), own1, jnp.where(second.reshape(shape), own2, mixed))

  solref = pick(ref1, ref2, solref)
  solimp = pick(m.geom_solimp[g1], m.geom_solimp[g2], solimp)
  fri = pick(m.geom_friction[g1], m.geom_friction[g2], fri)
  friction = fri[:, np.array([0, 0, 1, 2, 2])]
  adhesion = pick(m.geom_adhesion[g1], m.geom_adhesion[g2],
                  m.geom_adhesion[g1] + m.geom_adhesion[g2])
  return dict(friction=friction, solref=solref, solimp=solimp, adhesion=adhesion)


def _pair_params(m: Model) -> dict[str, jax.Array]:
  """Per-candidate contact parameters (ncollision, ...): margin, gap, friction, solref,
  solreffriction, solimp, adhesion."""
  g1, g2 = m.collision_geom[:, 0], m.collision_geom[:, 1]
  pairid = m.collision_pairid
  explicit = pairid >= 0
  pid = np.maximum(pairid, 0)
  mixed = _mix(m, g1, g2)
  dtype = m.geom_margin.dtype

  def choose(pair_value, geom_value):
    if not m.npair:
      return geom_value
    shape = (-1,) + (1,) * (geom_value.ndim - 1)
    return jnp.where(jnp.asarray(explicit).reshape(shape), pair_value[pid], geom_value)

  zeros2 = jnp.zeros((len(pairid), 2), dtype)
  params = dict(
      margin=choose(m.pair_margin, m.geom_margin[g1] + m.geom_margin[g2]),
      gap=choose(m.pair_gap, m.geom_gap[g1] + m.geom_gap[g2]),
      friction=choose(m.pair_friction, mixed["friction"]),
      solref=choose(m.pair_solref, mixed["solref"]),
      solreffriction=choose(m.pair_solreffriction, zeros2),
      solimp=choose(m.pair_solimp, mixed["solimp"]),
      adhesion=choose(m.pair_adhesion, mixed["adhesion"]))
  if m.opt.enabled(EnableBit.OVERRIDE):
    n = len(pairid)
    params.update(margin=jnp.broadcast_to(m.opt.o_margin, (n,)),
                  friction=jnp.broadcast_to(m.opt.o_friction, (n, 5)),
                  solref=jnp.broadcast_to(m.opt.o_solref, (n, 2)),
                  solreffriction=jnp.broadcast_to(m.opt.o_solref, (n, 2)),
                  solimp=jnp.broadcast_to(m.opt.o_solimp, (n, 5)))
  params["friction"] = jnp.maximum(_MINMU, params["friction"])
  if m.opt.contact_gradient == ContactGradient.SMOOTH:
    params.update(_soft_layer(params["margin"], params["solimp"], m.opt.contact_gradient_width))
  return params


def _soft_layer(margin: jax.Array, solimp: jax.Array, width: jax.Array) -> dict[str, jax.Array]:
  """margin (n,) and solimp (n, 5) of ContactGradient.SMOOTH: contacts ``width`` (m) further
  out, whose impedance rises from zero at that distance to dmax at the original margin (solimp's
  own width becomes the layer's), so a contact force and its gradient vanish continuously at the
  edge instead of starting with a jump."""
  layer = jnp.broadcast_to(width, margin.shape)[:, None].astype(solimp.dtype)
  soft = jnp.concatenate([jnp.zeros_like(layer), solimp[:, 1:2], layer, solimp[:, 3:]], axis=-1)
  return dict(margin=margin + width, solimp=soft)


def with_contact_gradient(m: Model, mode: ContactGradient | str,
                          width: float | jax.Array | None = None,
                          timeconst: float | jax.Array | None = None) -> Model:
  """``m`` with ``opt.contact_gradient = mode`` ("exact", "smooth" or "distance", see
  ``ContactGradient``) and, where given, the layer's ``width`` (m) and the DISTANCE surrogate's
  layer ``timeconst`` (s)."""
  mode = ContactGradient[mode.upper()] if isinstance(mode, str) else ContactGradient(mode)
  opt = m.opt.replace(contact_gradient=int(mode))
  dtype = m.opt.timestep.dtype
  if width is not None:
    opt = opt.replace(contact_gradient_width=jnp.asarray(width, dtype))
  if timeconst is not None:
    opt = opt.replace(contact_gradient_timeconst=jnp.asarray(timeconst, dtype))
  return m.replace(opt=opt)


def hulls(m: Model) -> collision_primitive.Hulls:
  """The model's convex hull tables for the mesh colliders. Vertices and polygon normals are
  gathered from the traced mesh_vert and mesh_polynormal, so they carry derivatives."""
  dtype = m.mesh_vert.dtype
  return collision_primitive.Hulls(
      vert=m.mesh_vert[m.hull_vertid] if len(m.hull_vertid) else jnp.zeros((1, 3), dtype),
      nbr=jnp.asarray(m.hull_nbr), adr=jnp.asarray(m.mesh_hulladr),
      num=jnp.asarray(np.diff(np.append(m.mesh_hulladr, len(m.hull_vertid))), jnp.int32),
      start=jnp.asarray(m.mesh_hullstart),
      polynum=jnp.asarray(m.mesh_polynum, jnp.int32),
      poly=jnp.asarray(m.hull_poly), prev=jnp.asarray(m.hull_prev), quad=jnp.asarray(m.hull_quad),
      normal=m.mesh_polynormal if m.nmeshpoly else jnp.zeros((1, 3), dtype),
      loop=jnp.asarray(m.mesh_polyloop),
      nloop=jnp.asarray(m.mesh_polyvertnum, jnp.int32))


def mesh_ids(m: Model, geoms: np.ndarray) -> np.ndarray:
  """The mesh of each of ``geoms`` (n,) that is a mesh, 0 for the others (int32), checking that
  every such mesh has hull rows (a colliding mesh always has: MuJoCo builds its graph)."""
  is_mesh = m.geom_type[geoms] == GeomType.MESH
  mesh = np.where(is_mesh, m.geom_dataid[geoms], 0).astype(np.int32)
  bare = is_mesh & (m.mesh_hullstart[mesh, 0] < 0) if m.nmesh else is_mesh
  if np.any(bare):
    name = m.names_geom[int(geoms[np.argmax(bare)])]
    raise ValueError(f"geom {name!r}: its mesh has no convex hull graph (MuJoCo builds one "
                     "only for meshes that collide)")
  return mesh


def _kernel(m: Model, cands: np.ndarray, args: tuple[jax.Array, ...]
            ) -> tuple[Callable[..., collision_primitive.Contacts], tuple[Any, ...]]:
  """The narrow phase of one group of candidates ``cands`` (n,): its batched collider
  ``collide(active, *inputs)`` and the inputs it takes, each with leading axis n; ``active``
  (n,) bool marks the candidates to collide (the others have no contact, and the GJK/EPA
  searches take no step for them). ``args`` as ``collision_primitive``'s colliders take them;
  the GJK/EPA pairs (``collision_convex``) all share one kernel."""
  g1, g2 = m.collision_geom[cands, 0], m.collision_geom[cands, 1]
  t1, t2 = m.geom_type[g1], m.geom_type[g2]
  key = (int(t1[0]), int(t2[0]))
  if key not in collision_convex.PAIRS and key[0] != GeomType.HFIELD:
    collide = collision_primitive.COLLIDERS[key]
    extra = ()
    if key[1] == GeomType.MESH:
      collide = functools.partial(collide, hulls=hulls(m))
      extra = (jnp.asarray(mesh_ids(m, g2)),)

    def primitive(active: jax.Array, *inputs: jax.Array) -> collision_primitive.Contacts:
      dist, pos, frame, exist = jax.vmap(collide)(*inputs)
      return dist, pos, frame, exist & active[:, None]
    return primitive, (*args, *extra)
  mesh1, mesh2 = jnp.asarray(mesh_ids(m, g1)), jnp.asarray(mesh_ids(m, g2))
  table = hulls(m) if GeomType.MESH in (*t1.tolist(), *t2.tolist()) else None
  tol = jnp.broadcast_to(m.opt.ccd_tolerance, (len(g1),))
  xpos1, xmat1, size1, xpos2, xmat2, size2, margin = args
  if key[0] == GeomType.HFIELD:
    return _hfield_kernel(m, cands, args, mesh2, table, tol)
  multi = not m.opt.disabled(DisableBit.MULTICCD) and any(
      collision_multi.supports(a, b) for a, b in zip(t1.tolist(), t2.tolist()))
  collide = collision_convex.make_collider((set(t1.tolist()), set(t2.tolist())),
                                           m.opt.ccd_iterations, multi, table)
  return (lambda active, *inputs: jax.vmap(collide)(*inputs, active),
          (jnp.asarray(t1), xpos1, xmat1, size1, jnp.asarray(t2), xpos2, xmat2, size2, margin,
           mesh1, mesh2, tol))


def _hfield_kernel(m: Model, cands: np.ndarray, args: tuple[jax.Array, ...], mesh2: jax.Array,
                   table: collision_primitive.Hulls | None, tol: jax.Array
                   ) -> tuple[Callable[..., collision_primitive.Contacts], tuple[Any, ...]]:
  """_kernel of the height field candidates ``cands`` (n,): one window, the widest any of them
  needs, and as many slots as the most any of them has."""
  g1, g2 = m.collision_geom[cands, 0], m.collision_geom[cands, 1]
  h = m.geom_dataid[g1]
  window = tuple(int(w) for w in np.max(m.collision_window[cands], axis=0))
  k = int(np.max(m.collision_connum[cands]))
  collide = collision_hfield.make_collider(tuple(m.geom_type[g2].tolist()), m.opt.ccd_iterations,
                                           window, k, table)
  xpos1, xmat1, _, xpos2, xmat2, size2, margin = args
  # the height field's own bounding tests decide which prisms to collide
  return (lambda active, *inputs: collide(*inputs),
          (m.hfield_data, jnp.asarray(m.hfield_adr[h]), m.hfield_size[h],
           jnp.asarray(m.hfield_nrow[h]), jnp.asarray(m.hfield_ncol[h]), xpos1, xmat1,
           jnp.asarray(m.geom_type[g2]), xpos2, xmat2, size2, m.geom_rbound[g2], margin, mesh2,
           tol))


def _near(m: Model, d: Data, g1: np.ndarray, g2: np.ndarray, reach: jax.Array) -> jax.Array:
  """mj_filterSphere's test of the candidates (g1, g2) (n,) bool: False where both geoms are
  bounded and their bounding spheres (geom_rbound), grown by ``reach``, lie apart, so that no
  contact can exist; such candidates take no narrow phase, as in MuJoCo."""
  rb1, rb2 = m.geom_rbound[g1], m.geom_rbound[g2]
  dif = jax.lax.stop_gradient(d.geom_xpos[g1] - d.geom_xpos[g2])
  bound = jax.lax.stop_gradient(rb1 + rb2 + reach)
  distsqr = (dif[:, 0] * dif[:, 0] + dif[:, 1] * dif[:, 1]) + dif[:, 2] * dif[:, 2]
  return ~((rb1 > 0) & (rb2 > 0) & (distsqr > bound * bound))


def _nearest(m: Model, d: Data, g1: np.ndarray, g2: np.ndarray, reach: jax.Array
             ) -> tuple[jax.Array, jax.Array]:
  """MJX's max_geom_pairs broad phase: the candidates (g1, g2) (n,) whose bounding spheres
  (geom_rbound, grown by ``reach``) are nearest, max_geom_pairs of them (k,), and how many more
  within reach had to be left out."""
  gap = (math.safe_norm(d.geom_xpos[g1] - d.geom_xpos[g2], axis=-1)
         - m.geom_rbound[g1] - m.geom_rbound[g2] - reach)
  _, take = jax.lax.top_k(-gap, m.max_geom_pairs)
  return take, jnp.maximum(jnp.sum(gap <= 0).astype(jnp.int32) - m.max_geom_pairs, 0)


def contacts_on(m: Model) -> bool:
  """Whether the model makes contacts: it has contact slots and the options disable neither
  contacts nor constraints (static; mj_collision returns at once otherwise). Where it is false,
  the contact_* fields keep make_data's values and every stage that reads them is skipped."""
  return (bool(m.nconmax) and not m.opt.disabled(DisableBit.CONTACT)
          and not m.opt.disabled(DisableBit.CONSTRAINT))


def collision(m: Model, d: Data, surrogate: bool = False) -> Data:
  """Computes the contact_* fields and ncon (mj_collision), after kinematics.

  With ``surrogate`` (the gradient pass of ContactGradient.DISTANCE), pairs are also found up
  to ``opt.contact_gradient_width`` beyond their margin, and those beyond the margin get the
  soft layer's impedance (``_soft_layer``) with a weak spring (solref's time constant
  ``opt.contact_gradient_timeconst``): its force is small, so the surrogate's active set and
  stiffness stay near MuJoCo's, but its derivative points the pair apart. Contacts within the
  margin keep MuJoCo's parameters.
  """
  if not contacts_on(m):
    return d
  with jax.named_scope("collision"):
    dtype = d.qpos.dtype
    n = m.nconslot
    geom = m.collision_geom
    types = m.geom_type[geom]
    params = _pair_params(m)
    reach = params["margin"] + params["gap"]
    if surrogate:
      reach = reach + m.opt.contact_gradient_width
    # each group's contacts, flattened, and the slot of each (static, except under
    # max_geom_pairs); Data's slots then gather them
    found: list[collision_primitive.Contacts] = []
    found_slots: list[np.ndarray | jax.Array] = []
    convex = np.array([tuple(t) in collision_convex.PAIRS for t in types.tolist()], bool)
    field = types[:, 0] == GeomType.HFIELD
    single = ~convex & ~field
    groups = [np.flatnonzero(single & (types[:, 0] == a) & (types[:, 1] == b))
              for a, b in sorted({tuple(t) for t in types[single].tolist()})]
    groups += [np.flatnonzero(shared) for shared in (convex, field) if shared.any()]
    skipped = jnp.zeros((), jnp.int32)
    for cands in groups:
      g1, g2 = geom[cands, 0], geom[cands, 1]
      args = (d.geom_xpos[g1], d.geom_xmat[g1], m.geom_size[g1],
              d.geom_xpos[g2], d.geom_xmat[g2], m.geom_size[g2], reach[cands])
      collide, inputs = _kernel(m, cands, args)
      near = _near(m, d, g1, g2, reach[cands])
      conadr = m.collision_conadr[cands]
      # a plane's or height field's bounding sphere is unbounded: those pairs always run
      bounded = not np.isin(types[cands[0]], _UNBOUNDED).any()
      max_pairs = bounded and 0 <= m.max_geom_pairs < len(cands)
      if max_pairs:
        take, left_out = _nearest(m, d, g1, g2, reach[cands])
        skipped = skipped + left_out
        if not m.max_geom_pairs:
          continue
        inputs = jax.tree.map(lambda x: x[take], inputs)
        near = near[take]
        conadr = jnp.asarray(conadr)[take]
      if bounded and len(near) > CHUNKED_ABOVE:
        c_dist, c_pos, c_frame, c_exist = math.chunked(near, collide, inputs, CHUNK)
      else:
        c_dist, c_pos, c_frame, c_exist = collide(near, *inputs)
      k = c_dist.shape[1]
      # a candidate with fewer slots than the kernel returns (height fields) drops the rest
      own = np.arange(k)[None, :] < m.collision_connum[cands][:, None]
      if max_pairs:
        own = jnp.asarray(own)[take]
      xp = jnp if max_pairs else np
      found_slots.append(xp.where(own, conadr[:, None] + np.arange(k)[None, :], n).reshape(-1))
      found.append((c_dist.reshape(-1), c_pos.reshape(-1, 3), c_frame.reshape(-1, 3, 3),
                    c_exist.reshape(-1)))
    dist, pos, frame, exist = _to_slots(n, found, found_slots, dtype)
    owner = np.repeat(np.arange(m.ncollision), m.collision_connum)
    per_slot = {key: value[owner] for key, value in params.items()}
    if surrogate:
      layer = _soft_layer(per_slot["margin"], per_slot["solimp"], m.opt.contact_gradient_width)
      beyond = dist >= per_slot["margin"]
      per_slot["margin"] = jnp.where(beyond, layer["margin"], per_slot["margin"])
      per_slot["solimp"] = jnp.where(beyond[:, None], layer["solimp"], per_slot["solimp"])
      tc = m.opt.contact_gradient_timeconst
      weak = jnp.stack([tc, jnp.ones_like(tc)])[None, :]
      per_slot["solref"] = jnp.where(beyond[:, None], weak, per_slot["solref"])
    dim = jnp.asarray(m.collision_dim[owner])
    if m.flg_adhesion:
      # adhesive contacts in the gap keep a frictionless row that pulls (mj_setContact)
      dim = jnp.where((per_slot["adhesion"] != 0) & (dist >= per_slot["margin"]), 1, dim)
    fields = dict(contact_exist=exist, contact_dist=dist, contact_pos=pos, contact_frame=frame,
                  contact_includemargin=per_slot["margin"],
                  contact_adhesion=per_slot["adhesion"],
                  contact_friction=per_slot["friction"], contact_solref=per_slot["solref"],
                  contact_solreffriction=per_slot["solreffriction"],
                  contact_solimp=per_slot["solimp"],
                  contact_dim=dim,
                  contact_geom=jnp.asarray(geom[owner].reshape(-1, 2)))
    fields, dropped = _compact(m, fields)
    return d.replace(ncon=jnp.sum(fields["contact_exist"]).astype(jnp.int32),
                     ncon_dropped=dropped, ncollision_dropped=skipped, **fields)


def _to_slots(n: int, found: list[collision_primitive.Contacts],
              slots: list[np.ndarray | jax.Array], dtype: Any) -> collision_primitive.Contacts:
  """The narrow phase's contacts (dist, pos, frame, exist), group by group, in the n slots
  ``slots`` (one per contact, n: none) name; a slot no group writes holds no contact. Static
  slots are one gather (``math.take``: none where the groups' contacts are in slot order): XLA
  CPU runs a scatter as a loop, one per group and field."""
  empty = (jnp.zeros(n, dtype), jnp.zeros((n, 3), dtype), jnp.zeros((n, 3, 3), dtype),
           jnp.zeros(n, bool))
  fixed = [i for i, slot in enumerate(slots) if isinstance(slot, np.ndarray)]
  out = empty
  if fixed:
    flat = np.concatenate([slots[i] for i in fixed])
    src = np.full(n + 1, len(flat))
    src[flat] = np.arange(len(flat))
    out = tuple(math.take(jnp.concatenate([*(found[i][f] for i in fixed), empty[f][:1]]),
                          src[:n]) for f in range(4))
  for i, slot in enumerate(slots):
    if i not in fixed:
      out = tuple(field.at[slot].set(value, mode="drop") for field, value in zip(out, found[i]))
  return out


def _groups(m: Model) -> list[constraint_rows.ContactGroup] | None:
  return constraint_rows.contact_groups(m.collision_dim, m.collision_connum, m.size_nconmax)


def _compact(m: Model, fields: dict[str, jax.Array]) -> tuple[dict[str, jax.Array], jax.Array]:
  """The contact_* ``fields`` of the narrow-phase slots (nconslot, ...) in Data's slots
  (nconmax, ...): each condim's existing contacts in order, as many as its group holds; and the
  number of contacts left out."""
  groups = _groups(m)
  if groups is None:
    return fields, jnp.zeros((), jnp.int32)
  exist = fields["contact_exist"]
  picks, found = [], []
  for g in groups:
    mine = exist[g.slots]
    # the g.size first existing slots; a group with fewer fills up with its last slot, unused
    first, _ = math.compact(mine, g.size, len(g.slots) - 1)
    picks.append(jnp.asarray(g.slots)[first])
    found.append(jnp.sum(mine).astype(jnp.int32))
  out = {name: value[jnp.concatenate(picks)] for name, value in fields.items()}
  held = np.concatenate([np.arange(g.size) for g in groups])
  count = jnp.concatenate([jnp.broadcast_to(n, (g.size,)) for n, g in zip(found, groups)])
  out["contact_exist"] = out["contact_exist"] & (held < count)
  sizes = np.array([g.size for g in groups], np.int32)
  return out, jnp.sum(jnp.maximum(jnp.stack(found) - sizes, 0)).astype(jnp.int32)


def slot_geom(m: Model, d: Data) -> np.ndarray | jax.Array:
  """The geom pair of each of Data's contact slots (nconmax, 2): static where each slot belongs
  to one candidate pair, else ``d.contact_geom``."""
  if _groups(m) is None:
    return m.collision_geom[np.repeat(np.arange(m.ncollision), m.collision_connum)]
  return d.contact_geom
