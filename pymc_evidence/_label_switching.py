"""Symmetric copies of every mode found in the log density: a mixture's exchangeable
components (label switching), parameters that change sign together, and an MLP hidden layer's
units.

When permuting one axis of some free variables together (a mixture's component means,
scales and weights) leaves the log prior and the log likelihood unchanged, every mode of the
posterior has ``K!`` copies, one per labelling of the ``K`` components; when changing the sign
of some together does (``a`` and ``b`` of ``y ~ N(a·b, σ)``), two. Estimators that explore from
the prior (chaining, nested sampling) visit them all; those that start from an optimiser or
from NUTS see one or a few copies and would count only those. The points that are, of all their
copies, the one nearest a reference point form a fundamental domain: its copies tile the space,
so ``Z = copies × ∫_domain p(θ, D) dθ`` exactly, whatever the overlap of the copies.
:func:`canonical` maps points into that domain.

Everything here acts on flat unconstrained points through the model's transforms (permuting and
negating in the constrained space, where a simplex's weights are the components' own), so it
covers transformed variables (a ``Dirichlet``'s weights, a ``HalfNormal``'s scales) as well.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy.sparse.csgraph import connected_components
from scipy.special import gammaln

from pymc_evidence.density import _ordered_transform
from pymc_evidence.symmetry import (
    MLPLayer,
    _assignment,
    align_units,
    domain_anchor,
    is_nearest_copy,
    mlp_symmetry,
)

__all__ = ["Components", "SignFlip", "HiddenUnits", "Domain", "find_symmetries",
           "domain_around", "canonical", "in_domain", "log_stabiliser", "log_copies"]

#: Up to this many candidate variables of one length, every subset is tried; beyond, each
#: variable alone and all of them together.
_MAX_SUBSET_SEARCH = 8


@dataclass(frozen=True)
class Components:
    """Free variables and, for each, the axis of its value (0, or -1 for the last) that indexes
    ``size`` exchangeable components."""

    members: tuple[tuple[str, int], ...]
    size: int

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.members)

    @property
    def count(self) -> int:
        """``K!``: the labellings of the components."""
        return math.factorial(self.size)

    def setting(self) -> dict:
        return {"kind": "permutation", "variables": list(self.names), "copies": self.count}


@dataclass(frozen=True)
class SignFlip:
    """Free variables whose values changing sign together is a symmetry of the model (``a``
    and ``b`` of ``y ~ N(a·b, σ)``): two copies of every mode."""

    names: tuple[str, ...]
    count = 2

    def setting(self) -> dict:
        return {"kind": "sign", "variables": list(self.names), "copies": self.count}


@dataclass(frozen=True)
class HiddenUnits:
    """An MLP hidden layer (:class:`~pymc_evidence.symmetry.MLPLayer`) whose units permuting,
    and flipping in sign where the activation allows, is a symmetry of the model:
    ``count`` = :func:`~pymc_evidence.symmetry.mlp_symmetry` copies of every mode (2^h h! for
    tanh). A unit's flip changes the sign of slices of its variables, which the searches for
    whole-variable symmetries here do not find."""

    layer: MLPLayer
    count: int

    @property
    def names(self) -> tuple[str, ...]:
        layer = self.layer
        return tuple(n for n in (layer.weights, layer.bias, layer.output) if n is not None)

    def setting(self) -> dict:
        return {"kind": "hidden units", "variables": list(self.names), "copies": self.count}


Symmetry = Components | SignFlip | HiddenUnits


def find_symmetries(density, draws: int = 4, layer: MLPLayer | None = None) -> list[Symmetry]:
    """The symmetries of the model's log density, checked at ``draws`` prior draws: ``layer``'s
    units (given, already checked), then sets of exchangeable components among the other free
    variables (:func:`_components`), then sign flips among the rest: the smallest sets whose
    joint change of sign leaves the log prior and the log likelihood unchanged, disjoint from
    one another (every subset when there are at most eight such variables, else each alone and
    all together). A variable whose support is not symmetric (a scale) cannot flip."""
    model = density.model
    found: list[Symmetry] = []
    if layer is not None:
        shapes = dict(zip(density.names, density.shapes))
        found.append(HiddenUnits(layer, mlp_symmetry(layer.hidden_units(shapes),
                                                     layer.activation)))
    probe = _probe(density, draws)
    if probe is None:
        return found
    before, values = probe
    taken = {name for sym in found for name in sym.names}
    found += _components(density, before, values, taken)
    taken = {name for sym in found for name in sym.names}
    names = [rv.name for rv in model.free_RVs
             if rv.name not in taken and _ordered_transform(model, rv) is None]
    for subset in _subsets(names):
        if taken.intersection(subset):
            continue
        flipped = dict(values)
        flipped.update({name: -values[name] for name in subset})
        if _same_density(density, _unconstrained(density, flipped), before):
            found.append(SignFlip(subset))
            taken.update(subset)
    return found


def _probe(density, draws: int) -> tuple[np.ndarray, dict] | None:
    """The log priors and log likelihoods at ``draws`` prior draws where both are finite, from
    a fixed stream (so that estimators' random numbers are left alone), and the draws'
    constrained values; None when fewer than two of 8 × ``draws`` are finite (equal infinite
    values would pass any transformation as a symmetry)."""
    X = density.prior_draws(np.random.default_rng(0), 8 * draws)
    log_prior, log_likelihood = density.log_densities(X)
    finite = np.flatnonzero(np.isfinite(log_prior) & np.isfinite(log_likelihood))[:draws]
    if finite.size < 2:
        return None
    return (np.concatenate([log_prior[finite], log_likelihood[finite]]),
            density.to_constrained(X[finite]))


def _subsets(items: list) -> list[tuple]:
    """Every non-empty subset, smallest first; beyond ``_MAX_SUBSET_SEARCH`` items, each item
    alone and all together."""
    if len(items) <= _MAX_SUBSET_SEARCH:
        return [s for r in range(1, len(items) + 1) for s in itertools.combinations(items, r)]
    return [(item,) for item in items] + [tuple(items)]


def _components(density, before: np.ndarray, values: dict,
                taken: set[str]) -> list[Components]:
    """The sets of free variables (other than those ``taken``) that permuting together along
    one axis (the first or the last of each) is a symmetry of the model, checked at the prior
    draws whose log densities are ``before`` and constrained values ``values``.

    Candidates are free variables with an axis of length ≥ 2 that are not ordered (an ordered
    transform already picks one labelling): a mixture's weights and per-component scalars along
    their only axis, its component means of shape (K, D) along either. For each length, the
    smallest sets whose joint permutation leaves the log prior and the log likelihood unchanged
    (to 1e-9) are kept, disjoint from one another, smallest first: two independent mixtures are
    two sets (``K!²`` labellings), not one. A variable belongs to one set at most (a symmetry
    along a second axis of it is left out: its copies are then counted only as far as the
    optimiser or sampler finds them). Two permutations are tried, a cyclic shift and a swap of
    the first two components, which between them generate every permutation.
    """
    model = density.model
    lengths: dict[int, list[tuple[str, int]]] = {}
    for rv in model.free_RVs:
        shape = values[rv.name].shape[1:]
        if _ordered_transform(model, rv) is not None or rv.name in taken:
            continue
        for axis in sorted({0, -1} if len(shape) > 1 else {-1} if shape else set()):
            if shape[axis] >= 2:
                lengths.setdefault(int(shape[axis]), []).append((rv.name, axis))
    found = []
    taken = set(taken)  # a variable in one set only: relabellings along two axes of it
    for size, members in lengths.items():
        for subset in _subsets(members):
            names = [name for name, _ in subset]
            if taken.intersection(names) or len(set(names)) < len(names):
                continue
            candidate = Components(subset, size)
            if all(_invariant(density, values, candidate, order, before)
                   for order in (np.roll(np.arange(size), 1), _swap(size))):
                found.append(candidate)
                taken.update(names)
    return found


def _swap(size: int) -> np.ndarray:
    order = np.arange(size)
    order[:2] = order[1::-1]
    return order


def _invariant(density, values, components, order, before) -> bool:
    return _same_density(density, _unconstrained(density, _permuted(values, components, order)),
                         before)


def _same_density(density, moved: np.ndarray, before: np.ndarray) -> bool:
    """Whether the points ``moved`` to have the (finite) log prior and log likelihood
    ``before``."""
    if not np.isfinite(moved).all():
        return False
    after = np.concatenate(density.log_densities(moved))
    return bool(np.all(np.isfinite(after)) and np.allclose(before, after, rtol=1e-9, atol=1e-9))


def _permuted(values: dict, components: Components, order: np.ndarray) -> dict:
    """Constrained values with the components reordered: ``order`` of shape (K,) for every
    row, or (rows, K) per row."""
    out = dict(values)
    for name, axis in components.members:
        axis = axis + 1 if axis >= 0 else axis  # the values' first axis holds the rows
        v = np.moveaxis(values[name], axis, -1)
        if order.ndim == 2:  # one order per row, broadcast over the axes between
            index = order.reshape(order.shape[0], *([1] * (v.ndim - 2)), -1)
        else:
            index = order
        moved = np.take_along_axis(v, np.broadcast_to(index, v.shape), axis=-1)
        out[name] = np.moveaxis(moved, -1, axis)
    return out


def _unconstrained(density, values: dict) -> np.ndarray:
    return density.from_constrained({name: values[name] for name in density.free_names})


@dataclass(frozen=True)
class Domain:
    """The points that are, of all their copies, the one nearest a reference point (its
    Dirichlet domain): a fundamental domain that holds the reference's whole mode when the
    copies are apart, wherever the components sit."""

    symmetries: tuple[Symmetry, ...]
    anchor: np.ndarray  # the reference point, unconstrained (d,)
    reference: dict  # its constrained values, one row per variable


def domain_around(density, symmetries: list, x: np.ndarray) -> Domain:
    """The domain of ``x`` (unconstrained), moved off any point a symmetry fixes first
    (:func:`~pymc_evidence.symmetry.domain_anchor`: a mode with coinciding components is its
    own copy, and its nearest-copy region would not be one copy of the space)."""
    anchor = domain_anchor(np.asarray(x, float))
    return Domain(tuple(symmetries), anchor, density.to_constrained(anchor[None, :]))


def _features(values: dict, components: Components) -> np.ndarray:
    """Each component's values, (rows, K, features)."""
    rows = next(iter(values.values())).shape[0]
    return np.concatenate(
        [np.moveaxis(values[name], axis + 1 if axis >= 0 else axis, 1)
         .reshape(rows, components.size, -1) for name, axis in components.members], axis=2)


def _nearest_orders(values: dict, components: Components, reference: dict) -> np.ndarray:
    """Per row, the order of its components that puts each in the reference's slot it is
    matched to (least total squared distance), shape (rows, K)."""
    ref = _features(reference, components)[0]
    cost = ((_features(values, components)[:, None, :, :] - ref[None, :, None]) ** 2).sum(axis=3)
    return _assignment(np.nan_to_num(cost, nan=_FAR, posinf=_FAR))  # cost[row, slot, component]


#: The cost of matching a component whose values are not finite (a diverged draw).
_FAR = 1e300


def _flips(values: dict, flip: SignFlip, reference: dict) -> np.ndarray:
    """Per row, whether its flipped copy is nearer the reference (squared distance)."""
    gain = sum(np.sum((values[name] * reference[name]).reshape(len(values[name]), -1), axis=1)
               for name in flip.names)  # |v - r|² - |-v - r|² = -4 v·r
    return gain < 0


def _split(domain: Domain) -> tuple[list[MLPLayer], list]:
    """The domain's hidden layers (aligned in the unconstrained space, where their untransformed
    weights are) and its other symmetries (acting on constrained values)."""
    layers = [s.layer for s in domain.symmetries if isinstance(s, HiddenUnits)]
    return layers, [s for s in domain.symmetries if not isinstance(s, HiddenUnits)]


def canonical(density, domain: Domain, X: np.ndarray) -> np.ndarray:
    """The copies of the rows of ``X`` (n × d, unconstrained) in ``domain``."""
    X = np.atleast_2d(X)
    layers, others = _split(domain)
    if layers:  # the units' own variables: disjoint from the others', so the order is free
        X = align_units(density, layers, domain.anchor, X)
    if not others:
        return X
    values = density.to_constrained(X)
    for sym in others:
        if isinstance(sym, SignFlip):
            signs = np.where(_flips(values, sym, domain.reference), -1.0, 1.0)
            values = dict(values)
            values.update({name: values[name] * signs.reshape(-1, *[1] * (values[name].ndim - 1))
                           for name in sym.names})
        else:
            values = _permuted(values, sym, _nearest_orders(values, sym, domain.reference))
    return _unconstrained(density, values)


def in_domain(density, domain: Domain, X: np.ndarray) -> np.ndarray:
    """Whether each row of ``X`` lies in ``domain``."""
    X = np.atleast_2d(X)
    layers, others = _split(domain)
    inside = (is_nearest_copy(density, layers, domain.anchor, X) if layers
              else np.ones(X.shape[0], dtype=bool))
    if not others:
        return inside
    values = density.to_constrained(X)
    for sym in others:
        if isinstance(sym, SignFlip):
            inside &= ~_flips(values, sym, domain.reference)
        else:
            orders = _nearest_orders(values, sym, domain.reference)
            inside &= (orders == np.arange(sym.size)).all(axis=1)
    return inside


def log_copies(symmetries: list) -> float:
    """``log Π count`` over the symmetry sets (``K!`` labellings, 2 signs, 2^h h! for a tanh
    layer): the copies of every mode."""
    return float(sum(math.log(sym.count) for sym in symmetries))


def log_stabiliser(density, symmetries: list, x: np.ndarray, metric: np.ndarray,
                   merge_distance: float) -> float:
    """log of the number of symmetries (relabellings, sign flips) that leave the mode ``x``
    where it is.

    Two components coincide when swapping them moves ``x`` by less than ``merge_distance`` in
    the metric (``√(δᵀ M δ)``, M the mode's negative Hessian); the relabellings that fix the
    mode permute coinciding components among themselves: ``Π_classes (class size)!``. A mode
    whose components all differ stands for ``K!`` distinct copies; one with all components
    equal, for one. A sign flip fixes a mode it moves by less than that (one at zero).
    """
    values = density.to_constrained(np.atleast_2d(x))
    total = 0.0
    for comp in symmetries:
        if isinstance(comp, SignFlip):  # a mode at zero is its own flipped copy
            flipped = dict(values)
            flipped.update({name: -values[name] for name in comp.names})
            delta = _unconstrained(density, flipped)[0] - x
            total += math.log(2) if delta @ metric @ delta <= merge_distance**2 else 0.0
            continue
        pairs = list(itertools.combinations(range(comp.size), 2))
        swapped = []
        for i, j in pairs:
            order = np.arange(comp.size)
            order[[i, j]] = order[[j, i]]
            swapped.append(_permuted(values, comp, order))
        moved = _unconstrained(density, {name: np.concatenate([s[name] for s in swapped])
                                         for name in density.free_names})
        delta = moved - x
        close = np.einsum("ij,jk,ik->i", delta, metric, delta) <= merge_distance**2
        adjacency = np.zeros((comp.size, comp.size), dtype=bool)
        for (i, j), c in zip(pairs, close):
            adjacency[i, j] = adjacency[j, i] = c
        _, labels = connected_components(adjacency, directed=False)
        total += float(np.sum(gammaln(np.bincount(labels) + 1)))
    return total
