"""Typed attribute reading with MJCFError on bad values (host side, at compile time).

A :class:`Reader` wraps one element's attributes with its default chain behind them, so every
value is parsed from the element that actually gave it and an error points at that element.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from flexor.mjcf.defaults import Attributes
from flexor.mjcf.parse import Source

BOOL = {"false": 0, "true": 1}
LIMITED = {"false": 0, "true": 1, "auto": 2}


class Reader:
  """Parses the attributes of one element (own value first, then class defaults)."""

  def __init__(self, source: Source, attrs: Attributes):
    self.source = source
    self.attrs = attrs
    self.element = attrs.element

  def has(self, name: str) -> bool:
    """True if the element or its defaults give ``name``."""
    return self.attrs.has(name)

  def error(self, message: str, name: str | None = None):
    """MJCFError at the element that gave ``name`` (or this element)."""
    giver = self.attrs.get(name)[1] if name else None
    return self.source.error(giver if giver is not None else self.element, message, name)

  def text(self, name: str, default: str | None = None) -> str | None:
    value = self.attrs.get(name)[0]
    return default if value is None else value

  def _numbers(self, name: str, value: str, giver) -> list[float]:
    numbers = []
    for part in value.split():
      try:
        x = float(part)
      except ValueError:
        raise self.source.error(giver, f"expected numbers, got {part!r}", name) from None
      if math.isnan(x):
        raise self.source.error(giver, "NaN is not a valid value", name)
      numbers.append(x)
    return numbers

  def floats(self, name: str, n: int | None = None, default=None, *, at_most: bool = False,
             at_least: int = 1) -> np.ndarray | None:
    """A vector of floats: exactly ``n`` of them, or up to ``n`` if ``at_most``.

    With ``at_most``, a short value overwrites only the leading entries of what the default
    classes (outermost first) and finally ``default`` give, as MuJoCo's partial reads do (e.g.
    ``friction="1"`` keeps the class's torsional and rolling friction). None if neither the
    element nor its defaults give ``name`` and ``default`` is None.
    """
    givers = self.attrs.givers(name)
    if not givers:
      return None if default is None else np.array(default, dtype=np.float64)
    if not at_most:
      givers = givers[-1:]
    out = list(np.asarray(default, dtype=np.float64).ravel()) if default is not None else []
    for giver in givers:
      numbers = self._numbers(name, giver.get(name), giver)
      if n is not None and at_most and not at_least <= len(numbers) <= n:
        raise self.source.error(giver, f"expected {at_least} to {n} numbers, got {len(numbers)}",
                                name)
      if n is not None and not at_most and len(numbers) != n:
        raise self.source.error(giver, f"expected {n} numbers, got {len(numbers)}", name)
      if n is None and len(numbers) < at_least:
        raise self.source.error(giver, "expected at least one number", name)
      out = numbers + out[len(numbers):] if at_most else numbers
    return np.array(out, dtype=np.float64)

  def float(self, name: str, default: float | None = None) -> float | None:
    value = self.floats(name, 1)
    return default if value is None else float(value[0])

  def int(self, name: str, default: int | None = None) -> int | None:
    value = self.text(name)
    if value is None:
      return default
    try:
      return int(value.strip())
    except ValueError:
      raise self.error(f"expected an integer, got {value!r}", name) from None

  def ints(self, name: str) -> np.ndarray | None:
    value = self.text(name)
    if value is None:
      return None
    try:
      return np.array([int(p) for p in value.split()], dtype=np.int64)
    except ValueError:
      raise self.error(f"expected integers, got {value!r}", name) from None

  def keyword(self, name: str, table: Mapping[str, int], default: int) -> int:
    value = self.text(name)
    if value is None:
      return default
    if value.strip() not in table:
      raise self.error(f"invalid keyword {value!r}; expected one of {', '.join(table)}", name)
    return table[value.strip()]

  def bool(self, name: str, default: bool) -> bool:
    return bool(self.keyword(name, BOOL, int(default)))

  def positive(self, name: str, value: float, *, strict: bool = False) -> float:
    """``value`` (read from ``name``) checked to be >= 0 (> 0 if ``strict``)."""
    if value < 0 or (strict and value == 0):
      raise self.error(f"must be {'positive' if strict else 'non-negative'}, got {value:g}", name)
    return value


class Names:
  """Name -> id of one element kind, for resolving references (MJCFError if dangling)."""

  def __init__(self, source: Source, kind: str, names):
    self.source, self.kind = source, kind
    self.ids: dict[str, int] = {}
    for i, name in enumerate(names):
      if name:
        self.ids.setdefault(name, i)

  def __contains__(self, name: str) -> bool:
    return name in self.ids

  def __call__(self, r: Reader, attr: str, what: str | None = None) -> int:
    """The id named by attribute ``attr`` of ``r``'s element."""
    name = r.text(attr)
    if name not in self.ids:
      known = ", ".join(sorted(self.ids)[:12]) or "none"
      raise r.error(f"unknown {what or self.kind} {name!r} (known: {known})", attr)
    return self.ids[name]


def resolve_limited(r: Reader, autolimits: bool, flag: str, value: int, rng, range_attr: str,
                    what: str) -> bool:
  """MuJoCo's limited rule (checklimited + islimited).

  ``value`` is the keyword read for ``flag`` (0 false, 1 true, 2 auto). "auto" means limited iff
  ``rng[0] < rng[1]``; under ``<compiler autolimits="false">`` a nonzero range with "auto" is an
  error, as in MuJoCo.
  """
  if value != 2:
    return bool(value)
  if not autolimits and (rng[0] != 0 or rng[1] != 0):
    raise r.error(f"{what} has '{range_attr}' but not '{flag}'; set <compiler "
                  f"autolimits=\"true\">, give '{flag}' explicitly or remove '{range_attr}'",
                  range_attr)
  return bool(rng[0] < rng[1])


def _size_int(source: Source, name: str) -> int:
  """An integer ``<size>`` attribute that MuJoCo bounds below by -1 (its default, -1 if absent)."""
  n = -1
  for size in source.sections("size"):
    r = Reader(source, Attributes(size, ()))
    value = r.int(name)
    if value is not None:
      if value < -1:
        raise r.error(f"must be >= -1, got {value}", name)
      n = value
  return n


def nuser(source: Source, kind: str) -> int:
  """``<size nuser_{kind}>``: the number of user values per element, -1 meaning "as many as the
  longest ``user`` attribute" (MuJoCo's default)."""
  return _size_int(source, f"nuser_{kind}")


def size_nconmax(source: Source) -> int:
  """``<size nconmax>``: the most contacts Data holds of one condim, -1 (MuJoCo's default) for
  every contact the candidate pairs can make."""
  return _size_int(source, "nconmax")


def max_geom_pairs(source: Source) -> int:
  """``<custom><numeric name="max_geom_pairs" data="k"/>`` (MJX's convention, read as MJX reads
  it: the first value, truncated): the narrow phase runs on at most k candidates of each
  geom-type pair, those with the nearest bounding spheres; -1 (absent, or below 0) for all."""
  n = -1
  for section in source.sections("custom"):
    for element in section:
      if element.tag == "numeric" and element.get("name") == "max_geom_pairs":
        data = Reader(source, Attributes(element, ())).floats("data")
        n = int(data[0]) if data is not None else 0
  return max(n, -1)


def check_user(r: Reader, n: int, kind: str) -> None:
  """MuJoCo's check that an element's ``user`` values fit ``<size nuser_{kind}>``."""
  if n < 0 or not r.has("user"):
    return
  count = len(r.text("user").split())
  if count > n:
    raise r.error(f"{count} user values, more than <size nuser_{kind}=\"{n}\">; shorten 'user' "
                  f"or raise nuser_{kind}", "user")
