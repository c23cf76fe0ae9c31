"""``compare``: estimate the evidence of several models and rank them, the table users call."""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import cloudpickle
import numpy as np
import pandas as pd
from scipy.special import logsumexp

from pymc_evidence._compat import model_types
from pymc_evidence.bic import bic
from pymc_evidence.bridge import bridge
from pymc_evidence.density import validate_model
from pymc_evidence.laplace import laplace
from pymc_evidence.results import load_result
from pymc_evidence.thermodynamic import thermodynamic

__all__ = ["compare", "METHODS"]

#: Estimators ``compare`` can run, by name.
METHODS = {"thermodynamic": thermodynamic, "laplace": laplace, "bic": bic, "bridge": bridge}

COLUMNS = [
    "rank", "log_evidence", "se", "d_log_evidence", "dse", "log_bayes_factor", "weight",
    "method", "warning",
]


def _named_models(models) -> dict:
    if isinstance(models, dict):
        named = dict(models)
    elif isinstance(models, (list, tuple)):
        named = {}
        for i, model in enumerate(models):
            name = getattr(model, "name", "") or f"model_{i}"
            if name in named:
                raise ValueError(
                    f"two models are named {name!r}: give them distinct names "
                    "(pm.Model(name=...)) or pass a dict {name: model}"
                )
            named[name] = model
    else:
        raise TypeError(
            f"models must be a list of pymc.Model or a dict {{name: model}}, got {type(models).__name__}"
        )
    if not named:
        raise ValueError("compare needs at least one model; got an empty collection")
    for name, model in named.items():
        if not isinstance(model, model_types()):
            raise TypeError(f"model {name!r} is a {type(model).__name__}, not a pymc.Model")
    return named


def _prior_log_probs(prior_model_probs, names) -> np.ndarray:
    if prior_model_probs is None:
        return np.full(len(names), -np.log(len(names)))
    if isinstance(prior_model_probs, dict):
        missing = set(names) - set(prior_model_probs)
        extra = set(prior_model_probs) - set(names)
        if missing or extra:
            raise ValueError(
                f"prior_model_probs must name exactly the models {names}; "
                f"missing {sorted(missing)}, unknown {sorted(extra)}"
            )
        probs = np.array([prior_model_probs[name] for name in names], dtype=float)
    else:
        probs = np.asarray(prior_model_probs, dtype=float)
        if probs.shape != (len(names),):
            raise ValueError(
                f"prior_model_probs needs one probability per model ({len(names)}), got {probs.shape}"
            )
    if np.any(probs <= 0) or not np.isclose(probs.sum(), 1.0):
        raise ValueError(f"prior_model_probs must be positive and sum to 1, got {probs.tolist()}")
    return np.log(probs)


class _CompareCheckpoint:
    """Finished results of a ``compare`` run, one netCDF file per model, in a directory."""

    def __init__(self, directory, method, options, random_seed):
        self.directory = None if directory is None else Path(directory)
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        key = {"method": method, "options": repr(sorted(options.items())), "seed": repr(random_seed)}
        manifest = self.directory / "compare.json"
        if manifest.exists() and json.loads(manifest.read_text()) != key:
            raise ValueError(
                f"checkpoint directory {self.directory} holds a compare run with other "
                "arguments; delete it or choose another directory"
            )
        manifest.write_text(json.dumps(key))

    def file(self, name: str, suffix: str) -> Path:
        return self.directory / f"{name.replace(os.sep, '_')}.{suffix}"

    def has(self, name: str) -> bool:
        return self.directory is not None and self.file(name, "nc").exists()

    def load(self, name: str):
        return load_result(self.file(name, "nc"))

    def save(self, name: str, result) -> None:
        if self.directory is None:
            return
        temporary = self.file(name, "nc.tmp")
        result.to_netcdf(temporary)
        os.replace(temporary, self.file(name, "nc"))


def _run_pickled(payload: bytes):
    """Worker side of an executor run: models travel as cloudpickle bytes."""
    estimator, model, options = cloudpickle.loads(payload)
    return estimator(model, **options)


def compare(
    models,
    method: str = "thermodynamic",
    *,
    prior_model_probs=None,
    executor=None,
    checkpoint=None,
    random_seed=None,
    progressbar: bool = True,
    **estimator_options,
) -> pd.DataFrame:
    r"""Estimate each model's evidence and rank the models, best first.

    .. math::

        p(M_i \mid D) = \frac{p(D \mid M_i)\, p(M_i)}{\sum_j p(D \mid M_j)\, p(M_j)}

    (Barber & Bishop 1997, eq. 2).

    Parameters
    ----------
    models : list of pymc.Model or dict of {str: pymc.Model}
        A list takes names from the models' ``name`` (``model_0``, ``model_1``, ... if unnamed).
    method : {"thermodynamic", "laplace", "bic", "bridge", "cmc"}, default "thermodynamic"
        ``"cmc"`` runs :func:`~pymc_evidence.cmc` once over all the models (its relative
        evidences come from one joint run; ``executor`` is not used).
    prior_model_probs : dict or sequence of float, optional
        Prior model probabilities p(M_i) (positive, summing to 1); uniform by default.
    executor : concurrent.futures.Executor, optional
        Runs the models concurrently (e.g. ``ProcessPoolExecutor`` or a
        ``dask.distributed.Client(...).get_executor()``). Models are sent with cloudpickle. Each
        model's random stream is fixed before submission, so results do not depend on the
        scheduling: the same seed gives the same table with or without an executor.
    checkpoint : str or path, optional
        Directory where each finished model's result is saved (netCDF). Calling again with the
        same arguments loads finished models instead of redoing them, and resumes an
        interrupted estimator from its own checkpoint (thermodynamic: after the last finished
        stage), so the table equals that of an uninterrupted run.
    random_seed : int, sequence, numpy.random.SeedSequence or None
        Split into one independent stream per model.
    progressbar : bool, default True
    **estimator_options
        Passed to the estimator (e.g. ``target_se=0.05`` for thermodynamic, ``restarts=20`` for
        laplace).

    Returns
    -------
    pandas.DataFrame
        Indexed by model name, best first, with columns

        ========================  ====================================================================
        ``rank``                  0 for the best model
        ``log_evidence``          estimate of log p(D | M) (nats)
        ``se``                    its standard error
        ``d_log_evidence``        log evidence of the best model minus this one's (≥ 0)
        ``dse``                   standard error of that difference (independent estimates)
        ``log_bayes_factor``      log Bayes factor of this model against the next-ranked one
                                  (NaN for the last)
        ``weight``                posterior model probability p(M | D) under ``prior_model_probs``
        ``method``                estimator name
        ``warning``               True if the estimator reported a soft problem
        ========================  ====================================================================

        ``table.attrs["results"]`` maps each name to its :class:`~pymc_evidence.EvidenceResult`.

    Examples
    --------
    >>> import pymc_evidence as pm_evidence
    >>> from pymc_evidence.testing import annotators
    >>> models, exact = annotators()
    >>> table = pm_evidence.compare(models, random_seed=0, progressbar=False)
    >>> table.index[0]
    'indep'
    """
    if method == "cmc":  # one joint run over all the models (Liang 2005), not one per model
        from pymc_evidence.cmc import cmc

        named = _named_models(models)
        log_prior = _prior_log_probs(prior_model_probs, list(named))
        results = cmc(named, random_seed=random_seed, progressbar=progressbar, **estimator_options)
        return _table(results, log_prior, method)
    if method not in METHODS:
        raise ValueError(
            f"method must be one of {sorted([*METHODS, 'cmc'])}, got {method!r}"
        )
    estimator = METHODS[method]
    named = _named_models(models)
    names = list(named)
    log_prior = _prior_log_probs(prior_model_probs, names)
    accepted = inspect.signature(estimator).parameters
    unknown = sorted(set(estimator_options) - set(accepted))
    if unknown:
        raise TypeError(
            f"{method} does not take option(s) {unknown}; it takes "
            f"{sorted(p for p in accepted if p not in ('model', 'random_seed', 'progressbar'))}"
        )
    for name, model in named.items():
        try:
            validate_model(model)
        except (ValueError, TypeError) as err:
            raise type(err)(f"model {name!r}: {err}") from err

    seeds = np.random.SeedSequence(random_seed).spawn(len(names))
    jobs = {
        name: dict(estimator_options, random_seed=seed, progressbar=progressbar)
        for name, seed in zip(names, seeds)
    }
    store = _CompareCheckpoint(checkpoint, method, estimator_options, random_seed)
    results = {name: store.load(name) for name in names if store.has(name)}
    todo = [name for name in names if name not in results]
    if store.directory is not None and "checkpoint" in accepted:
        for name in todo:
            jobs[name]["checkpoint"] = store.file(name, "ckpt")
    if executor is None:
        for name in todo:
            results[name] = estimator(named[name], **jobs[name])
            store.save(name, results[name])
    else:
        futures = {
            name: executor.submit(
                _run_pickled, cloudpickle.dumps((estimator, named[name], jobs[name]))
            )
            for name in todo
        }
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except Exception as err:
                raise RuntimeError(f"estimating the evidence of model {name!r} failed: {err}") from err
            store.save(name, results[name])
    results = {name: results[name] for name in names}
    for name, result in results.items():
        result.model_name = name
    return _table(results, log_prior, method)


def _table(results: dict, log_prior: np.ndarray, method: str) -> pd.DataFrame:
    names = list(results)
    log_z = np.array([results[n].log_evidence for n in names])
    se = np.array([results[n].se for n in names])
    log_post = log_z + log_prior
    weight = np.exp(log_post - logsumexp(log_post))
    order = np.argsort(-log_z, kind="stable")
    best = order[0]
    ranked_log_z = log_z[order]
    table = pd.DataFrame(
        {
            "rank": np.arange(len(names)),
            "log_evidence": ranked_log_z,
            "se": se[order],
            "d_log_evidence": log_z[best] - ranked_log_z,
            "dse": np.where(order == best, 0.0, np.hypot(se[order], se[best])),
            "log_bayes_factor": np.append(ranked_log_z[:-1] - ranked_log_z[1:], np.nan),
            "weight": weight[order],
            "method": method,
            "warning": [results[names[i]].warning for i in order],
        },
        index=pd.Index([names[i] for i in order], name="model"),
    )
    table.attrs["results"] = {names[i]: results[names[i]] for i in order}
    return table[COLUMNS]
