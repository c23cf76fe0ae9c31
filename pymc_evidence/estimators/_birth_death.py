"""Liang's birth/death moves between MLPs that differ by one hidden unit (Liang 2005, §2.3).

Models H_1, …, H_m share every variable except one hidden layer, named by an
:class:`~pymc_evidence.MLPLayer`, whose unit axis has h, h + 1, … entries. A unit is the
vector of its ξ parameters (incoming weights, bias, outgoing weights). A **birth** from a model
with h units draws a unit u ~ q and inserts it at a position k chosen uniformly among the
h + 1 slots; the reverse **death** removes a unit chosen uniformly among the h + 1. The map
(ω, u, k) ↔ (ω*, k) only copies numbers, so its Jacobian is 1, and the Metropolis–Hastings
ratio of a birth is (the slot probabilities 1/(h+1) cancel)

.. math::

    \\frac{T(\\omega^* \\to \\omega)}{T(\\omega \\to \\omega^*)}
    = \\frac{q_{i+1,i}}{q_{i,i+1}}\\,\\frac{1}{q(u)}
    \\qquad \\text{(Liang 2005, §2.3, without its 1/(i+1))}

and its inverse for a death. Liang's 1/(i+1) is a death's choice of unit against a birth
that places the new unit last; kept with a uniformly placed unit, it would divide each model's
evidence by H!. ĝ and the targets enter through eq. 2.2 in :mod:`.cmc`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_evidence._constants import LOG_2PI
from pymc_evidence.symmetry import MLPLayer, _unit_matrix

__all__ = ["UnitLayout", "validate_nested", "unit_layout", "BirthDeath", "StandardNormalUnits",
           "LiangUnits", "FixedUnits", "pooled_units"]


def _as_layer(layer) -> MLPLayer:
    if isinstance(layer, dict):
        layer = MLPLayer(**layer)
    if not isinstance(layer, MLPLayer):
        raise TypeError(f"mlp_layer must be an MLPLayer or a dict of its fields, got {layer!r}")
    return layer


def validate_nested(named_models: dict, layer) -> tuple[MLPLayer, list[int]]:
    """Check, before anything is compiled, that the models are MLPs nested by one hidden unit.

    Returns the layer and each model's number of hidden units. Raises ``ValueError`` naming the
    model and the variable when a layer variable is missing or transformed, when the models are
    not ordered h, h + 1, h + 2, …, or when they differ in anything but the layer's unit axis.
    """
    layer = _as_layer(layer)
    unit_names = [n for n in (layer.weights, layer.bias, layer.output) if n is not None]
    hidden, reference = [], None
    for name, model in named_models.items():
        free = {rv.name: rv for rv in model.free_RVs}
        for var in unit_names:
            if var not in free:
                raise ValueError(
                    f"model {name!r}: MLP layer variable {var!r} is not a free variable; its free "
                    f"variables are {sorted(free)}"
                )
            if model.rvs_to_transforms.get(free[var]) is not None:
                raise ValueError(
                    f"model {name!r}: MLP layer variable {var!r} has a transform; birth/death "
                    "moves need the unit parameters themselves in the unconstrained vector "
                    "(use an unbounded prior such as pm.Normal)"
                )
        shapes = {k: np.shape(v) for k, v in model.initial_point().items()}
        try:
            h = layer.hidden_units(shapes)
        except (ValueError, IndexError) as err:
            raise ValueError(f"model {name!r}: {err}") from err
        if h < 1:
            raise ValueError(f"model {name!r}: the MLP layer has no hidden units")
        # Everything but the unit axis must agree between models: the shared variables, and the
        # other axes of the unit variables (e.g. the number of inputs).
        signature = {k: s for k, s in shapes.items() if k not in unit_names}
        for var, axis in ((layer.weights, layer.weights_axis), (layer.output, layer.output_axis)):
            if var is not None:
                signature[var] = tuple(np.delete(np.array(shapes[var]), axis))
        if reference is None:
            reference = (name, signature)
        elif signature != reference[1]:
            raise ValueError(
                f"models {reference[0]!r} and {name!r} differ in more than the hidden units of "
                f"the MLP layer: {reference[1]} against {signature} (variables with the hidden "
                "axis removed)"
            )
        hidden.append(h)
    if any(b != a + 1 for a, b in zip(hidden, hidden[1:])):
        raise ValueError(
            "birth/death moves need the models ordered by hidden units, each with one more than "
            f"the previous; got {dict(zip(named_models, hidden))}"
        )
    return layer, hidden


class UnitLayout(NamedTuple):
    """Where one model's hidden units sit in its flat unconstrained vector."""

    units: np.ndarray  # (h, ξ) flat index of every parameter of every unit
    shared: np.ndarray  # (d − hξ,) flat indices of everything else, in a model-independent order
    n_incoming: int  # the first n_incoming of a unit's ξ parameters are its incoming weights, bias

    @property
    def hidden_units(self) -> int:
        return self.units.shape[0]


def unit_layout(density, layer: MLPLayer, shared_names: list[str]) -> UnitLayout:
    """The :class:`UnitLayout` of ``density`` (a ModelDensity); ``shared_names`` fixes the order
    of the shared variables, so that entry r of ``shared`` means the same thing in every model."""
    index = {k: v[0] for k, v in density.split(np.arange(density.dim)[None, :]).items()}
    incoming, outgoing = _unit_matrix(index, layer)
    units = np.concatenate([incoming, outgoing], axis=1).astype(int)
    shared = [index[name].ravel() for name in shared_names]
    shared = np.concatenate(shared).astype(int) if shared else np.zeros(0, dtype=int)
    return UnitLayout(units, shared, incoming.shape[1])


def pooled_units(layout: UnitLayout, layer: MLPLayer, draws: np.ndarray) -> np.ndarray:
    """Every unit of every draw (n·h × ξ), with each unit's sign-flipped copy when the
    activation has that symmetry, so that a proposal fitted to them is symmetric too."""
    units = draws[:, layout.units].reshape(-1, layout.units.shape[1])
    if layer.sign_flips is None:
        return units
    flip = np.ones(units.shape[1])
    flip[: units.shape[1] if layer.sign_flips == "all" else layout.n_incoming] = -1.0
    return np.concatenate([units, units * flip])


# ------------------------------------------------------------------ proposals q(u | kept units)
class FixedUnits(NamedTuple):
    """q(u) that ignores the current units: any object with ``draw(rng, n)`` and ``logpdf(u)``
    (e.g. the multivariate t fitted to the pilot's pooled units)."""

    proposal: object

    def draw(self, rng, kept):
        return self.proposal.draw(rng, kept.shape[0])

    def logpdf(self, u, kept):
        return self.proposal.logpdf(u)


class StandardNormalUnits(NamedTuple):
    """q(u) = N(0, I): the exact prior of a unit whose parameters are standard-normal z's of a
    non-centred parameterisation, so that a birth's ratio ψ(ω*)/(ψ(ω) q(u)) is a likelihood
    ratio."""

    def draw(self, rng, kept):
        return rng.standard_normal((kept.shape[0], kept.shape[2]))

    def logpdf(self, u, kept):
        return -0.5 * np.sum(u**2, axis=1) - 0.5 * u.shape[1] * LOG_2PI


class LiangUnits(NamedTuple):
    """Liang's q(u | ω) (§2.3): every parameter of the new unit i.i.d. N(μ, ζ²), with μ and ζ²
    the mean and variance of the parameters of the units kept (the current model's for a birth,
    all but the removed unit's for a death), so that both directions use the same q."""

    def _moments(self, kept):
        flat = kept.reshape(kept.shape[0], -1)
        return flat.mean(axis=1), np.maximum(flat.var(axis=1, ddof=1), 1e-12)

    def draw(self, rng, kept):
        mu, var = self._moments(kept)
        return mu[:, None] + np.sqrt(var)[:, None] * rng.standard_normal((kept.shape[0], kept.shape[2]))

    def logpdf(self, u, kept):
        mu, var = self._moments(kept)
        return -0.5 * (np.sum((u - mu[:, None]) ** 2, axis=1) / var
                       + u.shape[1] * np.log(2 * np.pi * var))


# ------------------------------------------------------------------ the move
class BirthDeath:
    """The between-model move of :func:`~pymc_evidence.cmc` for models nested by hidden units.

    ``move(rng, i, j, X) -> (X_new, log_T)``: the proposed points of model j (|i − j| = 1) from
    the points X of model i, and log T(ω* → ω) − log T(ω → ω*) without the model-proposal
    probabilities q_ij (which the caller adds).

    Parameters
    ----------
    layouts : list of UnitLayout
        One per model, in order of hidden units h, h + 1, …
    unit_proposals : list
        ``unit_proposals[i]`` proposes the unit added from model i to model i + 1 (objects
        with ``draw(rng, kept)`` and ``logpdf(u, kept)``, ``kept`` the n × h × ξ units kept).
    """

    def __init__(self, layouts: list[UnitLayout], unit_proposals: list):
        self.layouts = layouts
        self.unit_proposals = unit_proposals

    def __call__(self, rng, i: int, j: int, X: np.ndarray):
        if j == i + 1:
            return self._birth(rng, i, X)
        if j == i - 1:
            return self._death(rng, i, X)
        raise ValueError(f"birth/death moves join neighbouring models only, not {i} and {j}")

    def _birth(self, rng, i, X):
        small, big = self.layouts[i], self.layouts[i + 1]
        n, h = X.shape[0], small.hidden_units
        kept = X[:, small.units]  # (n, h, ξ)
        u = self.unit_proposals[i].draw(rng, kept)
        slot = rng.integers(0, h + 1, size=n)
        units = np.empty((n, h + 1, kept.shape[2]))
        for k in range(h + 1):  # one vectorised insertion per slot value (h + 1 is small)
            rows = slot == k
            units[rows] = np.insert(kept[rows], k, u[rows], axis=1)
        new = np.empty((n, big.units.size + big.shared.size))
        new[:, big.shared] = X[:, small.shared]
        new[:, big.units] = units
        return new, -self.unit_proposals[i].logpdf(u, kept)

    def _death(self, rng, i, X):
        big, small = self.layouts[i], self.layouts[i - 1]
        n, h = X.shape[0], big.hidden_units
        units = X[:, big.units]  # (n, h, ξ)
        slot = rng.integers(0, h, size=n)
        u = units[np.arange(n), slot]
        keep = np.arange(h)[None, :] != slot[:, None]
        kept = units[keep].reshape(n, h - 1, units.shape[2])
        new = np.empty((n, small.units.size + small.shared.size))
        new[:, small.shared] = X[:, big.shared]
        new[:, small.units] = kept
        return new, self.unit_proposals[i - 1].logpdf(u, kept)
