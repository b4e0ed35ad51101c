"""Small MJCF models bundled with flexor, written for it.

* ``arm``: a three-link arm on a sprung rail (slide, ball, hinge and free joints, gravity,
  damping, armature, springs, motors); the default model of the ``flexor`` command.
* ``creature``: a four-legged creature tumbling in zero gravity (free, ball, hinge and slide
  joints); its momentum is conserved.
* ``chain20``: a planar chain of 20 hinged links under gravity; the deep tree of the benchmarks.
* ``cartpole``: a cart on a range-limited rail with a hinged pole; ``flexor.envs``' swing-up task.
* ``hopper``: a planar one-legged hopper on a floor (contacts, joint limits); an RL task.
* ``block_push``: a sphere on a motorised rail pushes a free block along a floor; the
  trajectory optimisation through contact of ``flexor.ContactGradient``.
* ``finger_flick``: a motorised finger flicks a free ball in zero gravity; the impact of
  ``flexor.gradient_report``'s example.
* ``ball_wall``: a ball on a damped rail thrown at a wall on a rail of its own; the simplest
  contact-gradient scene.

``arm``, ``creature`` and ``chain20`` have no contacts or joint limits: their dynamics are smooth.
"""

from __future__ import annotations

import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def names() -> list[str]:
  """Names of the bundled models, sorted."""
  return sorted(f[:-4] for f in os.listdir(_HERE) if f.endswith(".xml"))


def path(name: str) -> str:
  """Absolute path of the bundled model ``name`` (e.g. ``"arm"``; a trailing ``.xml`` is allowed).

  Raises:
    ValueError: there is no bundled model of that name; the message lists the ones there are.
  """
  stem = name[:-4] if name.endswith(".xml") else name
  if stem not in names():
    raise ValueError(f"no bundled example named {name!r}; choose one of: {', '.join(names())}")
  return os.path.join(_HERE, f"{stem}.xml")
