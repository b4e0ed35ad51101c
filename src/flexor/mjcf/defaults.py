"""Default classes: ``<default>`` nesting, ``class`` and ``childclass``.

A default class holds, per element kind, the chain of ``<default>`` child elements from the top
class down to itself. An attribute not given on an element is taken from the nearest element of
the chain that gives it, which is exactly MuJoCo's copy-the-parent-then-overwrite semantics.
Actuator shortcuts (``<motor>``, ``<position>``, ...) all write one actuator default in MuJoCo, so
they share the kind ``actuator`` and their chain is replayed in order by the actuator compiler.
"""

from __future__ import annotations

import dataclasses

from lxml import etree

from flexor.mjcf.parse import Source

ACTUATOR_TAGS = ("general", "motor", "position", "velocity", "intvelocity", "damper", "cylinder",
                 "muscle", "adhesion", "orientation", "pid", "dcmotor", "plugin")


def kind_of(tag: str) -> str:
  """The default kind an element of ``tag`` takes its defaults from."""
  return "actuator" if tag in ACTUATOR_TAGS else tag


@dataclasses.dataclass
class DefaultClass:
  """One default class: its name, parent and per-kind chains of ``<default>`` elements."""

  name: str
  parent: DefaultClass | None
  chains: dict[str, tuple[etree._Element, ...]]

  def chain(self, kind: str) -> tuple[etree._Element, ...]:
    """Default elements of ``kind``, top class first."""
    return self.chains.get(kind, ())


class Defaults:
  """All default classes of a model, by name (the top one is ``main``).

  A model attached with a name prefix brings its own classes, renamed with the prefix: its
  ``main`` becomes a second top class, so the attached elements never see this model's
  defaults (MuJoCo applies a child's defaults when it reads the child)."""

  def __init__(self, source: Source):
    self.source = source
    self.classes: dict[str, DefaultClass] = {"main": DefaultClass("main", None, {})}
    # MuJoCo reads every top-level <default> into main, in order
    for top in (c for c in source.root if c.tag == "default"):
      name = top.get("class", "main")
      if name != "main":
        raise source.error(top, "the top-level default class must be called 'main' (or unnamed)",
                           "class")
      self._read(top, self.classes["main"])
    for prefix, tops in source.attached_defaults:
      top_class = self.classes[prefix + "main"] = DefaultClass(prefix + "main", None, {})
      for top in tops:
        self._read(top, top_class, prefix)

  def _read(self, element: etree._Element, cls: DefaultClass, prefix: str = "") -> None:
    for child in element:
      if child.tag == "default":
        name = child.get("class")
        if name is None:
          raise self.source.error(child, "nested default classes need a name", "class")
        name = prefix + name
        if name in self.classes:
          raise self.source.error(child, f"repeated default class name {name!r}", "class")
        sub = DefaultClass(name, cls, dict(cls.chains))
        self.classes[name] = sub
        self._read(child, sub, prefix)
      elif isinstance(child.tag, str):
        kind = kind_of(child.tag)
        cls.chains[kind] = cls.chains.get(kind, ()) + (child,)

  def lookup(self, name: str, element: etree._Element, attribute: str) -> DefaultClass:
    """The class called ``name``; MJCFError at ``element.attribute`` if there is none."""
    cls = self.classes.get(name)
    if cls is None:
      known = ", ".join(sorted(self.classes))
      raise self.source.error(element, f"unknown default class {name!r} (known: {known})",
                              attribute)
    return cls

  def class_of(self, element: etree._Element) -> DefaultClass:
    """The class of ``element``: its ``class``, else the nearest ``childclass`` above, else main."""
    name = element.get("class")
    if name is not None:
      return self.lookup(name, element, "class")
    node = element.getparent()
    while node is not None:
      if node.tag in ("body", "frame", "replicate") and node.get("childclass") is not None:
        return self.lookup(node.get("childclass"), node, "childclass")
      node = node.getparent()
    return self.classes["main"]


@dataclasses.dataclass
class Attributes:
  """The attributes of one element with its class defaults behind them.

  ``get(name)`` returns ``(text, element that gave it)``: the element itself first, then the
  default chain from the nearest class outwards; ``(None, None)`` if nobody gives it.
  """

  element: etree._Element
  chain: tuple[etree._Element, ...]

  def get(self, name: str) -> tuple[str | None, etree._Element | None]:
    value = self.element.get(name)
    if value is not None:
      return value, self.element
    for default in reversed(self.chain):
      value = default.get(name)
      if value is not None:
        return value, default
    return None, None

  def givers(self, name: str) -> list[etree._Element]:
    """Every element that gives ``name``, outermost default class first, the element last."""
    out = [d for d in self.chain if d.get(name) is not None]
    if self.element.get(name) is not None:
      out.append(self.element)
    return out

  def has(self, name: str) -> bool:
    return self.get(name)[0] is not None


def attributes(defaults: Defaults, element: etree._Element, kind: str | None = None) -> Attributes:
  """``element``'s attributes backed by its default class's chain of ``kind`` (default: tag)."""
  cls = defaults.class_of(element)
  return Attributes(element, cls.chain(kind or kind_of(element.tag)))
