"""The ellipsoid fluid model's per-geom constants (``<geom fluidshape="ellipsoid">``).

``geom_fluid`` (mjNFLUID = 12 per geom) holds the interaction flag, the five ``fluidcoef``
coefficients and the virtual (added) mass and inertia of the geom's equivalent ellipsoid in a
fluid of unit density, computed here as MuJoCo's compiler computes them (mjCGeom::SetFluidCoefs).
"""

from __future__ import annotations

import math

import numpy as np

from flexor.mjcf import frames
from flexor.types import GeomType

# blunt drag, slender drag, angular drag, Kutta lift, Magnus lift
FLUID_COEF = (0.5, 0.25, 1.5, 1.0, 1.0)
# 15-point Gauss-Kronrod weights, points l = x^3 / (1-x)^2 on [0, inf) and dl/dx there
# (MuJoCo's mjCGeom::GetAddedMassKappa)
_KRONROD_W = (0.01146766, 0.03154605, 0.05239501, 0.07032663, 0.08450236, 0.09517529,
              0.10221647, 0.10474107, 0.10221647, 0.09517529, 0.08450236, 0.07032663,
              0.05239501, 0.03154605, 0.01146766)
_KRONROD_L = (7.865151709349917e-08, 1.7347976913907274e-05, 0.0003548008144506193,
              0.002846636252924549, 0.014094260903596077, 0.053063261727396636,
              0.17041978741317773, 0.5, 1.4036301548686991, 3.9353484827022642,
              11.644841677041734, 39.53187807410903, 177.5711362220801, 1429.4772912937397,
              54087.416549217705)
_KRONROD_D = (5.538677720489877e-05, 0.002080868285293228, 0.016514126520723166,
              0.07261900344370877, 0.23985243401862602, 0.6868318249020725,
              1.8551129519182894, 5.0, 14.060031152313941, 43.28941239611009,
              156.58546376397112, 747.9826085305024, 5827.4042950027115, 116754.0197944512,
              25482945.327264845)


def _added_mass_kappa(dx: float, dy: float, dz: float) -> float:
  """Added-mass coefficient of an ellipsoid along its first axis: the integral over l in
  [0, inf) of dx dy dz / sqrt((dx^2 + l)^3 (dy^2 + l) (dz^2 + l)), by 15-point Gauss-Kronrod
  quadrature, operation by operation as MuJoCo's compiler."""
  invdx2, invdy2, invdz2 = 1.0 / (dx * dx), 1.0 / (dy * dy), 1.0 / (dz * dz)
  scale = math.pow(dx * dx * dx * dy * dz, 0.4)
  kappa = 0.0
  for w, l, d in zip(_KRONROD_W, _KRONROD_L, _KRONROD_D):
    lam = scale * l
    denom = (1 + lam * invdx2) * math.sqrt((1 + lam * invdx2) * (1 + lam * invdy2)
                                           * (1 + lam * invdz2))
    kappa += scale * d / denom * w
  return kappa * invdx2


def geom_fluid(gtype: int, size: np.ndarray, shape: int, coef: np.ndarray) -> np.ndarray:
  """``geom_fluid`` (12,) of one geom: (1, blunt, slender, angular, Kutta, Magnus, virtual mass
  (3), virtual inertia (3)) for ``fluidshape="ellipsoid"``, zeros otherwise. The virtual mass
  and inertia are those of the geom's equivalent ellipsoid in a fluid of unit density
  (mjCGeom::SetFluidCoefs)."""
  out = np.zeros(12)
  if shape != 1:
    return out
  if gtype == GeomType.SPHERE:
    dx = dy = dz = size[0]
  elif gtype == GeomType.CAPSULE:
    dx, dy, dz = size[0], size[0], size[1] + size[0]
  elif gtype == GeomType.CYLINDER:
    dx, dy, dz = size[0], size[0], size[1]
  else:
    dx, dy, dz = size[0], size[1], size[2]
  volume = 4.0 / 3.0 * math.pi * dx * dy * dz
  kx, ky, kz = (_added_mass_kappa(dx, dy, dz), _added_mass_kappa(dy, dz, dx),
                _added_mass_kappa(dz, dx, dy))
  eps = frames.MJ_EPS

  def inertia_factor(a, b, ka, kb):
    return (a * a - b * b) * (a * a - b * b) * abs(kb - ka) / max(
        eps, abs(2 * (a * a - b * b) + (a * a + b * b) * (ka - kb)))

  out[0] = 1.0
  out[1:6] = coef
  out[6:9] = [volume * k / max(eps, 2 - k) for k in (kx, ky, kz)]
  out[9:12] = [volume * inertia_factor(dy, dz, ky, kz) / 5,
               volume * inertia_factor(dz, dx, kz, kx) / 5,
               volume * inertia_factor(dx, dy, kx, ky) / 5]
  return out
