"""``<replicate>``: the copies of its subtree, and what it copies outside: the elements that
refer into it.

A replicate becomes ``count`` ``<frame>`` elements holding renamed copies: copy i sits in the
i-fold composition of the (offset, euler) step and its names get ``sep`` and the index
zero-padded to the width of ``count``, as in MuJoCo. Nested replicates expand innermost first, as
MuJoCo reads them, so an inner suffix precedes an outer one. Frames carry the pose as exact
decimal text (``repr`` round-trips float64).

MuJoCo expands a replicate by attaching its subtree ``count`` times with a name suffix
(``mjs_attach`` in ``xml_native_reader.cc``; every other section is read before the worldbody).
Each attach also offers a suffixed copy of every contact pair, exclude, tendon, equality,
actuator and sensor then in the model (``mjCModel::CopyList``), in that order, and keeps the
copies whose references resolve (``ResolveReferences`` in ``user_objects.cc``):

- equalities and actuators: every reference suffixed;
- pairs, excludes and sensors: the references suffixed, and where only some of them resolve,
  the others unsuffixed;
- tendons: each path element suffixed where that resolves, else unsuffixed; at least one
  suffixed.

A sensor that names no object (a clock) resolves in every copy: MuJoCo copies it, and the copies
of its copies, as this module does. Deleting the template then drops every element that referred
to it (``RemoveFromList``).

Elements are lxml nodes: copies are appended to the last section of their kind, which is the end
of MuJoCo's list.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Iterable

import numpy as np
from lxml import etree

from flexor.mjcf import frames
from flexor.mjcf.defaults import Attributes
from flexor.mjcf.parse import Source
from flexor.mjcf.values import Reader

# the worldbody elements that can be referred to, by the kind of name they define
_TREE_KINDS = {"body": "body", "joint": "joint", "freejoint": "joint", "geom": "geom",
               "site": "site", "camera": "camera"}
# reference attributes and the kind of name each holds; objname/refname take theirs from
# objtype/reftype
_REFERENCES = {
    "joint": "joint", "jointinparent": "joint", "joint1": "joint", "joint2": "joint",
    "tendon": "tendon", "tendon1": "tendon", "tendon2": "tendon", "actuator": "actuator",
    "site": "site", "site1": "site", "site2": "site", "cranksite": "site", "slidersite": "site",
    "refsite": "site", "body": "body", "body1": "body", "body2": "body", "subtree1": "body",
    "subtree2": "body", "geom1": "geom", "geom2": "geom", "camera": "camera",
}
_FRAME_KINDS = {"body": "body", "xbody": "body", "geom": "geom", "site": "site",
                "camera": "camera"}
# MuJoCo's copy order, and whether a copy needs every reference suffixed
_SECTIONS = (("contact", "pair", False), ("contact", "exclude", False), ("tendon", None, False),
             ("equality", None, True), ("actuator", None, True), ("sensor", None, False))

Slot = list[tuple[etree._Element, str, str]]   # (node, attribute, kind), renamed together
Names = dict[str, set[str]]
Rename = Callable[[str], str]


def _slots(element: etree._Element, section: str) -> list[Slot]:
  """The element's references, grouped as MuJoCo suffixes them: one slot per tendon path
  element (a wrapping geom with its side site), else one per reference."""
  if section == "tendon":
    slots = []
    for child in element:
      if not isinstance(child.tag, str) or child.tag == "pulley":
        continue
      attrs = (("geom", "geom"), ("sidesite", "site")) if child.tag == "geom" else (
          (child.tag, child.tag),)
      slots.append([(child, a, k) for a, k in attrs if child.get(a) is not None])
    return slots
  slots = [[(element, a, k)] for a, k in _REFERENCES.items() if element.get(a) is not None]
  for name_attr, type_attr in (("objname", "objtype"), ("refname", "reftype")):
    if element.get(name_attr) is not None:
      kind = _FRAME_KINDS.get(element.get(type_attr, ""), "unknown")
      slots.append([(element, name_attr, kind)])
  return slots


def _same(name: str) -> str:
  return name


def _resolves(slot: Slot, rename: Rename, names: Names) -> bool:
  return all(rename(node.get(a)) in names.get(k, ()) for node, a, k in slot)


def _copy(element: etree._Element, section: str, strict: bool, rename: Rename,
          names: Names) -> etree._Element | None:
  """The renamed copy of ``element`` MuJoCo keeps, or None."""
  slots = _slots(element, section)
  renamed = [_resolves(s, rename, names) for s in slots]
  if strict and not all(renamed):
    return None
  if slots and not any(renamed):
    return None
  if not all(r or _resolves(slot, _same, names) for r, slot in zip(renamed, slots)):
    return None
  out = copy.deepcopy(element)
  out_slots = _slots(out, section)
  for r, slot in zip(renamed, out_slots):
    for node, a, _ in slot:
      node.set(a, rename(node.get(a)) if r else node.get(a))
  if out.get("name") is not None:
    out.set("name", rename(out.get("name")))
  return out


def dependents(root: etree._Element) -> list[tuple[str, bool, list[etree._Element]]]:
  """For each of MuJoCo's lists in copy order: its section, strictness and elements."""
  out = []
  for section, tag, strict in _SECTIONS:
    elements = [e for s in root.iterchildren(section) for e in s
                if isinstance(e.tag, str) and (tag is None or e.tag == tag)]
    out.append((section, strict, elements))
  return out


def copy_referrers(root: etree._Element, lists: list[tuple[str, bool, list[etree._Element]]],
                   rename: Rename, names: Names) -> list[tuple[etree._Element, etree._Element]]:
  """Appends to ``root``'s sections the renamed copies MuJoCo keeps of the elements in
  ``lists`` (from :func:`dependents`), given the worldbody ``names`` they may refer to; returns
  (original, copy) pairs."""
  made = []
  for section, strict, elements in lists:
    names.update(_section_names(root))
    for element in elements:
      out = _copy(element, section, strict, rename, names)
      if out is not None:
        parents = list(root.iterchildren(section))
        (parents[-1] if parents else etree.SubElement(root, section)).append(out)
        made.append((element, out))
  return made


def _section_names(root: etree._Element) -> Names:
  return {kind: {e.get("name") for s in root.iterchildren(kind) for e in s
                 if isinstance(e.tag, str) and e.get("name") is not None}
          for kind in ("tendon", "actuator")}


def tree_names(elements: Iterable[etree._Element]) -> Names:
  """Names defined by worldbody elements, by kind (the world body included)."""
  names: Names = {k: set() for k in set(_TREE_KINDS.values())}
  names["body"].add("world")
  for e in elements:
    if isinstance(e.tag, str) and e.tag in _TREE_KINDS and e.get("name") is not None:
      names[_TREE_KINDS[e.tag]].add(e.get("name"))
  return names


def copy_dependents(root: etree._Element, template: etree._Element,
                    copies: list[tuple[etree._Element, str]],
                    visible: Callable[[etree._Element], list[etree._Element]]
                    ) -> list[list[tuple[etree._Element, etree._Element]]]:
  """Copies, per attached copy of ``template`` (its frame and name suffix), the elements that
  refer into it, then drops those that referred to the template itself; returns the (original,
  copy) pairs of each copy.

  ``visible(frame)``: the worldbody elements MuJoCo has read when it attaches ``frame`` (those
  before it in document order, and the frame's own).
  """
  made = [copy_referrers(root, dependents(root), lambda name, s=suffix: name + s,
                         tree_names(visible(frame))) for frame, suffix in copies]
  old = tree_names(visible(copies[-1][0]))
  inside = tree_names(template.iter())
  new = {k: v - inside.get(k, set()) for k, v in old.items()}
  old.update(_section_names(root))
  for section, _, elements in dependents(root):
    new.update(_section_names(root))
    for element in elements:
      slots = _slots(element, section)
      if (all(_resolves(s, _same, old) for s in slots)
          and not all(_resolves(s, _same, new) for s in slots)):
        element.getparent().remove(element)
  return made


def read_through(root: etree._Element, element: etree._Element) -> list[etree._Element]:
  """The worldbody elements of ``root`` up to the end of ``element``, in document order."""
  last = element
  while len(last):
    last = last[-1]
  out = []
  for world in root.iterchildren("worldbody"):
    for e in world.iter():
      out.append(e)
      if e is last:
        return out
  return out


def expand(source: Source, compiler: Any, outer: etree._Element
           ) -> dict[etree._Element, etree._Element]:
  """Replaces the replicate ``outer`` and those inside it (innermost first) by their frames of
  copies, and copies what refers into them; returns a map from each template element to its
  first copy (what refers to the template follows that copy, as MuJoCo's keyframes do)."""
  mapping: dict[etree._Element, etree._Element] = {}
  while True:
    element = next((e for e in outer.iter("replicate")
                    if next(e.iterdescendants("replicate"), None) is None), None)
    if element is None:
      return mapping
    r = Reader(source, Attributes(element, ()))
    count = r.int("count", 0)
    if count < 1:
      raise r.error(f"must be a positive integer, got {count}", "count")
    offset = r.floats("offset", 3, (0.0, 0.0, 0.0))
    euler = r.floats("euler", 3, (0.0, 0.0, 0.0))
    try:
      turn = lambda k: frames.orient_quat("euler", [k * a for a in euler],
                                          degrees=compiler.degrees, eulerseq=compiler.eulerseq)
      step = turn(1)
    except ValueError as e:
      raise r.error(str(e), "euler") from None
    sep = element.get("sep", "")
    inside = {n.get("name") for n in element.iter() if n.get("name") is not None}
    pos, quat = np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0])
    anchor, copies = element, []
    for i in range(count):
      # MuJoCo turns copy i by i times the euler angles, not by the accumulated quaternion (its
      # precision), and moves the next copy's position by the offset turned that way
      quat = turn(i)
      frame = etree.Element("frame", pos=" ".join(repr(float(x)) for x in pos),
                            quat=" ".join(repr(float(x)) for x in quat))
      frame.sourceline = element.sourceline
      if element.get("childclass") is not None:
        frame.set("childclass", element.get("childclass"))
      suffix = f"{sep}{i:0{len(str(count))}d}"
      for child in element:
        child_copy = copy.deepcopy(child)
        for node in child_copy.iter():
          if isinstance(node.tag, str) and node.get("name") is not None:
            node.set("name", node.get("name") + suffix)
          if node.tag in ("camera", "light") and node.get("target") in inside:
            node.set("target", node.get("target") + suffix)
        frame.append(child_copy)
      anchor.addnext(frame)
      anchor = frame
      copies.append((frame, suffix))
      pos, quat = frames.frame_accum(pos, quat, offset, step)
    referrers = copy_dependents(source.root, element, copies,
                                lambda e: read_through(source.root, e))
    for k, ((frame, _), made) in enumerate(zip(copies, referrers)):
      pairs = [(a, b) for child, out in zip(element, frame)
               for a, b in zip(child.iter(), out.iter())] + made
      for a, b in pairs:
        if a in source.compilers:   # an attached model's settings go with its copies
          source.compilers[b] = source.compilers[a]
      if k == 0:
        mapping.update(pairs)
    element.getparent().remove(element)
    if element is outer:
      return mapping
