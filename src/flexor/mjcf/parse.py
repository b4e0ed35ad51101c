"""Secure MJCF loading: XML parsing, ``<include>`` expansion, schema check, file lookup.

MJCF input is untrusted. lxml is configured never to resolve entities, load a DTD or touch the
network, and any document that declares entities is refused outright (that also stops entity
bombs, which need declarations). Include and asset paths are resolved as MuJoCo resolves them,
relative to the main model's folder, and may be confined to a ``root`` folder.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from lxml import etree

from flexor.errors import MJCFError
from flexor.mjcf import schema

_PARSER_OPTIONS = dict(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
                       remove_comments=True, remove_pis=True, dtd_validation=False)


@dataclasses.dataclass
class Source:
  """A parsed model: its root element and where to find the files it names.

  Attributes:
    root: the ``<mujoco>`` element, includes expanded.
    file: the main model file, or None for a string.
    model_dir: folder that relative include and asset paths start from (None: only ``assets``).
    root_dir: if set, no file outside this folder may be read.
    assets: in-memory files by relative path (``load_mjcf_string``); checked before the disk.
    origins: the file each included subtree came from, keyed by the subtree's top elements.
    included_from: where each included subtree was included, keyed like ``origins``: (file,
      line of the ``<include>``, the element that held the ``<include>``).
    attached_defaults: the default classes of each model ``<attach>`` copied in, as (name
      prefix, the child's top-level ``<default>`` elements) (:mod:`flexor.mjcf.attach`).
    attached_keys: the keyframes attached models brought (``attach.AttachedKey``).
    compilers: the ``<compiler>`` settings of attached models, keyed by the element their
      copy starts at (the element and what lies below it are read with them).
  """

  root: etree._Element
  file: str | None
  model_dir: str | None
  root_dir: str | None
  assets: dict[str, bytes]
  origins: dict[etree._Element, str] = dataclasses.field(default_factory=dict)
  included_from: dict[etree._Element, tuple] = dataclasses.field(default_factory=dict)
  attached_defaults: list[tuple[str, list[etree._Element]]] = dataclasses.field(
      default_factory=list)
  attached_keys: list[Any] = dataclasses.field(default_factory=list)
  compilers: dict[etree._Element, Any] = dataclasses.field(default_factory=dict)

  def sections(self, tag: str) -> list[etree._Element]:
    """The top-level sections called ``tag`` (``<asset>``, ``<actuator>``, ...), in order."""
    return [child for child in self.root if child.tag == tag]

  def file_of(self, element: etree._Element) -> str | None:
    """The file ``element`` was read from (the including file for an expanded include)."""
    node = element
    while node is not None:
      if node in self.origins:
        return self.origins[node]
      node = node.getparent()
    return self.file

  def compiler_for(self, element: etree._Element | None, main: Any) -> Any:
    """The ``<compiler>`` settings ``element`` is read with: those of the attached model it
    was copied from, else this model's (``main``)."""
    node = element
    while node is not None:
      if node in self.compilers:
        return self.compilers[node]
      node = node.getparent()
    return main

  def include_chain(self, element: etree._Element) -> tuple[tuple[str | None, int], ...]:
    """The ``<include>`` elements that brought ``element`` in, innermost first, as (file, line);
    empty for an element of the main file."""
    node = element
    while node is not None:
      if node in self.included_from:
        file, line, holder = self.included_from[node]
        return ((file, line),) + self.include_chain(holder)
      node = node.getparent()
    return ()

  def error(self, element: etree._Element | None, message: str,
            attribute: str | None = None) -> MJCFError:
    """An MJCFError located at ``element`` (and ``attribute``)."""
    if element is None:
      return MJCFError(message, file=self.file, attribute=attribute)
    return MJCFError(message, file=self.file_of(element), line=element.sourceline,
                     element=element.tag, attribute=attribute,
                     included_from=self.include_chain(element))

  def read_file(self, name: str, element: etree._Element, attribute: str,
                folder: str | None = None) -> tuple[bytes, str]:
    """Reads the file ``name`` (relative to ``folder`` inside the model folder).

    Returns:
      (content, resolved path or key); raises MJCFError if it is missing or escapes ``root_dir``.
    """
    rel = os.path.normpath(os.path.join(folder or "", name)) if not os.path.isabs(name) else name
    for key in (rel, name, os.path.basename(name)):
      if key in self.assets:
        return self.assets[key], key
    if self.model_dir is None:
      raise self.error(element, f"file {name!r} not found in the assets given", attribute)
    path = os.path.realpath(os.path.join(self.model_dir, rel))
    if self.root_dir is not None:
      root = os.path.realpath(self.root_dir)
      if os.path.commonpath([root, path]) != root:
        raise self.error(element, f"file {name!r} resolves to {path}, outside the allowed root "
                         f"folder {root}", attribute)
    try:
      with open(path, "rb") as f:
        return f.read(), path
    except OSError as e:
      raise self.error(element, f"cannot read file {name!r} ({path}): {e.strerror}",
                       attribute) from None


def _parse_bytes(data: bytes, file: str | None) -> etree._Element:
  parser = etree.XMLParser(**_PARSER_OPTIONS)
  try:
    tree = etree.fromstring(data, parser, base_url=file).getroottree()
  except etree.XMLSyntaxError as e:
    line = e.position[0] if e.position else None
    raise MJCFError(f"malformed XML: {e.msg}", file=file, line=line) from None
  dtd = tree.docinfo.internalDTD
  if dtd is not None and (list(dtd.iterentities()) or dtd.elements()):
    raise MJCFError("DOCTYPE declarations with entities or elements are not accepted "
                    "(MJCF needs none; they enable entity expansion attacks)", file=file, line=1)
  root = tree.getroot()
  for node in root.iter():
    if isinstance(node, etree._Entity):
      raise MJCFError(f"entity reference &{node.name}; is not accepted", file=file,
                      line=node.sourceline)
  return root


def _expand_includes(source: Source, element: etree._Element, stack: tuple[str, ...]) -> None:
  """Replaces each ``<include file>`` below ``element`` by the children of the file's root."""
  for child in list(element):
    if not isinstance(child.tag, str):
      continue
    if child.tag != "include":
      _expand_includes(source, child, stack)
      continue
    extra = set(child.attrib) - {"file"}
    if extra:
      raise source.error(child, "unrecognized attribute", sorted(extra)[0])
    name = child.get("file")
    if not name:
      raise source.error(child, "missing required attribute", "file")
    data, path = source.read_file(name, child, "file")
    if path in stack:
      raise source.error(child, f"recursive include of {name!r}", "file")
    sub = _parse_bytes(data, path)
    source.origins[sub] = path
    _expand_includes(source, sub, stack + (path,))
    parent = child.getparent()
    site = (source.file_of(child), child.sourceline, parent)
    source.included_from[sub] = site
    index = parent.index(child)
    parent.remove(child)
    for offset, grandchild in enumerate(c for c in list(sub) if isinstance(c.tag, str)):
      parent.insert(index + offset, grandchild)
      source.origins.setdefault(grandchild, path)
      source.included_from.setdefault(grandchild, site)


def _check(source: Source, element: etree._Element, rule: schema.Element) -> None:
  allowed = schema.children(rule)
  seen: set[str] = set()
  for child in element:
    if not isinstance(child.tag, str):
      continue
    sub = allowed.get(child.tag)
    if sub is None:
      raise source.error(child, f"unrecognized element (allowed inside <{element.tag}>: "
                         f"{', '.join(sorted(allowed)) or 'none'})")
    if sub.cardinality == "?" and child.tag in seen:
      raise source.error(child, f"element may appear at most once inside <{element.tag}>")
    seen.add(child.tag)
    for attr in child.attrib:
      if attr not in sub.attributes:
        raise source.error(child, "unrecognized attribute", attr)
    _check(source, child, sub)


def load(data: bytes, file: str | None, *, assets: dict[str, bytes] | None = None,
         root_dir: str | None = None) -> Source:
  """Parses MJCF text, expands ``<include>`` and checks the schema.

  Args:
    data: the XML document.
    file: its path (None for a string); relative files are looked up beside it.
    assets: in-memory files by name, looked up before the disk.
    root_dir: optional folder that every file read must lie in.
  Returns:
    The checked Source.
  """
  root = _parse_bytes(data, file)
  model_dir = os.path.dirname(os.path.abspath(file)) if file is not None else None
  return _checked(Source(root, file, model_dir, root_dir, dict(assets or {})))


def load_model_asset(source: Source, element: etree._Element) -> Source:
  """Parses the model an ``<asset><model file>`` names, as a model of its own: its relative
  files are looked up beside it, under the same ``root_dir`` and in-memory assets."""
  name = element.get("file")
  if not name:
    raise source.error(element, "missing required attribute", "file")
  data, path = source.read_file(name, element, "file")
  root = _parse_bytes(data, path)
  model_dir = os.path.dirname(path) if source.model_dir is not None else None
  return _checked(Source(root, path, model_dir, source.root_dir, source.assets))


def _checked(source: Source) -> Source:
  """Expands the includes of a freshly parsed source and checks it against the schema."""
  root, file = source.root, source.file
  if root.tag != "mujoco":
    raise source.error(root, "the root element must be <mujoco>")
  _expand_includes(source, root, (os.path.realpath(file),) if file else ())
  for attr in root.attrib:
    if attr not in schema.MUJOCO.attributes:
      raise source.error(root, "unrecognized attribute", attr)
  _check(source, root, schema.MUJOCO)
  return source
