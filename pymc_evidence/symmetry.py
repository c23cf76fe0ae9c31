"""Weight-space symmetries of multilayer perceptrons: counting them and matching modes under them.

A layer of ``h`` hidden units computes ``g(x W + b)`` and feeds it to the next layer through
``V``. Permuting the hidden units (the columns of ``W``, the entries of ``b``, the rows of ``V``)
leaves the network's function unchanged: ``h!`` equivalent weight vectors. For an odd
activation (``tanh``: ``g(-a) = -g(a)``) flipping the signs of one unit's incoming weights,
bias and outgoing weights is a symmetry too, ``2^h`` more; for an even one (``g(-a) = g(a)``)
flipping the incoming weights and bias alone is. Every mode of an MLP posterior thus comes with
``2^h·h!`` (or ``h!``) copies of the same height and shape.

:func:`mlp_symmetry` counts the copies (the Laplace evidence of one mode is multiplied by the
count); :class:`MLPLayer` names which model variables make up a layer, so that
:func:`align_units` can bring two modes into register before they are compared, and two
optimisations that landed on copies of one mode are merged rather than counted twice.
"""

from __future__ import annotations

import itertools
import math
import weakref
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.sparse.csgraph import connected_components

from pymc_evidence._validation import integer

__all__ = [
    "MLPLayer", "mlp_symmetry", "align_units", "alignment_map", "transform_units", "as_layers",
    "detect_mlp_layers", "suggested_layers", "missing_layers_message", "resolve_layers",
    "is_nearest_copy", "sampling_layers", "symmetrised_covariance", "domain_anchor",
    "log_stabiliser",
]

#: g(-a) = -g(a): flipping a unit's incoming weights, bias and outgoing weights is a symmetry.
ODD_ACTIVATIONS = frozenset({"tanh", "sin", "arctan", "atan", "erf", "softsign", "sinh", "asinh"})
#: g(-a) = g(a): flipping a unit's incoming weights and bias is a symmetry.
EVEN_ACTIVATIONS = frozenset({"cos", "abs", "gaussian", "square", "cosh"})
#: No sign symmetry: only the h! permutations.
OTHER_ACTIVATIONS = frozenset(
    {
        "relu",
        "sigmoid",
        "logistic",
        "softplus",
        "elu",
        "selu",
        "gelu",
        "silu",
        "swish",
        "leaky_relu",
        "exp",
        "mish",
    }
)
ACTIVATIONS = ODD_ACTIVATIONS | EVEN_ACTIVATIONS | OTHER_ACTIVATIONS


def _sign_symmetric(activation: str) -> bool:
    name = _validate_activation(activation)
    return name in ODD_ACTIVATIONS or name in EVEN_ACTIVATIONS


def _validate_activation(activation: str) -> str:
    if not isinstance(activation, str):
        raise TypeError(f"activation must be a string, got {type(activation).__name__}")
    name = activation.lower()
    if name not in ACTIVATIONS:
        raise ValueError(
            f"unknown activation {activation!r}; known odd activations (2^h·h! symmetries): "
            f"{sorted(ODD_ACTIVATIONS)}; even: {sorted(EVEN_ACTIVATIONS)}; others (h! "
            f"symmetries): {sorted(OTHER_ACTIVATIONS)}. For anything else pass the count of "
            "equivalent modes directly as laplace(..., symmetry=count)."
        )
    return name


def mlp_symmetry(hidden_units: int, activation: str = "tanh") -> int:
    r"""Number of equivalent weight vectors of one hidden layer: :math:`2^h\,h!` or :math:`h!`.

    .. math::

        S(h) = \begin{cases} 2^h\, h! & g \text{ odd or even (e.g. } \tanh\text{)} \\
                             h!       & \text{otherwise (e.g. ReLU)} \end{cases}

    Every mode of the posterior of an MLP with ``h`` hidden units in a layer has ``S(h)``
    copies related by permuting the units (``h!``) and, for ``g(-a) = ±g(a)``, flipping the
    sign of each unit's weights (``2^h``). The Laplace evidence of one mode is multiplied by
    ``S(h)`` — ``log S(h) = log h! + h log 2`` is added to the log evidence.

    Parameters
    ----------
    hidden_units : int
        ``h``, the number of hidden units in the layer (>= 0).
    activation : str, default "tanh"
        The hidden units' activation. Odd: ``"tanh"``, ``"sin"``, ``"arctan"``, ``"erf"``,
        ``"softsign"``, ...; even: ``"cos"``, ``"abs"``, ``"gaussian"``, ...; without sign
        symmetry: ``"relu"``, ``"sigmoid"``, ``"softplus"``, ``"elu"``, ``"gelu"``, ...

    Returns
    -------
    int
        The count ``S(h)`` (multiply over layers for a deeper network).

    Raises
    ------
    ValueError
        For a negative ``hidden_units`` or an activation name not in the lists above.

    Notes
    -----
    Barber & Bishop (1997, eq. 11) and Bishop (1995, pp. 434–436) print the correction as
    ``ln h! + 2 ln h``. The number of sign-flip × permutation symmetries is ``2^h·h!``, whose
    log is ``ln h! + h ln 2``; that is what this function counts (the two agree only at
    ``h = 2`` and ``h = 4``).

    The logistic sigmoid satisfies ``σ(-a) = 1 - σ(a)``: flipping a unit is a symmetry of the
    network only together with a shift of the next layer's bias, so it is not counted here.
    If your sigmoid network has an output bias with a broad prior, ``mlp_symmetry(h, "tanh")``
    is the better count. A linear ("identity") layer has a continuous symmetry group, not a
    finite number of modes, and is rejected.

    Examples
    --------
    >>> import pymc_evidence as pm_evidence
    >>> pm_evidence.mlp_symmetry(3)
    48
    >>> pm_evidence.mlp_symmetry(3, "relu")
    6

    References
    ----------
    Barber, D. and Bishop, C. M. (1997). Bayesian model comparison by Monte Carlo chaining.
    NIPS 9, eq. 11. Bishop, C. M. (1995). Neural Networks for Pattern Recognition, §5.1.1
    and pp. 434–436.
    """
    h = integer("hidden_units", hidden_units, 0)
    count = math.factorial(h)
    return count * 2**h if _sign_symmetric(activation) else count


@dataclass(frozen=True)
class MLPLayer:
    """Which model variables make up one hidden layer, for matching modes under its symmetries.

    The layer computes ``g(x @ W + b)`` and passes it on through ``V``; each variable must be a
    free variable without a transform (e.g. ``pm.Normal``), so that its value in the flat
    unconstrained vector is the weight itself.

    Parameters
    ----------
    weights : str
        Name of the input→hidden weights ``W``; the hidden units run along ``weights_axis``.
    output : str, optional
        Name of the hidden→next-layer weights ``V``; the hidden units run along
        ``output_axis``. None when the model has integrated them out analytically (as Liang
        2005, §3, integrates out the output weights of a regression MLP): a unit is then its
        incoming weights and bias alone.
    bias : str, optional
        Name of the hidden biases ``b`` (shape ``(h,)``), if the layer has them.
    activation : str, default "tanh"
        The hidden units' activation (see :func:`mlp_symmetry`).
    weights_axis : int, default -1
        Axis of ``W`` indexing hidden units (``W`` of shape ``(n_in, h)`` as in ``x @ W``).
    output_axis : int, default 0
        Axis of ``V`` indexing hidden units (``V`` of shape ``(h, n_out)`` or ``(h,)``).

    Examples
    --------
    >>> from pymc_evidence.symmetry import MLPLayer
    >>> layer = MLPLayer(weights="w_in", bias="b_in", output="w_out")
    """

    weights: str
    output: str | None = None
    bias: str | None = None
    activation: str = "tanh"
    weights_axis: int = -1
    output_axis: int = 0

    def __post_init__(self):
        _validate_activation(self.activation)

    @property
    def sign_flips(self) -> str | None:
        """Which parts change sign under a unit's flip: ``"all"``, ``"incoming"`` or None."""
        name = self.activation.lower()
        if name in ODD_ACTIVATIONS:
            return "all"
        if name in EVEN_ACTIVATIONS:
            return "incoming"
        return None

    def hidden_units(self, shapes: dict) -> int:
        """``h`` from the variables' shapes (``{name: shape}``), checking they agree."""
        h = shapes[self.weights][self.weights_axis]
        h_out = shapes[self.output][self.output_axis] if self.output is not None else h
        h_bias = shapes[self.bias][0] if self.bias is not None else h
        if not h == h_out == h_bias:
            raise ValueError(
                f"MLP layer {self!r}: the hidden-unit axes disagree ({self.weights}: {h}, "
                f"{self.output}: {h_out}" + (f", {self.bias}: {h_bias})" if self.bias else ")")
            )
        return int(h)


def as_layers(mlp_layers, density) -> list[MLPLayer]:
    """Normalise ``mlp_layers`` (an :class:`MLPLayer`, a dict of its fields, or a list of
    either) and check its variables against the model's unconstrained value variables."""
    if mlp_layers is None:
        return []
    if isinstance(mlp_layers, (MLPLayer, dict)):
        mlp_layers = [mlp_layers]
    layers = []
    for layer in mlp_layers:
        if isinstance(layer, dict):
            layer = MLPLayer(**layer)
        if not isinstance(layer, MLPLayer):
            raise TypeError(
                f"mlp_layers must be MLPLayer objects or dicts of their fields, got {layer!r}"
            )
        shapes = dict(zip(density.names, density.shapes))
        for name in (layer.weights, layer.output, layer.bias):
            if name is None:
                continue
            if name not in shapes:
                raise ValueError(
                    f"MLP layer variable {name!r} is not an untransformed free variable of the "
                    f"model; the model's unconstrained value variables are {density.names}"
                )
        layer.hidden_units(shapes)
        layers.append(layer)
    return layers


def detect_mlp_layers(model) -> list[MLPLayer]:
    """Hidden layers recognised in a PyMC model's graph, for the warnings that suggest
    ``mlp_layers``.

    A layer is an activation of :data:`ACTIVATIONS` applied to ``x @ W + b`` (possibly scaled
    by a constant or a scalar), where ``x`` holds no free variable or is the activations of a
    layer found before (a deeper layer of the same network), and ``W`` and ``b`` each
    depend on one untransformed free variable besides scalars (a non-centred ``W = z / √α``
    gives ``z``). Its output is ``V`` when the activations go on through ``@ V`` with ``V`` of
    the same kind; otherwise it is None, as for a model that integrates the output weights out
    (Liang 2005, §3). Whether the units are exchangeable a priori (what makes the permutations
    symmetries) is not checked: the result is a suggestion, and one without output weights
    only a candidate, since its columns need not be hidden units at all (a multi-label
    logistic regression has the same form); :func:`suggested_layers` checks those.
    """
    from pytensor.graph.traversal import ancestors, io_toposort

    values = set(model.value_vars)
    untransformed = {v for v in values if model.rvs_to_transforms[model.values_to_rvs[v]] is None}

    def free(expr) -> list:
        return [v for v in ancestors([expr]) if v in values]

    def one_variable(expr, ndim=None):
        tensors = [v for v in free(expr) if v.type.ndim > 0]
        if (len(tensors) == 1 and ndim in (None, tensors[0].type.ndim)
                and tensors[0] in untransformed):
            return tensors[0].name
        return None

    def op_name(node) -> str:
        op = getattr(node.op, "core_op", node.op)  # a Blockwise matmul counts as its core op
        return type(getattr(op, "scalar_op", op)).__name__.lower()

    def weights_of(term):
        """W of a term x @ W (x free of variables, or the activations of a layer found
        before: a deeper layer), or of x * W, which is what PyTensor makes of x @ W when x has
        one column."""
        node = term.owner
        if node is None or (free(node.inputs[0]) and node.inputs[0] not in activations):
            return None
        if op_name(node) in _PRODUCTS or (op_name(node) == "mul" and len(node.inputs) == 2
                                           and node.inputs[0].type.ndim == 2):
            return node.inputs[1]
        return None

    nodes = io_toposort(model.value_vars, [model.logp()])
    shapes = {k: np.shape(v) for k, v in model.initial_point().items()}
    layers, activations = [], set()
    for node in nodes:
        activation = {"scalarsigmoid": "sigmoid"}.get(op_name(node), op_name(node))
        if activation not in ACTIVATIONS or activation == "exp" or node.inputs[0].owner is None:
            continue
        pre = node.inputs[0]
        while pre.owner is not None and op_name(pre.owner) == "mul":  # a constant or scalar scale
            scaled = [i for i in pre.owner.inputs if any(v.type.ndim for v in free(i))]
            if len(scaled) != 1:
                break
            pre = scaled[0]
        terms = pre.owner.inputs if pre.owner is not None and op_name(pre.owner) == "add" else [pre]
        products = [t for t in terms if weights_of(t) is not None]
        if len(products) != 1 or len(terms) > 2:
            continue
        weights = one_variable(weights_of(products[0]), 2)
        others = [t for t in terms if t is not products[0]]
        bias = one_variable(others[0], 1) if others else None
        output = None
        for consumer in nodes:  # g(...) @ V, or g(...) * V for one hidden unit
            product = op_name(consumer) in _PRODUCTS or (
                op_name(consumer) == "mul" and len(consumer.inputs) == 2)
            if product and consumer.inputs[0] is node.outputs[0]:
                output = output or one_variable(consumer.inputs[1])
        if weights is None or (len(terms) == 2 and bias is None):
            continue
        layer = MLPLayer(weights=weights, output=output, bias=bias, activation=activation)
        try:
            layer.hidden_units(shapes)
        except (ValueError, IndexError):
            continue
        layers.append(layer)
        activations.add(node.outputs[0])
    return layers


#: Graph ops of a matrix product x @ W (PyTensor 2 and 3, before rewriting).
_PRODUCTS = frozenset({"dot", "matmul"})


def suggested_layers(model, density) -> list[MLPLayer]:
    """The layers :func:`detect_mlp_layers` recognises that are worth suggesting: those with
    output weights, and those without only where :func:`is_symmetry` confirms them."""
    return [layer for layer in detect_mlp_layers(model)
            if layer.output is not None or is_symmetry(density, layer)]


def resolve_layers(mlp_layers, model, density) -> list[MLPLayer]:
    """The layers an estimator aligns: ``mlp_layers`` as given (None: none), or for ``"auto"``
    those :func:`detect_mlp_layers` recognises and :func:`is_symmetry` confirms."""
    if isinstance(mlp_layers, str) and mlp_layers == "auto":
        return [layer for layer in detect_mlp_layers(model) if is_symmetry(density, layer)]
    return as_layers(mlp_layers, density)


def is_symmetry(density, layer: MLPLayer, draws: int = 4) -> bool:
    """Whether permuting ``layer``'s units (and flipping their signs, where its activation
    allows) leaves the log prior and the log likelihood unchanged at prior draws.

    A recognised layer's units are exchangeable only if their priors are: a unit-specific
    prior scale, or a bias prior that is not symmetric about zero, breaks the symmetry, and
    aligning particles to one copy would then change the distribution they represent. Two
    transformations are checked, a cyclic shift with alternating signs and a swap of two units,
    which between them generate every permutation. The draws come from a fixed stream so that
    checking leaves the estimators' random numbers alone.
    """
    h = layer.hidden_units(dict(zip(density.names, density.shapes)))
    if h < 2 and layer.sign_flips is None:
        return False
    X = density.prior_draws(np.random.default_rng(0), draws)
    before = np.concatenate(density.log_densities(X))
    signs = np.where(np.arange(h) % 2 == 0, -1.0, 1.0) if layer.sign_flips else None
    swap = np.arange(h)
    swap[:2] = swap[1::-1]
    for permutation, flips in ((np.roll(np.arange(h), 1), signs), (swap, None)):
        moved = np.stack([transform_units(density, layer, x, permutation, flips) for x in X])
        after = np.concatenate(density.log_densities(moved))
        if not np.allclose(before, after, rtol=1e-9, atol=1e-9):
            return False
    return True


def missing_layers_message(layers: list[MLPLayer], consequence: str) -> str:
    """The warning for a model in which :func:`detect_mlp_layers` found ``layers`` but that was
    given no ``mlp_layers``: what goes wrong (``consequence``) and the argument to pass."""
    code = ", ".join(_layer_code(layer) for layer in layers)
    code = code if len(layers) == 1 else f"[{code}]"
    return (f"the model looks like a neural network ({len(layers)} hidden layer"
            f"{'s' if len(layers) > 1 else ''} of {layers[0].activation} units) but mlp_layers "
            f"was not given: {consequence} If its hidden units are exchangeable a priori, pass "
            f"mlp_layers={code}.")


def _layer_code(layer: MLPLayer) -> str:
    parts = [repr(layer.weights)]
    parts += [f"{k}={getattr(layer, k)!r}" for k in ("bias", "output") if getattr(layer, k)]
    if layer.activation != "tanh":
        parts.append(f"activation={layer.activation!r}")
    return f"MLPLayer({', '.join(parts)})"


def _unit_matrix(values: dict, layer: MLPLayer) -> tuple[np.ndarray, np.ndarray]:
    """``(incoming, outgoing)``: one row per hidden unit, its incoming weights and bias
    (h × (n_in + 1)) and its outgoing weights (h × n_out; no columns without ``output``)."""
    w = np.moveaxis(values[layer.weights], layer.weights_axis, 0)
    h = w.shape[0]
    parts = [w.reshape(h, -1)]
    if layer.bias is not None:
        parts.append(values[layer.bias].reshape(h, 1))
    incoming = np.concatenate(parts, axis=1)
    if layer.output is None:
        return incoming, incoming[:, :0]
    outgoing = np.moveaxis(values[layer.output], layer.output_axis, 0).reshape(h, -1)
    return incoming, outgoing


#: Per density, the flat coordinates of each layer's units (:func:`_unit_coordinates`): samplers
#: align thousands of small batches, and splitting the point layout each time dominated.
_COORDINATES = weakref.WeakKeyDictionary()


def _unit_coordinates(density, layer: MLPLayer) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_unit_matrix` of the coordinates' indices: ``x[incoming]`` and ``x[outgoing]``
    are the units of a flat point ``x``."""
    layers = _COORDINATES.setdefault(density, {})
    if layer not in layers:
        coordinates = {k: v[0].astype(int)
                       for k, v in density.split(np.arange(density.dim, dtype=float)[None]).items()}
        layers[layer] = _unit_matrix(coordinates, layer)
    return layers[layer]


def transform_units(
    density, layer: MLPLayer, x: np.ndarray, permutation, signs=None
) -> np.ndarray:
    """Apply a symmetry of ``layer`` to the flat point ``x``: unit ``j`` of the result is unit
    ``permutation[j]`` of ``x``, sign-flipped where ``signs[j] == -1``.

    The result has the same log density as ``x`` (the network computes the same function).
    Flipping needs an odd or even activation.
    """
    values = {k: v[0].copy() for k, v in density.split(np.asarray(x, float)[None, :]).items()}
    h = layer.hidden_units({k: v.shape for k, v in values.items()})
    permutation = np.asarray(permutation, dtype=int)
    if sorted(permutation.tolist()) != list(range(h)):
        raise ValueError(f"permutation must be a permutation of range({h}), got {permutation}")
    signs = np.ones(h) if signs is None else np.asarray(signs, dtype=float)
    if signs.shape != (h,) or not np.all(np.isin(signs, (-1.0, 1.0))):
        raise ValueError(f"signs must be {h} values of +1 or -1, got {signs}")
    if np.any(signs < 0) and layer.sign_flips is None:
        raise ValueError(f"activation {layer.activation!r} has no sign-flip symmetry")

    def apply(name, axis, flip):
        arr = np.moveaxis(values[name], axis, 0)[permutation]
        if flip:
            arr = arr * signs.reshape((h,) + (1,) * (arr.ndim - 1))
        values[name] = np.moveaxis(arr, 0, axis)

    apply(layer.weights, layer.weights_axis, True)
    if layer.bias is not None:
        apply(layer.bias, 0, True)
    if layer.output is not None:
        apply(layer.output, layer.output_axis, layer.sign_flips == "all")
    return np.concatenate([values[name].ravel() for name in density.names])


def align_units(density, layers: list[MLPLayer], reference: np.ndarray, x: np.ndarray):
    """The copy of ``x`` under the layers' symmetries that lies closest to ``reference``.

    For each layer (in order), hidden units of ``x`` are matched to those of ``reference`` by
    an optimal assignment (Hungarian algorithm) on the squared distance between units, each
    unit's sign chosen to minimise that distance when the activation allows flips. This is
    exact for one hidden layer; for several layers it aligns them one after another (a greedy
    approximation, since permuting one layer reorders the next layer's incoming weights).
    ``x`` is one point (d,) or a batch (m, d), aligned point by point.
    """
    index, signs = alignment_map(density, layers, reference, x)
    x = np.asarray(x, float)
    return signs * np.take_along_axis(np.atleast_2d(x), np.atleast_2d(index), axis=1).reshape(
        x.shape)


def alignment_map(density, layers: list[MLPLayer], reference: np.ndarray, x: np.ndarray):
    """:func:`align_units` as a signed permutation of coordinates: ``(index, signs)`` with
    ``align_units(...) == signs * x[index]`` (row by row for a batch (m, d)).

    The symmetry is linear and orthogonal, so the same map carries the gradient of the log
    density at ``x`` to its gradient at the aligned point. A row too far out for its distances
    to the reference's units to be finite (a diverged trajectory's proposal: non-finite, or
    beyond about 1e153) has no nearest copy and maps to itself.
    """
    x = np.asarray(x, float)
    points = np.atleast_2d(x)
    reference = np.asarray(reference, float)
    m, d = points.shape
    index, signs = np.tile(np.arange(d), (m, 1)), np.ones((m, d))
    finite = _alignable(points, reference)
    if not finite.all():
        if finite.any():
            index[finite], signs[finite] = alignment_map(density, layers, reference,
                                                         points[finite])
        return index.reshape(x.shape), signs.reshape(x.shape)
    rows = np.arange(m)[:, None]
    for layer in layers:
        current = signs * points[rows, index]
        incoming, outgoing = _unit_coordinates(density, layer)
        permutation, flips = _match_units(
            (reference[incoming], reference[outgoing]),
            (current[:, incoming], current[:, outgoing]), layer
        )
        # Unit j of the result is unit permutation[j] of the current point, times flips[j].
        new_index, new_signs = index.copy(), signs.copy()
        for unit_coordinates, flipped in ((incoming, True),
                                          (outgoing, layer.sign_flips == "all")):
            source = unit_coordinates[permutation]  # (m, h, p)
            new_index[:, unit_coordinates] = index[rows[:, :, None], source]
            new_signs[:, unit_coordinates] = (signs[rows[:, :, None], source]
                                              * (flips[:, :, None] if flipped else 1.0))
        index, signs = new_index, new_signs
    return index.reshape(x.shape), signs.reshape(x.shape)


def is_nearest_copy(density, layers: list[MLPLayer], reference: np.ndarray,
                    x: np.ndarray) -> np.ndarray:
    """Whether each row of ``x`` is, of all its copies, the one nearest ``reference``.

    Such points form the reference's domain (its Dirichlet domain under the symmetries), which
    holds exactly one copy of almost every point: restricted to it, a posterior is the
    posterior over the functions the network computes. A sampler that aligns its points to the
    reference, and whose kernels do not commute with the symmetries (their metric or
    directions come from the aligned points), must keep its moves in the domain: a move that
    crosses into another copy's domain, where the copies overlap, changes the law of the
    functions the points compute (on Liang's MLPs the evidence came out 0.04–0.13 nats low).
    Kept there, HMC moves barely move once the domain is thin, as it is with many redundant
    units (:func:`symmetrised_covariance` is the other way); slice moves shrink towards their
    start instead, and only slow down. A point too far out to align (a
    diverged trajectory: non-finite, or beyond about 1e153) is in no domain.
    """
    x = np.atleast_2d(np.asarray(x, float))
    index, signs = alignment_map(density, layers, reference, x)
    return (_alignable(x, np.asarray(reference, float))
            & np.all(index == np.arange(x.shape[1]), axis=1) & np.all(signs > 0, axis=1))


#: How far :func:`domain_anchor` moves a point, relative to its largest coordinate (or 1):
#: far enough that the distances deciding a point's nearest copy differ by orders of magnitude
#: more than their rounding, close enough that the domains of distinct copies do not change.
ANCHOR_OFFSET = 1e-6


def domain_anchor(mode: np.ndarray) -> np.ndarray:
    """A point whose domain (the points it is the nearest copy of, :func:`is_nearest_copy`)
    stands for ``mode``'s: ``mode`` moved by ``ANCHOR_OFFSET`` along a fixed direction that no
    symmetry of the units maps to itself, so that its copies are distinct even when the mode's
    are not (a mode with coinciding or dead units is its own copy, every point ties between
    copies, and its "domain" is not one copy of the space). Deterministic, so that a resumed
    run finds the same domain."""
    mode = np.asarray(mode, float)
    direction = np.random.default_rng(0).standard_normal(mode.shape)
    return mode + ANCHOR_OFFSET * max(1.0, float(np.max(np.abs(mode), initial=0.0))) * direction


def log_stabiliser(density, layers: list[MLPLayer], mode: np.ndarray, metric: np.ndarray,
                   radius: float = 1.0) -> float:
    r"""Log of the number of the layers' symmetries that leave ``mode`` where it is.

    Of the :math:`|G|` symmetric copies of a point, :math:`|G| / |G_\theta|` are distinct
    (orbit-stabiliser theorem), :math:`G_\theta` the symmetries that fix it: a mode whose
    units coincide (as when the data determine only their sum) or whose unit is dead (zero
    weights, which its sign flip maps to themselves) stands for fewer copies than
    :func:`mlp_symmetry` counts. A symmetry fixes the mode here when it moves it by less than
    ``radius`` in the Mahalanobis distance :math:`\sqrt{\delta^\top M \delta}` of
    ``metric`` :math:`M` (the Hessian at the mode: the copies then overlap within the Laplace
    width, and are one mode, as :func:`pymc_evidence.laplace` merges optima).

    Counted unit by unit: units that swapping (or, with a sign symmetry, swapping and
    flipping both) keeps within the radius form classes, units that their own flip keeps
    there are dead, and :math:`|G_\theta| = \prod_c n_c! \cdot 2^{\text{dead}}` for classes
    of :math:`n_c` units, per layer.
    """
    mode = np.asarray(mode, float)
    log_count = 0.0
    for layer in layers:
        incoming, outgoing = _unit_coordinates(density, layer)
        h = incoming.shape[0]
        out_sign = -1.0 if layer.sign_flips == "all" else 1.0

        def moved(changes) -> bool:
            delta = np.zeros_like(mode)
            for coordinates, values in changes:
                delta[coordinates] = values - mode[coordinates]
            return float(delta @ metric @ delta) < radius**2

        def swapped(i, j, sign):
            return [(incoming[i], sign * mode[incoming[j]]),
                    (incoming[j], sign * mode[incoming[i]]),
                    (outgoing[i], (out_sign if sign < 0 else 1.0) * mode[outgoing[j]]),
                    (outgoing[j], (out_sign if sign < 0 else 1.0) * mode[outgoing[i]])]

        signs = (1.0, -1.0) if layer.sign_flips is not None else (1.0,)
        alike = np.eye(h, dtype=bool)
        for i, j in itertools.combinations(range(h), 2):
            alike[i, j] = alike[j, i] = any(moved(swapped(i, j, sign)) for sign in signs)
        _, labels = connected_components(alike, directed=False)
        log_count += sum(math.lgamma(n + 1) for n in np.bincount(labels))
        if layer.sign_flips is not None:
            dead = sum(moved([(incoming[i], -mode[incoming[i]]),
                              (outgoing[i], out_sign * mode[outgoing[i]])]) for i in range(h))
            log_count += dead * math.log(2)
    return log_count


def _alignable(points: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Rows of ``points`` whose squared distances to the reference's units are sure to be
    finite (each is at most 2|x|² + 2|reference|²)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.isfinite(2 * np.sum(points**2, axis=1) + 2 * np.sum(reference**2))


def symmetrised_covariance(density, layer: MLPLayer, cov: np.ndarray) -> np.ndarray:
    """The average of the covariance ``cov`` (d × d) over the layer's symmetries,
    Σ_g P_g cov P_gᵀ / |G| for the signed permutations P_g of its hidden units.

    Every unit gets the units' mean block, two different units the mean over pairs, and a
    unit and the other coordinates the mean over units; entries that a unit's sign flip
    negates average to zero. A kernel with this metric commutes with the symmetries, so its
    moves may cross from one copy's domain into another's without changing the law of the
    functions the points compute.
    """
    incoming, outgoing = _unit_coordinates(density, layer)
    units = np.concatenate([incoming, outgoing], axis=1)  # (h, p)
    h = units.shape[0]
    flips = np.concatenate([np.full(incoming.shape[1], layer.sign_flips is not None),
                            np.full(outgoing.shape[1], layer.sign_flips == "all")])
    rest = np.setdiff1d(np.arange(cov.shape[0]), units.ravel())
    within = np.mean([cov[np.ix_(u, u)] for u in units], axis=0)
    within[flips[:, None] != flips[None, :]] = 0.0
    between = (np.mean([cov[np.ix_(units[j], units[k])] for j in range(h) for k in range(h)
                        if j != k], axis=0) if h > 1 else np.zeros_like(within))
    between[flips[:, None] | flips[None, :]] = 0.0
    unit_rest = np.mean([cov[np.ix_(u, rest)] for u in units], axis=0)
    unit_rest[flips] = 0.0
    result = np.empty_like(cov)
    result[np.ix_(rest, rest)] = cov[np.ix_(rest, rest)]
    for j in range(h):
        result[np.ix_(units[j], rest)] = unit_rest
        result[np.ix_(rest, units[j])] = unit_rest.T
        for k in range(h):
            result[np.ix_(units[j], units[k])] = within if j == k else between
    return result


def sampling_layers(density, layers: list[MLPLayer]) -> list[MLPLayer]:
    """The layers a sampler aligns its points under: the one layer, or of several the one
    with the most copies.

    Under one layer's symmetries the nearest copy is exact (an assignment problem). For
    several, :func:`align_units` aligns them one after another, which need not give every
    copy of a point the same result: a sampler that keeps its points among the aligned ones
    could then hold some functions in two copies and weigh them twice.
    """
    if len(layers) <= 1:
        return list(layers)
    shapes = dict(zip(density.names, density.shapes))
    return [max(layers, key=lambda layer: mlp_symmetry(layer.hidden_units(shapes),
                                                       layer.activation))]


def _match_units(reference_units, units, layer: MLPLayer):
    """Permutations (m, h) and signs (m, h) taking each point's ``units`` (incoming, outgoing;
    arrays (m, h, ·)) nearest the reference's: one Hungarian assignment per point."""
    ref_units = np.concatenate(reference_units, axis=1)
    x_in, x_out = units
    plain = _sq_dist(ref_units, np.concatenate([x_in, x_out], axis=2))
    cost = plain
    if layer.sign_flips is not None:
        out_sign = -1.0 if layer.sign_flips == "all" else 1.0
        flip_cost = _sq_dist(ref_units, np.concatenate([-x_in, out_sign * x_out], axis=2))
        cost = np.minimum(plain, flip_cost)
    m, h = cost.shape[:2]
    permutation = _assignment(cost)
    signs = np.ones((m, h))
    if layer.sign_flips is not None:
        rows, units_range = np.arange(m)[:, None], np.arange(h)[None, :]
        signs = np.where(flip_cost[rows, units_range, permutation]
                         < plain[rows, units_range, permutation], -1.0, 1.0)
    return permutation, signs


#: Up to this many hidden units every permutation is tried at once for all points (24 at 4);
#: beyond it, one Hungarian assignment per point (a Python loop, slower for small layers).
_ENUMERATED_UNITS = 4


def _assignment(cost: np.ndarray) -> np.ndarray:
    """(m, h) optimal assignments of a batch of cost matrices (m, h, h): row ``j`` of the
    result gives, for each reference unit ``i``, the unit ``permutation[j, i]`` of point ``j``
    that minimises the summed cost."""
    m, h = cost.shape[:2]
    if h <= _ENUMERATED_UNITS:
        candidates = _permutations(h)
        total = np.zeros((m, len(candidates)))
        for unit in range(h):
            total += cost[:, unit, candidates[:, unit]]
        return candidates[np.argmin(total, axis=1)]
    permutation = np.empty((m, h), dtype=int)
    for row, point_cost in enumerate(cost):
        # A square cost matrix's row indices come back as arange(h).
        permutation[row] = linear_sum_assignment(point_cost)[1]
    return permutation


@lru_cache(maxsize=None)
def _permutations(h: int) -> np.ndarray:
    return np.array(list(itertools.permutations(range(h))), dtype=int).reshape(-1, h)


def _sq_dist(reference: np.ndarray, units: np.ndarray) -> np.ndarray:
    """(m, h, h): squared distance between reference unit i and unit j of each point."""
    return ((reference[None, :, None, :] - units[:, None, :, :]) ** 2).sum(axis=-1)
