"""Barber's slides: fair or biased coin, and do two annotators agree? Estimates against exact evidences.

Three model comparisons from Barber's model-selection slides, each with an exact evidence:

* **Coin, 5 heads and 2 tails**: p(D | fair) = 0.00786, p(D | biased) = 0.0072, Bayes factor
  fair/biased 1.09 ("little to choose between the two models").
* **Coin, 50 heads and 20 tails**: p(D | fair) = 1.5e-20, p(D | biased) = 1.4e-19, Bayes factor
  0.109 ("around 10 times the belief in the biased model").
* **Annotators**: two people label 20 images happy / sad / normal; H_indep (each person has
  their own Dirichlet(1, 1, 1) label probabilities) against H_same (one shared); Bayes factor
  indep/same 12.87 (models from :func:`pymc_evidence.testing.annotators`).

Each model's log evidence is estimated by ``pm_evidence.compare`` with every method for which it
is meaningful (thermodynamic chaining and bridge sampling for all; Laplace and BIC for the
annotators), over several seeds, and set against the exact value.

The coin's discrete θ grid, written as a continuous equivalent
--------------------------------------------------------------
In the slides θ takes the values 0.1, 0.2, ..., 0.9 with prior weights p(θ | M) drawn as bar
charts, and p(D | M) = Σ_θ θ^N_H (1 − θ)^N_T p(θ | M). The estimators need continuous free
variables (HMC moves, optima, Hessians), and marginalising θ out would leave nothing to
estimate. So θ is written through its prior's inverse CDF: u ~ Uniform(0, 1) and θ(u) is the
grid value whose bin [F_{k−1}, F_k) contains u, where F_k is the cumulative prior weight.
u falls in bin k with probability p(θ_k | M), so

    p(D | M) = ∫_0^1 p(D | θ(u)) du = Σ_k p(θ_k | M) θ_k^N_H (1 − θ_k)^N_T

exactly: the same evidence as the slides' discrete model, not an approximation of it. The
likelihood is piecewise constant in u, which sampling-based estimators handle (HMC with a
Metropolis correction stays exact), but a mode of a plateau has no curvature, so Laplace and
BIC are not meaningful for the coin and are not run. The data enter as a sequence of tosses
(Bernoulli), as in the slides' θ^N_H (1 − θ)^N_T, not as a binomial count.

The slides give the two priors only as bar charts. The weights below are ours, chosen as the
simplest shapes (a peak at 0.5 for "fair", two humps at 0.2 and 0.8 for "biased") that
reproduce all four printed likelihoods and both Bayes factors to the printed digits.

Run ``python examples/coin_and_annotators.py`` (full: 3 seeds) or with ``--quick`` (one seed,
thermodynamic only, smaller settings). Writes ``coin_and_annotators.csv`` (one row per
comparison, quantity and method: mean over seeds), ``coin_and_annotators_runs.csv`` (one row
per seed) and ``coin_and_annotators.png`` to ``examples/results/`` (or ``--out``).
``--methods`` reruns some estimators and keeps the other estimators' rows of the runs already
in ``--out`` (bridge sampling takes most of the full run's 48 minutes).
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt

import pymc_evidence as pm_evidence
from pymc_evidence.testing import annotators

GRID = np.arange(1, 10) / 10
#: Prior weights on GRID (see the module docstring for how they were chosen).
COIN_PRIORS = {
    "fair": np.array([0.0, 0.0, 0.01, 0.09, 0.80, 0.09, 0.01, 0.0, 0.0]),
    "biased": np.array([0.03, 0.20, 0.16, 0.08, 0.06, 0.08, 0.16, 0.20, 0.03]),
}
#: The slides' printed Bayes factors, first model over second.
SLIDES_BAYES_FACTOR = {"coin 5H 2T": 1.09, "coin 50H 20T": 0.109, "annotators": 12.87}
RESULTS = Path(__file__).resolve().parent / "results"
NAME = "coin_and_annotators"


def coin_model(weights: np.ndarray, heads: int, tails: int, name: str):
    """Barber's grid-prior coin as a continuous model, and its exact log evidence.

    θ = GRID[k] for u in [F_{k−1}, F_k), u ~ Uniform(0, 1), F the cumulative weights: the
    inverse-CDF form of the discrete prior, with the same evidence
    log Σ_k w_k θ_k^heads (1 − θ_k)^tails.
    """
    upper = np.cumsum(weights)
    upper[-1] = 1.0  # the weights sum to 1 up to rounding; the last bin must reach u = 1
    lower = np.concatenate([[0.0], upper[:-1]])
    tosses = np.concatenate([np.ones(heads, dtype=int), np.zeros(tails, dtype=int)])
    with pm.Model(name=name) as model:
        u = pm.Uniform("u", 0.0, 1.0)
        in_bin = pt.and_(pt.ge(u, lower), pt.lt(u, upper))
        theta = pm.Deterministic("theta", pt.sum(pt.switch(in_bin, GRID, 0.0)))
        pm.Bernoulli("tosses", p=theta, observed=tosses)
    log_z = np.log(weights @ (GRID**heads * (1.0 - GRID) ** tails))
    return model, float(log_z)


def cases() -> dict:
    """``{case: (models, exact log Z by model, methods)}``; the first model is the numerator."""
    out = {}
    for heads, tails in [(5, 2), (50, 20)]:
        built = {name: coin_model(w, heads, tails, name) for name, w in COIN_PRIORS.items()}
        out[f"coin {heads}H {tails}T"] = (
            {name: m for name, (m, _) in built.items()},
            {name: z for name, (_, z) in built.items()},
            ("thermodynamic", "bridge"),
        )
    models, exact = annotators()
    out["annotators"] = (models, exact, ("thermodynamic", "bridge", "laplace", "bic"))
    return out


def _options(method: str, quick: bool) -> dict:
    if method == "thermodynamic":
        return {"n_particles": 128, "target_se": 0.2} if quick else {"target_se": 0.05}
    if method == "bridge":
        return {"draws": 500, "tune": 500, "chains": 2} if quick else {}
    return {}


def run(case_names, methods, seeds, quick: bool) -> pd.DataFrame:
    """One row per (case, quantity, method, seed); quantity is a model's log Z or the log BF."""
    rows = []
    for case, (models, exact, case_methods) in cases().items():
        if case not in case_names:
            continue
        first, second = list(models)
        exact_log_bf = exact[first] - exact[second]
        for method in (m for m in case_methods if m in methods):
            for seed in seeds:
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
                    table = pm_evidence.compare(
                        models, method=method, random_seed=seed, progressbar=False,
                        **_options(method, quick),
                    )
                seconds = time.perf_counter() - start
                estimate = {name: (table.loc[name, "log_evidence"], table.loc[name, "se"])
                            for name in models}
                quantities = [(f"log Z {name}", *estimate[name], exact[name]) for name in models]
                quantities.append((
                    f"log BF {first}/{second}",
                    estimate[first][0] - estimate[second][0],
                    float(np.hypot(estimate[first][1], estimate[second][1])),
                    exact_log_bf,
                ))
                for quantity, value, se, truth in quantities:
                    rows.append({
                        "case": case, "quantity": quantity, "method": method, "seed": seed,
                        "estimate": value, "se": se, "exact": truth, "error": value - truth,
                        # Laplace and BIC report se = 0: their error is not a sampling error.
                        "error_over_se": (value - truth) / se if se > 0 else np.nan,
                        "warning": bool(table["warning"].any()), "seconds": seconds,
                    })
    return pd.DataFrame(rows)


def _kept_runs(path: Path, methods, case_names, seeds) -> pd.DataFrame:
    """The runs of ``methods`` at ``path`` for these cases and seeds, to keep beside a rerun of
    the others; an error before any work if any is missing."""
    if not methods:
        return pd.DataFrame()
    runs = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["case", "method", "seed"])
    kept = runs[runs["method"].isin(methods) & runs["case"].isin(case_names)
                & runs["seed"].isin(seeds)]
    wanted = [(case, method) for case, (_, _, case_methods) in cases().items()
              if case in case_names for method in case_methods if method in methods]
    missing = [(case, method) for case, method in wanted
               if set(kept.loc[(kept["case"] == case) & (kept["method"] == method), "seed"])
               != set(seeds)]
    if missing:
        raise ValueError(f"{path} lacks runs of {missing} for seeds {list(seeds)} to keep: "
                         f"rerun those methods too (--methods)")
    return kept


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (case, quantity, method): mean estimate and SE over seeds, their spread, the error."""
    grouped = runs.groupby(["case", "quantity", "method"], sort=False)
    summary = grouped.agg(
        seeds=("seed", "size"),
        estimate=("estimate", "mean"),
        se=("se", "mean"),
        sd_between_seeds=("estimate", "std"),
        exact=("exact", "first"),
        mean_error=("error", "mean"),
        max_abs_error_over_se=("error_over_se", lambda z: np.abs(z).max()),
        seconds=("seconds", "mean"),
    ).reset_index()
    is_bf = summary["quantity"].str.startswith("log BF")
    summary["bayes_factor"] = np.where(is_bf, np.exp(summary["estimate"]), np.nan)
    summary["exact_bayes_factor"] = np.where(is_bf, np.exp(summary["exact"]), np.nan)
    summary["slides_bayes_factor"] = [
        SLIDES_BAYES_FACTOR[case] if bf else np.nan
        for case, bf in zip(summary["case"], is_bf)
    ]
    return summary


def plot(runs: pd.DataFrame, path: Path) -> None:
    """Per comparison: each seed's log Bayes factor with ±2 SE, the exact value and the slides'."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bf = runs[runs["quantity"].str.startswith("log BF")]
    case_names = list(dict.fromkeys(bf["case"]))
    fig, axes = plt.subplots(1, len(case_names), figsize=(4.2 * len(case_names), 3.6),
                             squeeze=False, layout="constrained")
    for ax, case in zip(axes[0], case_names):
        rows = bf[bf["case"] == case]
        methods = list(dict.fromkeys(rows["method"]))
        for i, method in enumerate(methods):
            sub = rows[rows["method"] == method]
            x = i + np.linspace(-0.2, 0.2, len(sub)) if len(sub) > 1 else np.array([i])
            ax.errorbar(x, sub["estimate"], yerr=2 * sub["se"], fmt="o", ms=4, capsize=2)
        ax.axhline(rows["exact"].iloc[0], color="k", ls="--", lw=1, label="exact")
        ax.axhline(np.log(SLIDES_BAYES_FACTOR[case]), color="tab:red", ls=":", lw=1.5,
                   label=f"slides: BF = {SLIDES_BAYES_FACTOR[case]}")
        ax.set_xticks(range(len(methods)), methods, rotation=20)
        ax.set_title(case)
        ax.set_ylabel(f"{rows['quantity'].iloc[0]}  (±2 SE)")
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: one seed, thermodynamic only, small settings")
    parser.add_argument("--seeds", type=int, default=None,
                        help="number of seeds (default: 3, or 1 with --quick)")
    parser.add_argument("--methods", nargs="+", default=None,
                        choices=["thermodynamic", "bridge", "laplace", "bic"],
                        help="estimators to run (default: all meaningful ones; thermodynamic "
                             "with --quick)")
    parser.add_argument("--cases", nargs="+", default=list(SLIDES_BAYES_FACTOR),
                        choices=list(SLIDES_BAYES_FACTOR), help="comparisons to run")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output directory")
    args = parser.parse_args(argv)
    seeds = range(args.seeds if args.seeds is not None else (1 if args.quick else 3))
    everything = ["thermodynamic", "bridge", "laplace", "bic"]
    methods = args.methods or (["thermodynamic"] if args.quick else everything)
    kept = (_kept_runs(args.out / f"{NAME}_runs.csv", [m for m in everything if m not in methods],
                       args.cases, list(seeds)) if args.methods and not args.quick else None)

    runs = run(args.cases, methods, list(seeds), args.quick)
    if kept is not None and len(kept):
        rank = {"case": {c: i for i, c in enumerate(SLIDES_BAYES_FACTOR)},
                "method": {m: i for i, m in enumerate(everything)}}
        runs = pd.concat([runs, kept], ignore_index=True).sort_values(
            ["case", "method"], key=lambda column: column.map(rank[column.name]),
            kind="stable", ignore_index=True)
    summary = summarise(runs)
    args.out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(args.out / f"{NAME}_runs.csv", index=False, float_format="%.6g")
    summary.to_csv(args.out / f"{NAME}.csv", index=False, float_format="%.6g")
    plot(runs, args.out / f"{NAME}.png")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(summary.drop(columns=["seconds"]).to_string(index=False, float_format="%.4g"))
    return summary


if __name__ == "__main__":
    main()
