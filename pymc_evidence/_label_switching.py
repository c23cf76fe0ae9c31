"""Label switching: exchangeable components of a model (a mixture's) and the copies of every
mode they make.

When permuting one axis of some free variables together (a mixture's component means,
scales and weights) leaves the log prior and the log likelihood unchanged, every mode of the
posterior has ``K!`` copies, one per labelling of the ``K`` components. Estimators that explore
from the prior (chaining, nested sampling) visit them all; those that start from an optimiser or
from NUTS see one or a few copies and would count only those. The points whose labelling is the
one nearest a reference point's form a fundamental domain: its ``K!`` images tile the space, so
``Z = K! ∫_domain p(θ, D) dθ`` exactly, whatever the overlap of the copies. :func:`canonical`
maps points into that domain.

Everything here acts on flat unconstrained points through the model's transforms (permuting in
the constrained space, where a simplex's weights are the components' own), so it covers
transformed variables (a ``Dirichlet``'s weights, a ``HalfNormal``'s scales) as well.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.sparse.csgraph import connected_components
from scipy.special import gammaln

from pymc_evidence.density import _ordered_transform
from pymc_evidence.symmetry import domain_anchor

__all__ = ["Components", "Domain", "find_components", "domain_around", "canonical", "in_domain",
           "log_stabiliser", "log_copies"]

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
    def log_count(self) -> float:
        """``log K!``: the labellings of the components."""
        return float(gammaln(self.size + 1))


def find_components(density, draws: int = 4) -> list[Components]:
    """The sets of free variables that permuting together along one axis (the first or the last
    of each) is a symmetry of the model, checked numerically at prior draws.

    Candidates are free variables with an axis of length ≥ 2 that are not ordered (an ordered
    transform already picks one labelling): a mixture's weights and per-component scalars along
    their only axis, its component means of shape (K, D) along either. For each length, the
    smallest sets whose joint permutation leaves the log prior and the log likelihood unchanged
    (to 1e-9) at ``draws`` prior draws are kept, disjoint from one another, smallest first: two
    independent mixtures are two sets (``K!²`` labellings), not one. A variable belongs to one
    set at most (a symmetry along a second axis of it is left out: its copies are then counted
    only as far as the optimiser or sampler finds them). Two permutations are
    tried, a cyclic shift and a swap of the first two components, which between them generate
    every permutation. The draws come from a fixed stream so that estimators' random numbers
    are left alone.
    """
    model = density.model
    if not any(rv.type.ndim for rv in model.free_RVs):
        return []  # nothing to permute: spare the compile of the transforms
    X = density.prior_draws(np.random.default_rng(0), draws)
    before = np.concatenate(density.log_densities(X))
    values = density.to_constrained(X)
    lengths: dict[int, list[tuple[str, int]]] = {}
    for rv in model.free_RVs:
        shape = values[rv.name].shape[1:]
        if _ordered_transform(model, rv) is not None:
            continue
        for axis in sorted({0, -1} if len(shape) > 1 else {-1} if shape else set()):
            if shape[axis] >= 2:
                lengths.setdefault(int(shape[axis]), []).append((rv.name, axis))
    found = []
    taken: set[str] = set()  # a variable in one set only: relabellings along two axes of it
    for size, members in lengths.items():
        if len(members) <= _MAX_SUBSET_SEARCH:
            subsets = [s for r in range(1, len(members) + 1)
                       for s in itertools.combinations(members, r)]
        else:
            subsets = [(member,) for member in members] + [tuple(members)]
        for subset in subsets:
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
    moved = _unconstrained(density, _permuted(values, components, order))
    if not np.isfinite(moved).all():
        return False
    after = np.concatenate(density.log_densities(moved))
    return bool(np.allclose(before, after, rtol=1e-9, atol=1e-9))


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
    """The points whose labelling is, of all ``Π K!``, the one nearest a reference point's
    (its Dirichlet domain): a fundamental domain that holds the reference's whole mode when
    the copies are apart, wherever the components sit."""

    components: tuple[Components, ...]
    reference: dict  # constrained values of the reference point, one row per variable


def domain_around(density, components: list[Components], x: np.ndarray) -> Domain:
    """The domain of ``x`` (unconstrained), moved off any point a relabelling fixes first
    (:func:`~pymc_evidence.symmetry.domain_anchor`: a mode with coinciding components is its
    own copy, and its nearest-copy region would not be one copy of the space)."""
    anchor = domain_anchor(np.asarray(x, float))
    return Domain(tuple(components), density.to_constrained(anchor[None, :]))


def _features(values: dict, components: Components) -> np.ndarray:
    """Each component's values, (rows, K, features)."""
    rows = next(iter(values.values())).shape[0]
    return np.concatenate(
        [np.moveaxis(values[name], axis + 1 if axis >= 0 else axis, 1)
         .reshape(rows, components.size, -1) for name, axis in components.members], axis=2)


def _nearest_orders(values: dict, components: Components, reference: dict) -> np.ndarray:
    """Per row, the order of its components that puts each in the reference's slot it is
    matched to (least total squared distance, by linear assignment), shape (rows, K)."""
    ref = _features(reference, components)[0]
    cost = ((_features(values, components)[:, :, None, :] - ref[None, None]) ** 2).sum(axis=3)
    orders = np.empty(cost.shape[:2], dtype=int)
    for row, c in enumerate(cost):
        slots = linear_sum_assignment(np.where(np.isfinite(c), c, np.finfo(float).max))[1]
        orders[row] = np.argsort(slots)
    return orders


def canonical(density, domain: Domain, X: np.ndarray) -> np.ndarray:
    """The copies of the rows of ``X`` (n × d, unconstrained) in ``domain``."""
    X = np.atleast_2d(X)
    values = density.to_constrained(X)
    for comp in domain.components:
        values = _permuted(values, comp, _nearest_orders(values, comp, domain.reference))
    return _unconstrained(density, values)


def in_domain(density, domain: Domain, X: np.ndarray) -> np.ndarray:
    """Whether each row of ``X`` lies in ``domain``."""
    X = np.atleast_2d(X)
    values = density.to_constrained(X)
    inside = np.ones(X.shape[0], dtype=bool)
    for comp in domain.components:
        orders = _nearest_orders(values, comp, domain.reference)
        inside &= (orders == np.arange(comp.size)).all(axis=1)
    return inside


def log_copies(components: list[Components]) -> float:
    """``log Π K!`` over the component sets: the labellings of every mode."""
    return float(sum(comp.log_count for comp in components))


def log_stabiliser(density, components: list[Components], x: np.ndarray, metric: np.ndarray,
                   merge_distance: float) -> float:
    """log of the number of relabellings that leave the mode ``x`` where it is.

    Two components coincide when swapping them moves ``x`` by less than ``merge_distance`` in
    the metric (``√(δᵀ M δ)``, M the mode's negative Hessian); the relabellings that fix the
    mode permute coinciding components among themselves: ``Π_classes (class size)!``. A mode
    whose components all differ stands for ``K!`` distinct copies; one with all components
    equal, for one.
    """
    values = density.to_constrained(np.atleast_2d(x))
    total = 0.0
    for comp in components:
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
