"""What ``<replicate>`` copies outside its subtree: the elements that refer into it.

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
from typing import Callable, Iterable

from lxml import etree

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

Slot = list[tuple[etree._Element, str, str]]   # (node, attribute, kind), suffixed together
Names = dict[str, set[str]]


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


def _resolves(slot: Slot, suffix: str, names: Names) -> bool:
  return all(node.get(a) + suffix in names.get(k, ()) for node, a, k in slot)


def _copy(element: etree._Element, section: str, strict: bool, suffix: str,
          names: Names) -> etree._Element | None:
  """The suffixed copy of ``element`` MuJoCo keeps, or None."""
  slots = _slots(element, section)
  suffixed = [_resolves(s, suffix, names) for s in slots]
  if strict and not all(suffixed):
    return None
  if slots and not any(suffixed):
    return None
  if not all(s or _resolves(slot, "", names) for s, slot in zip(suffixed, slots)):
    return None
  out = copy.deepcopy(element)
  out_slots = _slots(out, section)
  for s, slot in zip(suffixed, out_slots):
    for node, a, _ in slot:
      node.set(a, node.get(a) + (suffix if s else ""))
  if out.get("name") is not None:
    out.set("name", out.get("name") + suffix)
  return out


def _dependents(root: etree._Element) -> list[tuple[str, bool, list[etree._Element]]]:
  """For each of MuJoCo's lists in copy order: its section, strictness and elements."""
  out = []
  for section, tag, strict in _SECTIONS:
    elements = [e for s in root.iterchildren(section) for e in s
                if isinstance(e.tag, str) and (tag is None or e.tag == tag)]
    out.append((section, strict, elements))
  return out


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
                    visible: Callable[[etree._Element], list[etree._Element]]) -> None:
  """Copies, per attached copy of ``template`` (its frame and name suffix), the elements that
  refer into it, then drops those that referred to the template itself.

  ``visible(frame)``: the worldbody elements MuJoCo has read when it attaches ``frame`` (those
  before it in document order, and the frame's own).
  """
  for frame, suffix in copies:
    names = tree_names(visible(frame))
    for section, strict, elements in _dependents(root):
      names.update(_section_names(root))
      parent = list(root.iterchildren(section))[-1] if elements else None
      for element in elements:
        made = _copy(element, section, strict, suffix, names)
        if made is not None:
          parent.append(made)
  old = tree_names(visible(copies[-1][0]))
  inside = tree_names(template.iter())
  new = {k: v - inside.get(k, set()) for k, v in old.items()}
  old.update(_section_names(root))
  for section, _, elements in _dependents(root):
    new.update(_section_names(root))
    for element in elements:
      slots = _slots(element, section)
      if (all(_resolves(s, "", old) for s in slots)
          and not all(_resolves(s, "", new) for s in slots)):
        element.getparent().remove(element)
