"""``<attach>``: model composition, expanded on the XML tree before the compiler reads it.

``<asset><model name file>`` names another MJCF file; ``<attach model body|frame prefix>`` in the
worldbody copies one of its bodies (with its subtree), one of its frames, or, with neither, its
whole worldbody, to that place, every name prefixed. Without ``model`` the body or frame comes
from this model itself (a self-attach). What MuJoCo's ``mjs_attach`` does, and this module too:

* the copy keeps the child's own default classes (renamed with the prefix, and not below this
  model's ``main``: this model's defaults never reach it) and its assets, all renamed; a
  self-attach copies neither;
* a body lands in a new identity frame of the enclosing body or frame, a frame keeps its pose
  inside the enclosing one, and a whole worldbody lands in one new frame;
* the child's contact pairs, excludes, tendons, equalities, actuators and sensors are offered,
  prefixed, by MuJoCo's ``ResolveReferences`` rules (:mod:`flexor.mjcf.replicate`), after this
  model's own (MuJoCo reads the worldbody last);
* the child's keyframes become keyframes of this model (:class:`AttachedKey`) that set the
  attached joints, actuators and mocap bodies and leave the rest at their defaults. As in
  MuJoCo, an attach records each keyframe's values on every element of the child, and the next
  attach that copies an element takes all it has recorded since it was last copied: a joint
  attached for the first time by a model's third attach is set by all three attaches' keys;
* ``<option>`` and ``<size>`` settings that differ are resolved by ``<compiler conflict>``:
  ``warning`` (MuJoCo's default) keeps this model's values and warns, ``error`` refuses, ``merge``
  adopts what only the child sets, takes the smaller step and tolerances and the larger
  iteration counts and sizes, and refuses the rest (``user_resolver.cc``).

An attached element is read with the ``<compiler>`` settings of the model it came from (angle
unit, Euler sequence, autolimits, inertia from geoms and its bounds, free-joint alignment), as
MuJoCo reads it: ``Source.compilers`` records them where each copy starts.

Attaches and ``<replicate>`` elements expand in document order, as MuJoCo reads the worldbody,
so what each copies (and the order of the copies) is MuJoCo's.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import warnings
from typing import Any, Callable

import numpy as np
from lxml import etree

from flexor.mjcf import replicate
from flexor.mjcf.defaults import Defaults
from flexor.mjcf.parse import Source, load_model_asset
from flexor.types import JNT_NQ, JNT_NV, EnableBit

# elements that take a class, and attributes naming assets (renamed with the prefix)
_ASSET_REFERENCES = {"geom": ("mesh", "material", "hfield"), "site": ("material",),
                     "tendon": ("material",), "spatial": ("material",), "fixed": ("material",),
                     "material": ("texture",), "skin": ("material",)}
_ASSET_DIR = {"mesh": "meshdir", "hfield": "meshdir", "skin": "meshdir", "texture": "texturedir"}
_FILE_ATTRS = ("file", "fileright", "fileleft", "fileup", "filedown", "filefront", "fileback")
# <option> settings, by how "merge" resolves them
_MIN = ("timestep", "tolerance", "ls_tolerance", "noslip_tolerance", "ccd_tolerance",
        "sleep_tolerance")
_MAX = ("iterations", "ls_iterations", "noslip_iterations", "ccd_iterations", "sdf_iterations",
        "sdf_initpoints")
_UNMERGEABLE = ("impratio", "density", "viscosity", "o_margin", "integrator", "cone", "jacobian",
                "solver", "gravity", "wind", "magnetic", "o_solref", "o_solimp", "o_friction")
_SIZES = (("njmax", "-1"), ("nconmax", "-1"), ("nkey", "0"))   # no authored tracking: defaults
# <flag> attributes whose "enable" sets a bit of enableflags (the others' "disable" sets one of
# disableflags)
_ENABLE_FLAGS = frozenset(name.lower() for name in EnableBit.__members__)
# sections whose elements take a default class
_CLASSED = ("contact", "tendon", "equality", "actuator")


@dataclasses.dataclass
class AttachedKey:
  """A keyframe an attached model brought: what it sets, by the element it sets it on.

  ``joints``: (joint element in this model's tree, qpos values, qvel values); ``actuators``:
  (actuator element, act values, ctrl values); ``mocap``: (body element, pos, quat). Elements
  are those of the expanded tree (a ``<replicate>`` around the attach passes them to its first
  copy, as MuJoCo does)."""

  element: etree._Element
  name: str
  time: float
  joints: list[tuple[etree._Element, np.ndarray, np.ndarray]]
  actuators: list[tuple[etree._Element, np.ndarray, np.ndarray]]
  mocap: list[tuple[etree._Element, np.ndarray, np.ndarray]]


ChildKeys = Callable[[Source], dict[str, Any]]


@dataclasses.dataclass
class _Child:
  """A model asset, loaded once: its source, default classes, compiler settings, (if it has
  keyframes) what
  mapping them needs (computed before anything is copied, so its elements are those copied),
  and the keyframe values recorded on each of its elements and not yet copied, as (key, kind,
  values, values)."""

  source: Source
  defaults: Defaults
  compiler: Any
  keys: dict[str, Any] | None
  pending: dict[etree._Element, list[tuple[AttachedKey, str, np.ndarray, np.ndarray]]] = (
      dataclasses.field(default_factory=dict))


def expand(source: Source, compiler: Any, compiler_of: Callable[[Source], Any],
           child_keys: ChildKeys) -> None:
  """Expands every ``<attach>`` and ``<replicate>`` of ``source``, in place, in document order
  as MuJoCo reads the worldbody (an attach inside a replicate first, then the replicate).

  Args:
    source: the model, includes expanded.
    compiler: its ``<compiler>`` settings (``compile_body.Compiler``).
    compiler_of: reads a child model's ``<compiler>`` settings.
    child_keys: compiles a child model with keyframes and returns what mapping them needs:
      ``key_*`` arrays, ``names_key``, ``jnt_qposadr``, ``jnt_dofadr``, ``jnt_type``,
      ``actuator_actadr``, ``actuator_actnum``, ``actuator_ctrlnum``, ``jnt_elements``,
      ``actuator_elements``, ``mocap_elements``.
  """
  models: dict[str, etree._Element] | None = None
  children: dict[str, _Child] = {}
  registered: set[tuple[str | None, str]] = set()
  while True:
    element = next((e for world in source.root.iterchildren("worldbody")
                    for e in world.iter("attach", "replicate")
                    if e.tag == "attach" or next(e.iter("attach"), None) is None), None)
    if element is None:
      return
    if element.tag == "replicate":
      pass_keys_to_copy(source, replicate.expand(source, compiler, element))
      continue
    _require(source, element, "prefix")
    prefix = element.get("prefix")
    name = element.get("model")
    child = None
    if name is not None:
      models = _model_assets(source) if models is None else models
      if name not in models:
        raise source.error(element, f"could not find model {name!r} (the <asset><model> "
                           f"elements name: {', '.join(sorted(models)) or 'none'})", "model")
      if name not in children:
        loaded = load_model_asset(source, models[name])
        _refuse_unsupported(loaded)
        settings = compiler_of(loaded)
        expand(loaded, settings, compiler_of, child_keys)
        keys = child_keys(loaded) if any(True for _ in loaded.root.iter("key")) else None
        children[name] = _Child(loaded, Defaults(loaded), settings, keys)
      child = children[name]
    _attach(source, element, child, prefix, (name, prefix) not in registered)
    registered.add((name, prefix))


def _require(source: Source, element: etree._Element, attribute: str) -> None:
  if element.get(attribute) is None:
    raise source.error(element, "missing required attribute", attribute)


def _model_assets(source: Source) -> dict[str, etree._Element]:
  """``<asset><model>`` elements by name (default: the model attribute of the file's root)."""
  out = {}
  for section in source.sections("asset"):
    for element in section.iterchildren("model"):
      _require(source, element, "file")
      name = element.get("name")
      if name is None:
        name = load_model_asset(source, element).root.get("model", "")
      out[name] = element
  return out


def _refuse_unsupported(child: Source) -> None:
  for tag in ("deformable", "extension"):
    for element in child.sections(tag):
      raise child.error(element, f"attaching a model with <{tag}> is not supported by flexor yet")


# ------------------------------------------------------------------------------------------------
# one attach


def _attach(source: Source, element: etree._Element, loaded: _Child | None, prefix: str,
            first: bool) -> None:
  """Replaces ``element`` (an ``<attach>``) by the prefixed copy it asks for (of this model's
  own body or frame where ``loaded`` is None)."""
  rename = lambda name: prefix + name
  external = loaded is not None
  child = loaded.source if loaded is not None else source
  defaults = loaded.defaults if loaded is not None else None
  kind = "body" if element.get("body") is not None else (
      "frame" if element.get("frame") is not None else None)
  if kind is None and not external:
    raise source.error(element, "a self-attach (no model) needs a body or a frame", "body")
  if kind is None:
    originals = [e for world in child.root.iterchildren("worldbody") for e in world
                 if isinstance(e.tag, str)]
    context = None
  else:
    target = element.get(kind)
    found = [e for world in child.root.iterchildren("worldbody") for e in world.iter(kind)
             if e.get("name") == target]
    if not found:
      where = f"model {element.get('model')!r}" if external else "this model"
      raise source.error(element, f"could not find {kind} {target!r} in {where}", kind)
    originals, context = found[:1], found[0]
  if external:
    _resolve_conflicts(source, element, child)

  copies = [copy.deepcopy(e) for e in originals]
  mapping = {a: b for original, made in zip(originals, copies)
             for a, b in zip(original.iter(), made.iter())}
  inside: set[str] = {n.get("name") for c in copies for n in c.iter()
                      if isinstance(n.tag, str) and n.get("name") is not None}
  for made in copies:
    for node in made.iter():
      if not isinstance(node.tag, str):
        continue
      _rename_node(node, rename, external, inside)
  if kind == "frame":
    holder = copies[0]
  else:
    holder = etree.Element("frame")
    holder.extend(copies)
  holder.sourceline = element.sourceline
  if holder.get("childclass") is None:
    # the attached elements keep the classes they had where they came from
    holder.set("childclass", (prefix if external else "") + _context_class(context))
  element.getparent().replace(element, holder)
  if external:
    for made in copies:
      source.origins[made] = child.file

  if external:
    if first:
      source.attached_defaults.append((prefix, _renamed_defaults(source, child, rename)))
    _copy_assets(source, child, rename, defaults, prefix, loaded.compiler)
  visible = replicate.read_through(source.root, holder)
  made = replicate.copy_referrers(source.root, replicate.dependents(child.root), rename,
                                  replicate.tree_names(visible))
  for original, out in made:
    if not external:
      continue
    source.origins[out] = child.file_of(original)
    if out.getparent().tag in _CLASSED and out.tag != "exclude":
      out.set("class", prefix + defaults.class_of(original).name)
    for attr in _ASSET_REFERENCES.get(out.tag, ()):
      if out.get(attr) is not None:
        out.set(attr, rename(out.get(attr)))
  mapping.update(made)
  for original, out in mapping.items():
    if original in child.compilers:
      source.compilers[out] = child.compilers[original]
  if external:
    source.compilers.setdefault(holder, loaded.compiler)
    for original, out in made:
      source.compilers[out] = child.compiler_for(original, loaded.compiler)
  elif context is not None and source.compiler_for(context.getparent(), None) is not None:
    source.compilers.setdefault(holder, source.compiler_for(context.getparent(), None))
  if loaded is None:
    pass_keys_to_copy(source, mapping)
  elif loaded.keys is not None:
    _record_keys(source, loaded, rename)
    for original, out in mapping.items():
      for key, kind, a, b in loaded.pending.pop(original, ()):
        getattr(key, kind).append((out, a, b))


def _renamed_defaults(source: Source, child: Source, rename: Callable[[str], str]
                      ) -> list[etree._Element]:
  """Copies of the child's top-level ``<default>`` elements whose asset references are
  prefixed like the assets (MuJoCo applies defaults as it reads the child, then renames)."""
  tops = []
  for top in child.root.iterchildren("default"):
    out = copy.deepcopy(top)
    for node in out.iter():
      for attr in _ASSET_REFERENCES.get(node.tag, ()):
        if node.get(attr) is not None:
          node.set(attr, rename(node.get(attr)))
    source.origins[out] = child.file_of(top)
    tops.append(out)
  return tops


def _context_class(node: etree._Element | None) -> str:
  """The class the children of ``node`` take when they name none: the nearest childclass."""
  while node is not None:
    if node.tag in ("body", "frame", "replicate") and node.get("childclass") is not None:
      return node.get("childclass")
    node = node.getparent()
  return "main"


def _rename_node(node: etree._Element, rename: Callable[[str], str], external: bool,
                 inside: set[str]) -> None:
  """Prefixes a copied worldbody element's name, classes and references."""
  if node.get("name") is not None:
    node.set("name", rename(node.get("name")))
  if external:
    for attr in ("class", "childclass"):
      if node.get(attr) is not None:
        node.set(attr, rename(node.get(attr)))
    for attr in _ASSET_REFERENCES.get(node.tag, ()):
      if node.get(attr) is not None:
        node.set(attr, rename(node.get(attr)))
  if node.tag in ("camera", "light") and node.get("target") in inside:
    node.set("target", rename(node.get("target")))


def _copy_assets(source: Source, child: Source, rename: Callable[[str], str],
                 defaults: Defaults | None, prefix: str, compiler: Any) -> None:
  """Copies every asset of ``child`` but models into this model, names prefixed and files
  made absolute (they are found beside the child, under its meshdir and texturedir)."""
  assets = [e for section in child.sections("asset") for e in section
            if isinstance(e.tag, str) and e.tag != "model"]
  if not assets:
    return
  sections = source.sections("asset")
  target = sections[-1] if sections else etree.SubElement(source.root, "asset")
  for original in assets:
    out = copy.deepcopy(original)
    folder = getattr(compiler, _ASSET_DIR.get(out.tag, ""), None) or ""
    for attr in _FILE_ATTRS:
      if out.get(attr) is not None and child.model_dir is not None:
        out.set(attr, os.path.join(child.model_dir, folder, out.get(attr)))
    name = out.get("name")
    if name is None and original.get("file") is not None:
      name = os.path.splitext(os.path.basename(original.get("file")))[0]
    if name is not None:
      out.set("name", rename(name))
    if out.get("class") is not None:
      out.set("class", rename(out.get("class")))
    elif defaults is not None and out.tag in ("mesh", "material", "texture", "hfield", "skin"):
      out.set("class", prefix + defaults.class_of(original).name)
    for attr in _ASSET_REFERENCES.get(out.tag, ()):
      if out.get(attr) is not None:
        out.set(attr, rename(out.get(attr)))
    target.append(out)
    source.origins.setdefault(out, child.file_of(original))


def _record_keys(source: Source, loaded: _Child, rename: Callable[[str], str]) -> None:
  """Adds this attach's copy of each child keyframe to the model and records its values on
  every joint, actuator and mocap body of the child."""
  info = loaded.keys
  ctrlnum = np.asarray(info["actuator_ctrlnum"], int)
  ctrladr = np.cumsum(ctrlnum) - ctrlnum
  elements = [e for s in loaded.source.sections("keyframe") for e in s if isinstance(e.tag, str)]
  for k, element in enumerate(elements):
    name = info["names_key"][k]
    key = AttachedKey(element, rename(name) if name else "", float(info["key_time"][k]),
                      [], [], [])
    source.attached_keys.append(key)
    for j, joint in enumerate(info["jnt_elements"]):
      nq, nv = int(JNT_NQ[info["jnt_type"][j]]), int(JNT_NV[info["jnt_type"][j]])
      qa, da = int(info["jnt_qposadr"][j]), int(info["jnt_dofadr"][j])
      loaded.pending.setdefault(joint, []).append(
          (key, "joints", info["key_qpos"][k, qa:qa + nq], info["key_qvel"][k, da:da + nv]))
    for a, actuator in enumerate(info["actuator_elements"]):
      adr, num = int(info["actuator_actadr"][a]), int(info["actuator_actnum"][a])
      act = info["key_act"][k, adr:adr + num] if adr >= 0 else np.zeros(0)
      ctrl = info["key_ctrl"][k, ctrladr[a]:ctrladr[a] + ctrlnum[a]]
      loaded.pending.setdefault(actuator, []).append((key, "actuators", act, ctrl))
    for i, body in enumerate(info["mocap_elements"]):
      loaded.pending.setdefault(body, []).append(
          (key, "mocap", info["key_mpos"][k, i], info["key_mquat"][k, i]))


def pass_keys_to_copy(source: Source, mapping: dict[etree._Element, etree._Element]) -> None:
  """Moves what attached keyframes set from elements to their copies: MuJoCo's keys follow
  a self-attach's copy, and the first copy of a ``<replicate>``."""
  def follow(element: etree._Element) -> etree._Element:
    while element in mapping:
      element = mapping[element]
    return element

  for key in source.attached_keys:
    for rows in (key.joints, key.actuators, key.mocap):
      rows[:] = [(follow(e), a, b) for e, a, b in rows]


# ------------------------------------------------------------------------------------------------
# <option> and <size> conflicts (user_resolver.cc)


def _authored(root: etree._Element, tag: str) -> dict[str, str]:
  out: dict[str, str] = {}
  for element in root.iterchildren(tag):
    out.update(element.attrib)
  return out


def _flags(root: etree._Element) -> dict[str, str]:
  out: dict[str, str] = {}
  for option in root.iterchildren("option"):
    for flag in option.iterchildren("flag"):
      out.update(flag.attrib)
  return out


def _differ(a: str, b: str) -> bool:
  try:
    return [float(x) for x in a.split()] != [float(x) for x in b.split()]
  except ValueError:
    return a.strip() != b.strip()


def _resolve_conflicts(source: Source, element: etree._Element, child: Source) -> None:
  """Applies ``<compiler conflict>`` to the child's ``<option>`` and ``<size>`` settings."""
  mode = "warning"
  for c in source.sections("compiler"):
    mode = c.get("conflict", mode)
  if mode not in ("warning", "error", "merge"):
    raise source.error(source.sections("compiler")[-1], "expected warning, error or merge",
                       "conflict")
  errors: list[str] = []
  notes: list[str] = []
  writes: list[tuple[str, str, str]] = []   # (section, attribute, value)
  for tag, names in (("option", _MIN + _MAX + _UNMERGEABLE), ("size", ())):
    mine, theirs = _authored(source.root, tag), _authored(child.root, tag)
    fields = [(n, None) for n in names] if tag == "option" else list(_SIZES)
    for name, default in fields:
      p, c = mine.get(name, default), theirs.get(name, default)
      if c is None or (p is not None and not _differ(p, c)):
        continue
      if default is not None and not _differ(c, default):
        continue
      p_authored = p is not None and (default is None or _differ(p, default))
      line = f"{name}: parent has {p if p is not None else 'the default'}, child has {c}"
      if not p_authored:
        if mode == "merge":
          writes.append((tag, name, c))
          notes.append(line + ", adopting child value")
        else:
          notes.append(line + ", keeping parent value")
      elif mode == "warning":
        notes.append(line + ", keeping parent value")
      elif mode == "merge" and (name in _MIN + _MAX or tag == "size"):
        lower = name in _MIN
        value = min if lower else max
        merged = value(float(p), float(c))
        desc = "the minimum" if lower else "the maximum"
        notes.append(line + (f", taking {desc}" if merged == float(c) and _differ(p, c)
                             else f", keeping parent value ({desc})"))
        writes.append((tag, name, p if merged == float(p) else c))
      else:
        errors.append(line)
  mine, theirs = _flags(source.root), _flags(child.root)
  for enable in (False, True):
    child_flags = {n: v == ("enable" if enable else "disable") for n, v in theirs.items()
                   if (n in _ENABLE_FLAGS) == enable}
    if not any(child_flags.values()):
      continue   # MuJoCo looks only at bitfields where the child sets a bit
    for name, on in child_flags.items():
      mine_on = mine.get(name) == ("enable" if enable else "disable")
      if mode == "merge":
        if on and not mine_on:
          writes.append(("flag", name, theirs[name]))
          notes.append(f"flag '{name}': added from child")
      elif name in mine and mine_on != on:
        line = (f"flag '{name}': parent {'set' if mine_on else 'unset'}, child "
                f"{'set' if on else 'unset'}")
        if mode == "error":
          errors.append(line)
        else:
          notes.append(line + ", keeping parent")
  parent_name, child_name = source.root.get("model"), child.root.get("model")
  subject = "Attach conflict " + (
      f"when attaching '{child_name}' to '{parent_name}'" if child_name and parent_name else
      f"when attaching '{child_name}'" if child_name else
      f"when attaching to '{parent_name}'" if parent_name else "on attach") + (
      f", policy is '{mode}'")
  if errors:
    raise source.error(element, subject + "\n" + "\n".join(errors), "model")
  for tag, name, value in writes:
    _write(source.root, tag, name, value)
  if notes:
    warnings.warn(subject + "\n" + "\n".join(notes), stacklevel=4)


def _write(root: etree._Element, tag: str, name: str, value: str) -> None:
  section = "option" if tag == "flag" else tag
  found = list(root.iterchildren(section))
  holder = found[-1] if found else etree.SubElement(root, section)
  if tag == "flag":
    flags = list(holder.iterchildren("flag"))
    holder = flags[-1] if flags else etree.SubElement(holder, "flag")
  holder.set(name, value)
