"""The model zoo (tests/_zoo.py) through every estimator that applies to it.

Against an exact evidence (closed form or quadrature) the sampling estimators must be within
3 of their own SEs; without one they must agree with each other within 3 combined SEs.
Laplace must be within a nat of the reference or say that it is not (its importance check, or
NaN with a warning). BIC is an asymptotic approximation: it must give a finite number. A
discrete free variable is refused by every estimator with a message that names it.
"""

from __future__ import annotations

import functools
import itertools
import warnings

import numpy as np
import pytest

import pymc_evidence as pm_evidence
from _zoo import ZOO, complete_pooling, discrete_latent, eight_schools  # tests/_zoo.py

SAMPLERS = ("thermodynamic", "nested", "bridge")
OPTIONS = {
    "thermodynamic": {},
    "nested": {"target_se": 0.15},
    "laplace": {"restarts": 4},
    "bic": {},
    "bridge": {"draws": 1000, "tune": 500},
}
#: Lighter settings where PyTensor evaluates the density point by point (MvNormal with a
#: Cholesky factor is a Python loop over the batch on PyTensor 2): the test is about running
#: and agreeing within the reported SEs, not about precision.
LIGHTER = {
    "lkj_mvnormal": {
        "thermodynamic": {"n_particles": 64, "target_se": None},
        "nested": {"target_se": None, "n_live": 50},
        "laplace": {"restarts": 1, "check_draws": 200},
    },
}
#: Fixed bounds besides the SE-relative ones, so that a huge SE cannot hide a bug.
CAP = {"thermodynamic": 0.5, "nested": 0.6, "bridge": 1.0}


@functools.lru_cache(maxsize=None)
def model(name):
    return ZOO[name]()


@functools.lru_cache(maxsize=None)
def estimate(name, method):
    options = {**OPTIONS[method], **LIGHTER.get(name, {}).get(method, {})}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
        return getattr(pm_evidence, method)(model(name)[0], random_seed=1, progressbar=False,
                                            **options)


def reference(name):
    """The exact log evidence, else chaining's estimate and its SE."""
    exact = model(name)[1]
    if exact is not None:
        return exact, 0.0
    result = estimate(name, "thermodynamic")
    return result.log_evidence, result.se


EXACT = [name for name in ZOO if ZOO[name]()[1] is not None]
INEXACT = [name for name in ZOO if name not in EXACT]
#: Models whose graphs take a minute to compile and minutes to run on a 2-core machine, with
#: the methods concerned (None: every method; run with --runslow). The GP's Hessian takes a
#: minute to compile and bridge's NUTS draws a minute to run.
SLOW = {"lkj_mvnormal": None, "gp_marginal": {"laplace", "bridge"}}


def slow_marks(name, method=None) -> list:
    """[pytest.mark.slow] for ``name`` run by ``method`` (None: by every method) if SLOW says so."""
    slow = name in SLOW and (SLOW[name] is None or method is None or method in SLOW[name])
    return [pytest.mark.slow] if slow else []


def cases(names, method=None):
    return [pytest.param(name, marks=slow_marks(name, method)) for name in names]


#: Bridge's warnings that its NUTS draws may not represent the posterior: its SE is then
#: conditional on draws it says are doubtful (centred eight schools: NUTS diverges in the
#: funnel and every chain misses its neck alike, 0.28 nats low with SE 0.06).
DOUBTFUL_DRAWS = ("divergent NUTS transitions", "the chains disagree")


@pytest.mark.parametrize(("name", "method"), [
    pytest.param(name, method, marks=slow_marks(name, method))
    for name in EXACT for method in SAMPLERS])
def test_sampling_estimators_match_the_exact_evidence(name, method):
    result = estimate(name, method)
    error = result.log_evidence - model(name)[1]
    assert abs(error) <= CAP[method]
    if method == "bridge" and any(w in text for w in DOUBTFUL_DRAWS for text in result.warnings):
        return
    assert abs(error) <= 3 * result.se, f"{method}: error {error:+.3f}, SE {result.se:.3f}"


@pytest.mark.parametrize("name", cases(INEXACT))
def test_sampling_estimators_agree_with_each_other(name):
    results = {method: estimate(name, method) for method in SAMPLERS}
    for (a, ra), (b, rb) in itertools.combinations(results.items(), 2):
        gap = ra.log_evidence - rb.log_evidence
        combined = np.hypot(ra.se, rb.se)
        assert abs(gap) <= 3 * combined, f"{a} − {b} = {gap:+.3f}, combined SE {combined:.3f}"


@pytest.mark.parametrize("name", cases(ZOO, "laplace"))
def test_laplace_is_within_a_nat_or_says_it_is_not(name):
    result = estimate(name, "laplace")
    target, se = reference(name)
    close = abs(result.log_evidence - target) <= 1.0 + 3 * se
    assert close or result.warnings, f"Laplace {result.log_evidence:.3f} vs {target:.3f}"


@pytest.mark.parametrize("name", cases(ZOO, "bic"))
def test_bic_gives_a_number(name):
    assert np.isfinite(estimate(name, "bic").log_evidence)


def test_the_ordered_mixture_has_the_unordered_evidence():
    unordered = estimate("normal_mixture", "thermodynamic")
    ordered = estimate("normal_mixture_ordered", "thermodynamic")
    gap = ordered.log_evidence - unordered.log_evidence
    assert abs(gap) <= 3 * np.hypot(ordered.se, unordered.se)


@pytest.mark.parametrize("centred", [False, True], ids=["non-centred", "centred"])
def test_contour_monte_carlo_ranks_partial_against_complete_pooling(centred):
    """Eight schools against complete pooling (τ = 0): both evidences exact. In the centred
    parameterisation neither the fitted t nor HMC reaches the funnel's neck; the prior's share
    of the independence proposal does (without it: 0.12 nats low at an SE of 0.03)."""
    models = {"partial": eight_schools(centred=centred), "complete": complete_pooling()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
        results = pm_evidence.cmc({name: m for name, (m, _) in models.items()},
                                  random_seed=1, progressbar=False)
    for name, (_, exact) in models.items():
        error = results[name].log_evidence - exact
        assert abs(error) <= 3 * results[name].se and abs(error) < 0.5, (name, error)
    partial, complete = results["partial"], results["complete"]
    ratio_error = partial.log_evidence - complete.log_evidence - (models["partial"][1] - models["complete"][1])
    assert abs(ratio_error) <= 3 * partial.difference_se(complete), ratio_error


@pytest.mark.parametrize("method", ["thermodynamic", "nested", "laplace", "bic", "bridge", "cmc"])
def test_a_discrete_latent_is_refused_naming_it(method):
    latent, _ = discrete_latent()
    call = getattr(pm_evidence, method)
    with pytest.raises(ValueError, match="free variable 'k' is discrete"):
        call([latent, latent] if method == "cmc" else latent, progressbar=False)
