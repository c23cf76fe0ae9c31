"""Defaults of the nested slice sampling core: error in reported SEs and cost against
``num_inner_steps`` ∈ {d, 2d, 5d} and ``num_delete`` ∈ {1, n_live/10, n_live/2}.

Targets with exact evidence, all under Gaussian priors (as in ``tests/test_nested_core.py``):

* ``gauss5``   — d = 5, likelihood N(1; θ, 0.5² I), prior N(0, 3² I), n_live = 100;
* ``gauss20``  — d = 20, likelihood N(1; θ, Σ) with Σ = 0.5² (0.1 I + 0.9 11ᵀ) (correlation
  0.9), prior N(0, 3² I), n_live = 100;
* ``bimodal``  — d = 3, likelihood 0.3 N(θ; −4e₁, Σ₂) + 0.7 N(θ; 4e₁, Σ₃), two needles at right
  angles (σ = 0.3, stretched 5× along e₂ resp. e₃), prior N(0, 5² I), n_live = 400; also the
  posterior mass put in the light mode (exact 0.3).

Each setting runs over the same seeds; z = (log Ẑ − log Z) / SE with the reported SE (simulated
volumes). A calibrated estimator has mean z ≈ 0 and rms z ≈ 1 (with 6 seeds the rms of a
calibrated one lies in 0.5–1.5 about 90 % of the time). Times are wall-clock seconds on one
core (OpenBLAS on one thread), the machine shared.

Usage::

    python benchmarks/nested_core_defaults.py          # writes results/nested_core_defaults.md
    python benchmarks/nested_core_defaults.py --quick  # 2 seeds, gauss5 only, prints only
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import time
from pathlib import Path

import numpy as np
from scipy.special import logsumexp
from scipy.stats import multivariate_normal
from threadpoolctl import threadpool_limits

from pymc_evidence.estimators._nested_core import equal_weight_draws, nested_core

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "nested_core_defaults.md"


def mixture_target(d, tau, weights, means, covs):
    """(log_density, exact log Z) for prior N(0, τ² I) and a Gaussian-mixture likelihood."""
    components = [multivariate_normal(m, c) for m, c in zip(means, covs)]
    log_w = np.log(weights)[:, None]

    def log_density(x):
        log_prior = -0.5 * np.sum(x**2, axis=1) / tau**2 - d * np.log(tau * np.sqrt(2 * np.pi))
        terms = np.array([c.logpdf(x).reshape(len(x)) for c in components])
        return log_prior, logsumexp(terms + log_w, axis=0)

    exact = float(logsumexp([np.log(w) + multivariate_normal(np.zeros(d), tau**2 * np.eye(d) + c)
                             .logpdf(m) for w, m, c in zip(weights, means, covs)]))
    return log_density, exact


def gaussian(d, rho):
    cov = 0.25 * ((1 - rho) * np.eye(d) + rho * np.ones((d, d)))
    return mixture_target(d, 3.0, [1.0], [np.ones(d)], [cov])


def needles():
    covs = []
    for axis in (1, 2):
        cov = 0.09 * np.eye(3)
        cov[axis, axis] *= 25
        covs.append(cov)
    shift = np.array([4.0, 0.0, 0.0])
    return mixture_target(3, 5.0, [0.3, 0.7], [-shift, shift], covs)


CASES = {
    # name: (target, d, n_live, prior sd)
    "gauss5": (lambda: gaussian(5, 0.0), 5, 100, 3.0),
    "gauss20": (lambda: gaussian(20, 0.9), 20, 100, 3.0),
    "bimodal": (needles, 3, 400, 5.0),
}


def one_run(case, num_delete, num_inner_steps, seed):
    make, d, n_live, tau = CASES[case]
    log_density, exact = make()
    rng = np.random.default_rng(seed)
    live = rng.normal(0.0, tau, size=(n_live, d))
    start = time.perf_counter()
    run = nested_core(rng, log_density, live, num_delete=num_delete,
                      num_inner_steps=num_inner_steps, termination=1e-3)
    seconds = time.perf_counter() - start
    light = np.nan
    if case == "bimodal":
        light = float(np.mean(equal_weight_draws(rng, run, 4000)[:, 0] < 0))
    return {"case": case, "d": d, "n_live": n_live, "num_delete": num_delete,
            "num_inner_steps": num_inner_steps, "seed": seed, "log_z": run.log_z,
            "se": run.log_z_se, "se_classic": run.log_z_se_classic, "exact": exact,
            "z": (run.log_z - exact) / run.log_z_se, "seconds": seconds,
            "evaluations": run.n_evaluations, "steps": len(run.log_x), "ess": run.ess,
            "acceptance": float(np.mean(run.acceptance)),
            "jump": float(np.mean(run.mean_jump)), "light_mass": light}


def summarise(rows):
    groups = {}
    for row in rows:
        key = (row["case"], row["num_delete"], row["num_inner_steps"])
        groups.setdefault(key, []).append(row)
    table = []
    for (case, k, m), group in groups.items():
        z = np.array([r["z"] for r in group])
        light = np.array([r["light_mass"] for r in group])
        table.append({
            "case": case, "d": group[0]["d"], "n_live": group[0]["n_live"],
            "num_delete": k, "inner": m, "inner/d": m / group[0]["d"], "seeds": len(group),
            "mean z": z.mean(), "rms z": np.sqrt(np.mean(z**2)), "max abs z": np.abs(z).max(),
            "mean SE": np.mean([r["se"] for r in group]),
            "√(H/n)": np.mean([r["se_classic"] for r in group]),
            "seconds": np.mean([r["seconds"] for r in group]),
            "evals (k)": np.mean([r["evaluations"] for r in group]) / 1e3,
            "jump": np.mean([r["jump"] for r in group]),
            "light mass": (f"{light.mean():.3f} ± {light.std(ddof=1):.3f}"
                           if case == "bimodal" else ""),
        })
    return table


def markdown(table):
    columns = list(table[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---:" for _ in columns) + "|"]
    for row in table:
        cells = [f"{v:.2f}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--csv", type=Path, default=None,
                        help="append every run here as it ends, and skip the runs already in "
                             "it (resumes an interrupted benchmark)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    seeds = 2 if args.quick else args.seeds
    cases = ["gauss5"] if args.quick else args.cases

    load_start = os.getloadavg()
    rows = []
    done = set()
    if args.csv is not None and args.csv.exists():
        with open(args.csv) as f:
            for row in csv.DictReader(f):
                row = {k: (v if k == "case" else float(v)) for k, v in row.items()}
                for k in ("d", "n_live", "num_delete", "num_inner_steps", "seed", "evaluations",
                          "steps"):
                    row[k] = int(row[k])
                if row["case"] in cases:
                    rows.append(row)
                    done.add((row["case"], row["num_delete"], row["num_inner_steps"],
                              row["seed"]))
    for case in cases:
        _, d, n_live, _ = CASES[case]
        for num_delete in (1, n_live // 10, n_live // 2):
            for num_inner_steps in (d, 2 * d, 5 * d):
                for seed in range(seeds):
                    if (case, num_delete, num_inner_steps, seed) in done:
                        continue
                    row = one_run(case, num_delete, num_inner_steps, seed)
                    rows.append(row)
                    print(f"{case} k={num_delete} m={num_inner_steps} seed={seed}: "
                          f"z={row['z']:+.2f} se={row['se']:.3f} {row['seconds']:.1f}s",
                          flush=True)
                    if args.csv is not None:
                        new = not args.csv.exists()
                        with open(args.csv, "a", newline="") as f:
                            writer = csv.DictWriter(f, fieldnames=list(row))
                            if new:
                                writer.writeheader()
                            writer.writerow(row)
    table = markdown(summarise(rows))
    print(table)
    if args.quick:
        return
    environment = (f"date: {datetime.date.today()}; python: {platform.python_version()}; "
                   f"numpy: {np.__version__}; cpus: {os.cpu_count()}; load average (start, "
                   f"end): ({load_start[0]:.2f}, {os.getloadavg()[0]:.2f})")
    args.output.write_text(
        "# Nested slice sampling core: error and cost against num_inner_steps and num_delete\n\n"
        "Written by `benchmarks/nested_core_defaults.py` (targets and columns described "
        "there). z = (log Ẑ − log Z) / SE per run; `jump` = mean distance a new point moved "
        "from its start, in its cluster's whitened units; `evals (k)` = thousands of density "
        "evaluations per run; `seconds` per run.\n\n"
        + table + f"\n\nEnvironment: {environment}\n")


if __name__ == "__main__":
    with threadpool_limits(1):  # one BLAS thread, as inside the samplers
        main()
