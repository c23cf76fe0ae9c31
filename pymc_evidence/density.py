"""A PyMC model's log density as compiled functions of a batch of unconstrained points.

Everything downstream (kernels, estimators) works on the flat unconstrained vector of the
model's value variables, K points at a time (a K×d array). The log density is split as
``pm.sample_smc`` splits it:

* log prior = free variables' logp in unconstrained space, with the transforms' log-Jacobians;
* log likelihood = observed variables' logp plus every ``pm.Potential``.

so that the prior is exactly what ``pm.draw`` samples from, and the evidence is
``Z = ∫ exp(log prior + log likelihood) dθ``.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import NamedTuple

import numpy as np
import pymc as pm
import pytensor
import pytensor.sparse
import pytensor.tensor as pt
from pymc.distributions import transforms
from pymc.logprob.utils import local_check_parameter_to_ninf_switch
from pymc.pytensorf import compile as compile_pymc
from pymc.pytensorf import find_rng_nodes, join_nonshared_inputs, reseed_rngs
from pymc.variational.minibatch_rv import MinibatchRandomVariable
from pytensor.gradient import jacobian
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.graph.replace import clone_replace, vectorize_graph
from pytensor.graph.rewriting.basic import in2out, node_rewriter
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import ancestors
from pytensor.scalar import basic as ps
from pytensor.tensor.basic import get_underlying_scalar_constant_value
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.elemwise import Elemwise
from scipy.special import gammaln

from pymc_evidence._compat import BACKENDS, compile_mode, lkj_normaliser_error, model_types

__all__ = ["ModelDensity", "DensityValues", "get_density", "validate_model", "check_prior_draws",
           "different_data"]

IMPROPER_PRIORS = ("Flat", "HalfFlat")

# Rows per call of the batched function are capped so that the largest per-point intermediate
# array (e.g. the N×h hidden activations of an MLP) times the rows stays within ~1 MB: beyond
# the CPU cache, batching gets slower per point, not faster (benchmarks/results/density_speed.md).
# A rule on static shapes, not on timings, so that results stay bit-reproducible.
CHUNK_BUDGET_ELEMENTS = 2**17

#: Prior draws checked against the transforms' ranges: a range that misses 3% of the prior
#: (0.03 nats of evidence) is found with probability 1 - 0.97**256 > 0.9999.
TRANSFORM_CHECK_DRAWS = 256


class DensityValues(NamedTuple):
    """The density at K points: each field has leading dimension K."""

    log_prior: np.ndarray  # (K,)
    log_likelihood: np.ndarray  # (K,)
    grad_log_prior: np.ndarray  # (K, d)
    grad_log_likelihood: np.ndarray  # (K, d)


def _rv_label(rv) -> str:
    return type(rv.owner.op).__name__.removesuffix("RV")


def validate_model(model, *, require_gradient: bool = True) -> None:
    """Raise a clear error if ``model`` cannot have a proper evidence estimated.

    Cheap structural checks, run before anything is compiled: improper priors, point masses
    (``DiracDelta``, censored or hurdle latents), discrete free variables (when gradients are
    needed), simulators and minibatch scaling (``total_size``, ``pm.Minibatch``) as
    likelihoods, ordered priors that cannot be normalised, circular transforms chained with
    others, lower-dimensional supports without their transform and a missing likelihood.
    """
    if not isinstance(model, model_types()):
        raise TypeError(f"expected a pymc.Model, got {type(model).__name__}")
    if not model.free_RVs:
        raise ValueError(
            f"model {model.name or '(unnamed)'!r} has no free random variables: its evidence is "
            "just its likelihood; nothing to estimate"
        )
    for rv in model.free_RVs:
        op_name = type(rv.owner.op).__name__
        if any(op_name.startswith(bad) for bad in IMPROPER_PRIORS) or rv.owner.op.name in (
            "flat",
            "half_flat",
        ):
            raise ValueError(
                f"free variable {rv.name!r} has an improper prior ({_rv_label(rv)}): the evidence "
                "is undefined for improper priors. Give it a proper distribution, e.g. "
                f"pm.Normal({rv.name!r}, 0, 10) or pm.HalfNormal({rv.name!r}, 10)."
            )
        if rv.owner.op.name == "diracdelta":
            raise ValueError(
                f"free variable {rv.name!r} is a DiracDelta: a constant, whose prior is a point "
                "mass that no estimator here can integrate over (their parameters are "
                "continuous). Use the constant itself, or pm.Deterministic to record it."
            )
        point_mass = _point_masses(rv)
        if point_mass:
            raise ValueError(
                f"free variable {rv.name!r} ({_rv_label(rv)}) puts probability on single points "
                f"({point_mass}): its prior is partly discrete, and the estimators here integrate "
                "a density over continuous parameters, which misses those masses (a latent "
                "censored normal came out 0.7 nats low, a hurdle gamma 0.2 high). Write the "
                "variable as a continuous one and its transformation (a censored x is "
                "pm.Deterministic('x', pt.clip(z, lower, upper)) of a latent z), or sum the "
                "likelihood over the point masses in a pm.Potential."
            )
        if require_gradient and rv.type.dtype.startswith(("int", "uint", "bool")):
            raise ValueError(
                f"free variable {rv.name!r} is discrete ({_rv_label(rv)}, dtype {rv.type.dtype}); "
                "every estimator here integrates or optimises over continuous parameters. "
                "Marginalise it out (e.g. pymc_extras.marginalize, or sum over its values in a "
                "pm.Potential) and estimate the evidence of the marginalised model."
            )
    for rv in model.observed_RVs:  # PyMC allows total_size on observed variables only
        if any(cls.__name__ == "SimulatorRV" for cls in type(rv.owner.op).__mro__):
            raise ValueError(
                f"observed variable {rv.name!r} is a pm.Simulator: its log density is an ABC "
                "kernel (a distance between simulated and observed summaries, scaled by "
                "epsilon), not a likelihood, so the model has no evidence p(D | M) to estimate. "
                "Write the likelihood with a distribution, or a pm.Potential of its log density."
            )
        if isinstance(rv.owner.op, MinibatchRandomVariable):
            raise ValueError(
                f"variable {rv.name!r} was given total_size: PyMC rescales its log density as if "
                "the data were that large (minibatch variational inference), so the model has no "
                "evidence of its data. Remove total_size (and pm.Minibatch) to estimate the "
                "evidence of the data it holds."
            )
        if find_rng_nodes([model.rvs_to_values[rv]]):
            raise ValueError(
                f"observed variable {rv.name!r} holds random data (pm.Minibatch draws another "
                "batch at every evaluation): its likelihood changes from call to call and has "
                "no evidence. Pass the whole data (an array or pm.Data) as observed."
            )
    for rv in model.free_RVs:
        _ordered_transform(model, rv)  # raises for an ordered prior it cannot normalise
        _check_circular(model, rv)
        _check_subspace_support(model, rv)
    if not model.observed_RVs and not model.potentials:
        raise ValueError(
            f"model {model.name or '(unnamed)'!r} has no likelihood term (no observed variable "
            "and no pm.Potential): its evidence is 1. Add observed data with observed=..."
        )


@contextlib.contextmanager
def _batch_unsupported():
    """Say what to do when PyTensor cannot batch one of the model's Ops (it asserts or raises
    NotImplementedError while vectorising or compiling the batched graph, or a TypeError for
    sparse Ops, whose batched forms take dense inputs)."""
    try:
        yield
    except (AssertionError, NotImplementedError, TypeError) as err:
        if isinstance(err, TypeError) and "sparse" not in str(err).lower():
            raise
        raise NotImplementedError(
            f"PyTensor {pytensor.__version__} cannot evaluate this model's log density for a "
            f"batch of points ({type(err).__name__}: {str(err).strip()[:200] or 'no message'}), "
            "which every estimator here needs. Known cases: pm.LKJCorr on PyMC 5 (its "
            "determinant has no batched form): use pm.LKJCholeskyCov, or the Python 3.12 "
            "stack (PyMC 6); a sparse matrix in the model (e.g. pm.CAR's W): pass it dense."
        ) from err


def _batched(outputs, x, X):
    """Vectorise single-point graphs of the flat vector ``x`` over the rows of ``X``.

    PyMC guards logps with parameter checks that, vectorised naively, reduce over the batch:
    one invalid point would make every point -inf. Turn them into per-point switches first.
    """
    outputs = rewrite_graph(
        outputs, include=(), custom_rewrite=in2out(local_check_parameter_to_ninf_switch)
    )
    return vectorize_graph(outputs, replace={x: X})


class _NumpyTanh(Op):
    """``tanh`` evaluated by NumPy.

    PyTensor's C ``tanh`` calls the scalar libm function (15–20 ns per element); NumPy's is
    SIMD-vectorised on CPUs with AVX-512 (~1 ns) and faster without it too (14 ns on an AVX2
    machine, where the robot-arm MLP's density ran 1.5× faster with this Op). MLP activations
    over a batch of points are the dominant cost of the batched density, so this one Op is
    worth a Python call per evaluation.
    """

    __props__ = ()

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.tanh(inputs[0])


@node_rewriter([Elemwise])
def _local_tanh_to_numpy(fgraph, node):
    if isinstance(node.op.scalar_op, ps.Tanh):
        return [_NumpyTanh()(node.inputs[0])]


def _vectorised_activations(outputs):
    """Replace elementwise ``tanh`` by :class:`_NumpyTanh` (after gradients are taken)."""
    return rewrite_graph(outputs, include=(), custom_rewrite=in2out(_local_tanh_to_numpy))


def _chunk_rows(outputs) -> int:
    """Rows per call: :data:`CHUNK_BUDGET_ELEMENTS` over the largest single-point intermediate.

    Static shapes are fully known in a single-point graph with the data as constants; constants
    are excluded (they do not grow with the batch).
    """
    outputs = rewrite_graph(outputs, include=("canonicalize",))
    largest = 1
    for var in ancestors(outputs):
        shape = getattr(var.type, "shape", ())
        if shape and all(s is not None for s in shape) and not isinstance(var, pt.TensorConstant):
            largest = max(largest, int(np.prod(shape)))
    return max(1, CHUNK_BUDGET_ELEMENTS // largest)


class ModelDensity:
    """Compiled log prior, log likelihood and their gradients for batches of points.

    Parameters
    ----------
    model : pymc.Model, optional
        The model; taken from the ``with`` context when omitted.
    backend : {"c", "numba"}, default "c"
        PyTensor backend used to compile (``"c"`` is the ``cvm`` linker).
    require_gradient : bool, default True
        Reject discrete free variables (gradient-based estimators cannot move them).

    Attributes
    ----------
    names, shapes, sizes : list
        Value variables (unconstrained, e.g. ``sigma_log__``) in flat-vector order.
    dim : int
        Length ``d`` of the flat vector.
    chunk_rows : int
        Most points evaluated in one call of the compiled function; larger batches are split
        (a cache-size rule on the model's largest intermediate array, see ``_chunk_rows``).
    n_cases : int
        Number of i.i.d. cases: the largest leading dimension of the observed variables
        (e.g. 200 for 200 robot-arm cases with two outputs each).
    periodic : ndarray of int
        Flat columns in which the log density repeats every 2π: those of variables with PyMC's
        circular transform (``pm.VonMises``'s default), which wraps any real number onto
        (−π, π]. An integral over the unconstrained space counts each period once more; see
        :meth:`wrap` and :meth:`in_period`.

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from pymc_evidence.density import ModelDensity
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 1)
    ...     y = pm.Normal("y", mu, 1, observed=[0.1, -0.3])
    >>> density = ModelDensity(model)
    >>> X = density.prior_draws(np.random.default_rng(0), 4)   # (4, 1)
    >>> values = density(X)                                     # DensityValues
    >>> values.log_likelihood.shape
    (4,)
    """

    def __init__(self, model=None, *, backend: str = "c", require_gradient: bool = True):
        model = pm.modelcontext(model)
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        validate_model(model, require_gradient=require_gradient)
        self.model = model
        self.backend = backend
        self.mode = compile_mode(backend)

        self.value_vars = list(model.value_vars)
        point = model.initial_point()
        self.names = [v.name for v in self.value_vars]
        self.shapes = [np.shape(point[name]) for name in self.names]
        self.sizes = [int(np.prod(s, dtype=int)) for s in self.shapes]
        self.dim = int(sum(self.sizes))
        self.free_names = [rv.name for rv in model.free_RVs]
        self.n_cases = max((_leading_dim(model, rv) for rv in model.observed_RVs), default=1)
        self.periodic = _periodic_columns(model, self.value_vars, self.sizes)
        self._point = point

        # Draws first: a prior that cannot be sampled is reported before the costly compile.
        self._compile_prior_draws()
        self._compile_density()
        self._constrained_fn = None
        self._unconstrained_fn = None
        self._values_fn = None
        self._hessian_fn = None

    # ----------------------------------------------------------------- compilation
    def _compile_prior_draws(self):
        model = self.model
        outputs = _unconstrained(model)
        self._draw_rngs = find_rng_nodes(outputs)
        self._draw_fn = compile_pymc([], outputs, random_seed=0, mode=self.mode)
        try:
            self._draw_fn()
        except Exception as err:  # find which variable fails, to name it
            for rv in model.free_RVs:
                try:
                    pm.draw(rv, random_seed=0, mode=self.mode)
                except Exception as rv_err:
                    # first line only: PyTensor appends a debug dump of the failing Apply node
                    reason = (str(rv_err).strip().splitlines() or [type(rv_err).__name__])[0]
                    raise ValueError(
                        f"cannot draw from the prior of free variable {rv.name!r} "
                        f"({_rv_label(rv)}): {reason} Evidence estimation starts from exact prior "
                        "draws; give the distribution a `random` function or use a proper "
                        "built-in distribution."
                    ) from err
            raise
        self._check_transform_ranges()

    def _check_transform_ranges(self, draws: int = TRANSFORM_CHECK_DRAWS):
        """Raise if a transform's range misses part of its variable's prior.

        A transform given with ``transform=`` (e.g. ``log`` on a Normal) whose range is smaller
        than the distribution's support makes PyMC evaluate the prior restricted to that range
        without renormalising it: the log density is then no normalised prior, and the evidence
        is off by the log of the prior mass inside the range — a mass that depends on the
        parents in a hierarchy, so no constant fixes it. Prior draws outside the range map to
        NaN in the unconstrained space, which is how they are found here; a draw with an
        infinite value besides lies on the support's boundary in floating point (a Dirichlet
        weight that underflowed to 0 gives ±inf, and NaN where two did), which is no fault of
        the transform (:func:`check_prior_draws` reports those).
        """
        reseed_rngs(self._draw_rngs, 0)
        blocks = [[] for _ in self.free_names]
        # The circular transform maps reals onto [−π, π] (its forward is the identity).
        circular = [_is_circular(self.model.rvs_to_transforms.get(rv))
                    for rv in self.model.free_RVs]
        for _ in range(draws):
            for block, value, wraps in zip(blocks, self._draw_fn(), circular):
                outside = np.isnan(value).any() and not np.isinf(value).any()
                block.append(outside or (wraps and np.any(np.abs(value) > np.pi)))
        for rv, block in zip(self.model.free_RVs, blocks):
            outside = int(np.sum(block))
            transform = self.model.rvs_to_transforms.get(rv)
            if not outside or transform is None:
                continue
            if not np.all(np.isfinite(pm.draw(rv, draws=8, random_seed=0, mode=self.mode))):
                continue  # a prior that draws NaN itself is reported where the draws are checked
            name = " then ".join(type(t).__name__.removesuffix("Transform")
                                 for t in _flat_chain(transform))
            raise ValueError(
                f"free variable {rv.name!r} ({_rv_label(rv)}) has transform {name}, whose range "
                f"does not cover its prior: {outside} of {draws} prior draws fall outside it. "
                "PyMC evaluates such a prior restricted to the transform's range without "
                "renormalising it, so the evidence would be off by the log of the prior mass "
                "inside the range. Give the variable a distribution with that support instead: "
                f"pm.Truncated({rv.name!r}, pm.{_rv_label(rv)}.dist(...), lower=..., upper=...) "
                "renormalises the prior for any parent values, or e.g. pm.HalfNormal for a "
                "positive variable."
            )

    def _compile_density(self):
        model = self.model
        # Constants PyMC's log densities lack or get wrong: log n! per ordered vector (PyMC does
        # not renormalise an ordered prior), PyMC 5's LKJ normalising constant, CAR's constant.
        log_normaliser = _ordered_log_normaliser(model, self._point) - _lkj_excess(model)
        varlogp = model.varlogp + log_normaliser if log_normaliser else model.varlogp
        varlogp = varlogp + _car_log_normaliser(
            model.free_RVs, lambda rv: np.shape(self._point[model.rvs_to_values[rv].name]))
        datalogp = model.datalogp + _car_log_normaliser(
            model.observed_RVs, lambda rv: np.shape(_observed(model, rv)))
        [log_prior, log_lik], x = join_nonshared_inputs(
            self._point, [varlogp, datalogp], self.value_vars
        )
        X = pt.matrix("X", dtype=x.dtype)
        with _batch_unsupported():
            terms = _batched([log_prior, log_lik], x, X)
        # A likelihood that no parameter enters is one value for the batch, with zero gradient.
        grads = [pt.grad(term.sum(), X) if X in ancestors([term]) else pt.zeros_like(X)
                 for term in terms]
        batch_prior, batch_lik = (term if term.ndim else pt.alloc(term, X.shape[0])
                                  for term in terms)
        outputs = [batch_prior, batch_lik, *grads]
        if self.backend == "c":  # Numba compiles tanh itself; a Python Op would break it
            outputs = _vectorised_activations(outputs)
        self._x, self._X = x, X
        self._single = (log_prior, log_lik)
        self._batched_values = (batch_prior, batch_lik)
        self.chunk_rows = _chunk_rows([log_prior, log_lik])
        with _batch_unsupported():
            self._fn = compile_pymc([X], outputs, mode=self.mode)

    # ----------------------------------------------------------------- evaluation
    def __call__(self, X: np.ndarray) -> DensityValues:
        """Log prior, log likelihood and gradients at the rows of ``X`` (K×d)."""
        log_prior, *rest = self._in_chunks(self._fn, X)
        return DensityValues(_overflowed_to_zero(log_prior), *rest)

    def log_densities(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log prior and log likelihood at the rows of ``X`` (K×d), without the gradients:
        for samplers that do not use them (nested sampling), at about half the cost."""
        if self._values_fn is None:
            outputs = list(self._batched_values)
            if self.backend == "c":
                outputs = _vectorised_activations(outputs)
            self._values_fn = compile_pymc([self._X], outputs, mode=self.mode)
        log_prior, log_likelihood = self._in_chunks(self._values_fn, X)
        return _overflowed_to_zero(log_prior), log_likelihood

    def _in_chunks(self, fn, X) -> list[np.ndarray]:
        """``fn``'s outputs at the rows of ``X``, evaluated ``chunk_rows`` rows at a time."""
        X = np.atleast_2d(np.asarray(X, dtype=self._X.dtype))
        if X.shape[1] != self.dim:
            raise ValueError(f"points must have {self.dim} columns, got shape {X.shape}")
        if len(X) <= self.chunk_rows:
            return [np.asarray(v) for v in fn(X)]
        parts = [fn(X[i : i + self.chunk_rows]) for i in range(0, len(X), self.chunk_rows)]
        return [np.concatenate(field) for field in zip(*parts)]

    def prior_draws(self, rng: np.random.Generator, draws: int) -> np.ndarray:
        """``draws`` exact joint prior draws in the unconstrained space, shape (draws, d)."""
        reseed_rngs(self._draw_rngs, rng.integers(2**63))
        rows = [np.concatenate([np.ravel(v) for v in self._draw_fn()]) for _ in range(draws)]
        return np.asarray(rows, dtype=self._X.dtype).reshape(draws, self.dim)

    def hessian(self, x: np.ndarray) -> np.ndarray:
        """Exact Hessian of the log joint (prior + likelihood) at one point ``x`` (d,).

        Built as the vectorised Jacobian of the gradient: PyTensor 2.38's scan-based
        ``pt.hessian`` returns wrong entries (zeros) when a variable's length is a symbolic
        coordinate (``dims=``), and fails inside scan with ``pm.Data`` inputs.
        """
        if self._hessian_fn is None:
            x_var = self._x
            grad = pt.grad(self._single[0] + self._single[1], x_var)
            self._hessian_fn = compile_pymc(
                [x_var], jacobian(grad, x_var, vectorize=True), mode=self.mode
            )
        return np.asarray(self._hessian_fn(np.asarray(x, dtype=self._x.dtype)))

    # ----------------------------------------------------------------- periods
    def wrap(self, X: np.ndarray, around: np.ndarray) -> np.ndarray:
        """Points (rows of X) moved by whole periods into the one centred on ``around``: each
        :attr:`periodic` column in [around − π, around + π), where the log density is the same."""
        if not self.periodic.size:
            return np.asarray(X, dtype=float)
        X, column = np.array(X, dtype=float), self.periodic
        X[..., column] = np.mod(X[..., column] - around[column] + np.pi, 2 * np.pi) - np.pi \
            + around[column]
        return X

    def in_period(self, X: np.ndarray, around: np.ndarray) -> np.ndarray:
        """Whether each row of X lies in the period centred on ``around`` (the points
        :meth:`wrap` leaves where they are): with :attr:`periodic` columns the model's evidence
        is the integral over that period alone, the log density repeating outside it."""
        offset = np.atleast_2d(X)[:, self.periodic] - around[self.periodic]
        return np.all((offset >= -np.pi) & (offset < np.pi), axis=1)

    # ----------------------------------------------------------------- conversions
    def split(self, X: np.ndarray) -> dict[str, np.ndarray]:
        """Flat unconstrained points (K×d) → ``{value var name: (K, *shape)}``."""
        X = np.atleast_2d(X)
        out, start = {}, 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes):
            out[name] = X[:, start : start + size].reshape((X.shape[0], *shape))
            start += size
        return out

    def to_constrained(self, X: np.ndarray) -> dict[str, np.ndarray]:
        """Flat unconstrained points (K×d) → named constrained draws ``{rv name: (K, *shape)}``.

        Includes the model's deterministics, named as ``pm.sample`` names them.
        """
        model = self.model
        if self._constrained_fn is None:
            outputs = model.replace_rvs_by_values(model.free_RVs + model.deterministics)
            joined, x = join_nonshared_inputs(self._point, outputs, self.value_vars)
            X_var = pt.matrix("X", dtype=x.dtype)
            batched = vectorize_graph(joined, replace={x: X_var})
            self._constrained_fn = compile_pymc([X_var], batched, mode=self.mode)
            self._constrained_names = [v.name for v in model.free_RVs + model.deterministics]
        values = self._constrained_fn(np.atleast_2d(np.asarray(X, dtype=self._X.dtype)))
        return dict(zip(self._constrained_names, (np.asarray(v) for v in values)))

    def from_constrained(self, draws: dict) -> np.ndarray:
        """Named constrained draws ``{free variable name: (K, *shape)}`` → flat unconstrained
        points (K×d): the inverse of :meth:`to_constrained` (e.g. for ``pm.sample``'s draws).

        Each draw's own parent values enter its transform, so parent-dependent transforms are
        exact. Raises ``KeyError`` naming a missing variable; shapes that do not fit the model
        raise from the compiled function.
        """
        model = self.model
        if self._unconstrained_fn is None:
            holders = [rv.type() for rv in model.free_RVs]
            outputs = clone_replace(_unconstrained(model), replace=dict(zip(model.free_RVs, holders)))
            batched = [pt.tensor(dtype=h.type.dtype, shape=(None, *h.type.shape)) for h in holders]
            outputs = vectorize_graph(outputs, replace=dict(zip(holders, batched)))
            self._unconstrained_fn = compile_pymc(batched, outputs, mode=self.mode)
        arrays = [np.asarray(draws[name], dtype=rv.type.dtype)
                  for name, rv in zip(self.free_names, model.free_RVs)]
        outputs = self._unconstrained_fn(*arrays)
        return np.concatenate(
            [np.asarray(o, dtype=float).reshape(len(arrays[0]), -1) for o in outputs], axis=1
        )


def _unconstrained(model) -> list:
    """Each free variable mapped to its value variable's space:
    ``transform.forward(rv, *rv.owner.inputs)`` (the variable itself when untransformed), so a
    parent-dependent transform (e.g. bounds that depend on another variable) uses the parents
    that go with the variable. An ordered variable is sorted first."""
    outputs = []
    for rv in model.free_RVs:
        transform = model.rvs_to_transforms.get(rv)
        ordered = _ordered_transform(model, rv)
        value = rv
        if ordered is not None:  # exact draws of the renormalised ordered prior
            value = pt.sort(rv, axis=-1)
            value = value if ordered.ascending else value[..., ::-1]
        outputs.append(transform.forward(value, *rv.owner.inputs) if transform else rv)
    return outputs


#: Transforms that may precede ``ordered`` in a chain: increasing elementwise maps, which keep
#: sorted values sorted.
_INCREASING = (transforms.LogTransform, transforms.IntervalTransform, transforms.LogOddsTransform,
               transforms.LogExpM1)


def _point_masses(rv) -> str:
    """Where a continuous free variable's prior has point masses ('' if nowhere): a censored
    distribution at a bound that is not infinite, a mixture (or hurdle) with a DiracDelta
    component."""
    op, inputs = rv.owner.op, rv.owner.inputs
    if type(op).__name__ == "CensoredRV":
        for bound in inputs[1:3]:
            try:
                if np.isinf(get_underlying_scalar_constant_value(bound)):
                    continue
            except NotScalarConstantError:
                pass
            return "a censored distribution, at its bounds"
    if any(i.owner is not None and getattr(i.owner.op, "name", None) == "diracdelta"
           for i in inputs):
        return "a mixture with a DiracDelta component, at its value"
    return ""


def _ordered_transform(model, rv):
    """``rv``'s ``Ordered`` transform (alone or last in a chain), or None.

    PyMC's ordered transform restricts the prior to the ordered region without renormalising it.
    For a prior that is exchangeable along the last axis (every element the same univariate
    distribution, given the parents) the ordered region holds 1/n! of the mass, whatever the
    parents, and sorted prior draws are exact draws of the renormalised prior; any other ordered
    prior raises here, before anything is compiled.
    """
    chain = _flat_chain(model.rvs_to_transforms.get(rv))
    if not any(isinstance(t, transforms.Ordered) for t in chain):
        return None
    fix = ("Give every element the same prior (e.g. pm.Normal(name, 0, 5, shape=3, "
           "transform=ordered)), or write the order yourself (a first value plus positive "
           "increments).")
    op = rv.owner.op
    if getattr(op, "ndim_supp", None) != 0 or not hasattr(op, "dist_params"):
        raise ValueError(
            f"free variable {rv.name!r} ({_rv_label(rv)}) has an ordered transform over a "
            "distribution that is not elementwise: the ordered prior's normalising constant is "
            f"unknown. {fix}"
        )
    if not isinstance(chain[-1], transforms.Ordered) or not all(
        isinstance(t, _INCREASING) for t in chain[:-1]
    ):
        raise ValueError(
            f"free variable {rv.name!r} chains the ordered transform with "
            f"{[type(t).__name__ for t in chain]}: only increasing elementwise transforms "
            "(log, interval, logodds) may come before it, and it must come last."
        )
    if chain[-1].positive and len(chain) > 1:
        raise ValueError(
            f"free variable {rv.name!r} has Ordered(positive=True) after "
            f"{[type(t).__name__ for t in chain[:-1]]} (PyMC chains a transform given with "
            "transform= after the distribution's default one): its input is then not positive. "
            "Pass default_transform=None as well."
        )
    varying = [p for p in op.dist_params(rv.owner) if p.ndim and not p.type.broadcastable[-1]]
    if varying:
        raise ValueError(
            f"free variable {rv.name!r} ({_rv_label(rv)}) has an ordered transform but its prior "
            "differs between elements (a parameter varies along the last axis): the ordered "
            f"prior's normalising constant is then unknown. {fix}"
        )
    return chain[-1]


def _overflowed_to_zero(log_prior: np.ndarray) -> np.ndarray:
    """A log prior of +inf as −inf. A proper prior's density (with the Jacobian) is +inf only
    where PyMC's arithmetic overflows far out in the unconstrained space, where the true
    value is hugely negative (``pm.LKJCholeskyCov`` with a standard deviation beyond 2·10⁸:
    its log density is −2·10¹⁵ at 6·10⁷), or at single points, which no integral sees. Left
    +inf, such a point is accepted by any Metropolis move that proposes it and holds there."""
    return np.where(np.isposinf(log_prior), -np.inf, log_prior)


def _is_circular(transform) -> bool:
    return getattr(transform, "name", None) == "circular"  # PyMC's and pymc.dims' alike


def _check_circular(model, rv) -> None:
    """Refuse the circular transform chained with another: the unconstrained space then no
    longer maps onto the variable's support once per period."""
    chain = _flat_chain(model.rvs_to_transforms.get(rv))
    if len(chain) > 1 and any(_is_circular(t) for t in chain):
        raise ValueError(
            f"free variable {rv.name!r} chains the circular transform with another "
            f"({[type(t).__name__ for t in chain]}; PyMC chains a transform given with "
            "transform= after the distribution's default one): the unconstrained space then no "
            "longer covers its support once per period. Pass default_transform=None with "
            "transform=circular, or drop transform=."
        )


# Default transforms from fewer unconstrained dimensions onto a support of lower dimension than
# the value's array: the simplex, the zero-sum subspace, PyMC 6's correlation matrices.
_SUBSPACE_TRANSFORMS = ("SimplexTransform", "ZeroSumTransform", "CholeskyCorrTransform")


def _check_subspace_support(model, rv) -> None:
    """Refuse a variable on a lower-dimensional support whose transform onto it was dropped
    (``default_transform=None``): its log density is one on that support, not over the value's
    array, so integrating over the array has no meaning (a ZeroSumNormal came out 0.2 nats high
    from laplace, and the samplers failed or diverged)."""
    default = transforms._default_transform(rv.owner.op, rv)
    if type(default).__name__ not in _SUBSPACE_TRANSFORMS:
        return
    if any(type(t) is type(default) for t in _flat_chain(model.rvs_to_transforms.get(rv))):
        return
    raise ValueError(
        f"free variable {rv.name!r} ({_rv_label(rv)}) lies on a support of lower dimension "
        f"than its value (PyMC's {type(default).__name__} maps onto it), and that transform "
        "was dropped (default_transform=None): its log density is then a density on the "
        "support evaluated over the whole array, which no estimator can integrate. Keep the "
        "default transform (drop default_transform=None)."
    )


def _periodic_columns(model, value_vars, sizes) -> np.ndarray:
    """Flat columns of the value variables whose transform is circular (see
    :attr:`ModelDensity.periodic`)."""
    columns, start = [], 0
    for value, size in zip(value_vars, sizes):
        if _is_circular(model.rvs_to_transforms.get(model.values_to_rvs[value])):
            columns.extend(range(start, start + size))
        start += size
    return np.array(columns, dtype=int)


def _flat_chain(transform) -> list:
    """A transform as the list of transforms it applies in order (PyMC nests chains: a default
    transform and the user's are chained around the user's own chain)."""
    if isinstance(transform, transforms.ChainedTransform):
        return [t for inner in transform.transform_list for t in _flat_chain(inner)]
    return [transform]


def _ordered_log_normaliser(model, point) -> float:
    """log n! for every ordered vector (length n = the last axis) of the model: what turns
    PyMC's unnormalised ordered prior into a density (see :func:`_ordered_transform`)."""
    total = 0.0
    for rv in model.free_RVs:
        if _ordered_transform(model, rv) is not None:
            shape = np.shape(point[model.rvs_to_values[rv].name])
            total += gammaln(shape[-1] + 1) * np.prod(shape[:-1], dtype=int)
    return float(total)


def _lkj_excess(model) -> float:
    """How far PyMC's log densities of the model's LKJ priors (``LKJCholeskyCov``,
    ``LKJCorr``) lie above normalised ones (:func:`~pymc_evidence._compat.lkj_normaliser_error`).

    Sampling estimators only use ratios of the prior and would not notice, but Laplace, bridge
    sampling and contour Monte Carlo use the density's value, which must integrate to one.
    """
    total = 0.0
    for rv in model.free_RVs:
        if type(rv.owner.op).__name__ not in ("_LKJCholeskyCovRV", "LKJCorrRV"):
            continue
        n, eta = rv.owner.op.dist_params(rv.owner)[:2]
        try:
            n, eta = int(get_underlying_scalar_constant_value(n)), float(
                get_underlying_scalar_constant_value(eta))
        except NotScalarConstantError:  # only PyMC 6 accepts these, and its constant is right
            continue
        total += lkj_normaliser_error(eta, n)
    return total


def _car_log_normaliser(rvs, shape_of):
    """The part of the CAR log density that PyMC leaves out, summed over the ``pm.CAR``
    variables among ``rvs`` (0 if none; ``shape_of(rv)`` gives a variable's value shape): PyMC's ``CAR.logp`` "differs from the true CAR log
    density by an additive constant", −(d/2) log 2π + ½ Σ_i log D_i per vector of d areas (D
    the row sums of the adjacency W; the rest of log N(μ, (τ(D − αW))⁻¹) is there). Without it
    a CAR model's evidence was 2.41 nats high on a path of three areas, and more on a map.
    Symbolic in W, so that a ``pm.Data`` adjacency changed by ``pm.set_data`` is followed."""
    total = 0.0
    for rv in rvs:
        if type(rv.owner.op).__name__ != "CARRV":
            continue
        W = rv.owner.op.dist_params(rv.owner)[1]
        degrees = (pytensor.sparse.sp_sum(W, axis=1)
                   if isinstance(W, pytensor.sparse.variable.SparseVariable) else W.sum(axis=-1))
        per_vector = (0.5 * pt.log(degrees).sum(axis=-1)
                      - 0.5 * np.log(2 * np.pi) * degrees.shape[-1])
        total = total + pt.broadcast_to(per_vector, shape_of(rv)[:-1]).sum()
    return total


def _observed(model, rv) -> np.ndarray:
    """The data an observed variable holds: a constant, a ``pm.Data`` container or an
    expression of them (e.g. ``observed=2 * data``; random ones are refused by
    :func:`validate_model`)."""
    data = model.rvs_to_values[rv]
    if hasattr(data, "get_value"):
        return np.asarray(data.get_value())
    if hasattr(data, "data"):
        return np.asarray(data.data)
    return np.asarray(data.eval())


def _leading_dim(model, rv) -> int:
    """Number of i.i.d. cases of an observed variable: its leading dimension (1 for scalars)."""
    shape = np.shape(_observed(model, rv))
    return int(shape[0]) if shape else 1


def different_data(named: dict) -> str | None:
    """What differs when the models ``{name: model}`` observe different data, else None.

    Evidences p(D | M) are comparable only for one D. A model's data are the values of its
    observed variables as a multiset (sorted, so that the same numbers split or shaped
    otherwise count as the same data); a model whose likelihood is ``pm.Potential`` terms alone
    keeps its data inside their graphs and is left out.
    """
    groups: list[tuple[np.ndarray, list[str]]] = []
    for name, model in named.items():
        if not model.observed_RVs:
            continue
        values = np.sort(np.concatenate(
            [np.ravel(_observed(model, rv)).astype(float) for rv in model.observed_RVs]))
        for seen, names in groups:
            if seen.shape == values.shape and np.array_equal(seen, values, equal_nan=True):
                names.append(name)
                break
        else:
            groups.append((values, [name]))
    if len(groups) < 2:
        return None
    described = "; ".join(f"{names} observe {values.size} values (mean {np.nanmean(values):.4g})"
                          for values, names in groups)
    return (f"the models observe different data ({described}): evidences p(D | M) of different "
            "data are not comparable, so their ranking and weights compare nothing. Give every "
            "model the same observed values (a model of log y is compared with one of y by "
            "subtracting Σ log y, the Jacobian, from its log evidence)")


def check_prior_draws(density, X, log_prior, log_likelihood, *, zero_likelihood: bool = True):
    """Raise a ValueError naming a point when the log density is broken at the exact prior
    draws ``X`` (rows), before an estimator spends any sampling on them.

    Broken: a log prior that is not finite, a log likelihood that is NaN or +inf, or −inf at
    every draw (the data are impossible under the prior). ``zero_likelihood=False``: any −inf
    log likelihood, for samplers that cannot place prior mass outside the likelihood's support.
    """
    log_prior, log_likelihood = np.asarray(log_prior), np.asarray(log_likelihood)
    bad_prior = ~np.isfinite(log_prior)
    bad_lik = np.isnan(log_likelihood) | np.isposinf(log_likelihood)

    def example(bad) -> dict:
        row = int(np.flatnonzero(bad)[0])
        return {k: v[0] for k, v in density.to_constrained(X[row : row + 1]).items()}

    if bad_prior.any() or bad_lik.any():
        which = "log prior" if bad_prior.any() else "log likelihood"
        bad = bad_prior | bad_lik
        edge = bad & ~np.isfinite(X).all(axis=1)
        if edge.any():
            culprits = [name for name, values in zip(density.free_names,
                                                     density.split(X[edge]).values())
                        if not np.isfinite(values).all()]
            raise ValueError(
                f"{int(edge.sum())} of {len(edge)} exact prior draws of {culprits} lie on the "
                "boundary of the support in floating point: their unconstrained values are "
                "infinite, so no sampler can start from them. The "
                "prior puts mass closer to the boundary than float64 resolves (e.g. a "
                "Dirichlet or stick-breaking concentration far below 1 draws weights that "
                "underflow to 0). Give it a larger concentration, or a lower bound on it."
            )
        raise ValueError(
            f"the {which} is not finite at {int(bad.sum())} of {len(bad)} exact prior draws, "
            f"e.g. at {example(bad)}. Check the data for NaN and the model's parameterisation "
            "(e.g. a likelihood scale that can be zero)."
        )
    zero = np.isneginf(log_likelihood)
    if zero.all():
        raise ValueError(
            "the log likelihood is -inf at every prior draw: the data are impossible under the "
            "prior (check the observed values against the likelihood's support)"
        )
    if zero.any() and not zero_likelihood:
        raise ValueError(
            f"the log likelihood is -inf at {int(zero.sum())} of {len(zero)} exact prior draws, "
            f"e.g. at {example(zero)}: this sampler needs a likelihood that is positive wherever "
            "the prior is. Use thermodynamic, or a likelihood whose support covers the prior's."
        )


_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def get_density(model=None, *, backend: str = "c", require_gradient: bool = True) -> ModelDensity:
    """The compiled density of ``model``, built once and reused by every estimator.

    The cache is keyed on the model object and invalidated when variables are added to it or
    ``pm.set_data`` gives a data container another shape: what the density holds besides its
    compiled functions (the number of cases, the rows per call) follows from those shapes.
    """
    model = pm.modelcontext(model)
    data_shapes = tuple((name, np.shape(var.get_value(borrow=True)))
                        for name, var in model.named_vars.items() if hasattr(var, "get_value"))
    key = (backend, require_gradient, tuple(model.named_vars), data_shapes)
    try:
        per_model = _cache.setdefault(model, {})
    except TypeError:  # models that cannot be weakly referenced are simply not cached
        return ModelDensity(model, backend=backend, require_gradient=require_gradient)
    if key not in per_model:
        per_model.clear()
        per_model[key] = ModelDensity(model, backend=backend, require_gradient=require_gradient)
    return per_model[key]
