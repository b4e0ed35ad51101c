"""flexor's one error type for bad model input."""

from __future__ import annotations


class MJCFError(ValueError):
  """An MJCF model could not be compiled.

  The message names the file, line, element and attribute at fault and what would be accepted,
  e.g. ``arm.xml:12: <joint name='elbow'> attribute 'axis': expected 3 numbers, got 2``. An
  element of an included file names that file and line, followed by the ``<include>`` elements
  that brought it in (``... (included from model.xml:4)``).
  The parts are also available as attributes for programs that report errors themselves;
  ``included_from`` is a tuple of (file, line), innermost include first.
  """

  def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
               element: str | None = None, attribute: str | None = None,
               included_from: tuple[tuple[str | None, int | None], ...] = ()):
    self.file, self.line, self.element, self.attribute = file, line, element, attribute
    self.included_from = tuple(included_from)
    where = f"{file or '<string>'}:{line if line is not None else '?'}: "
    what = f"<{element}> " if element else ""
    attr = f"attribute '{attribute}': " if attribute else ""
    chain = "".join(f" (included from {f or '<string>'}:{n if n is not None else '?'})"
                    for f, n in self.included_from)
    super().__init__(f"{where}{what}{attr}{message}{chain}")
