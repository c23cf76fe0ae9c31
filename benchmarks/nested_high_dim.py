"""Nested sampling in high dimensions: error against live points and slice moves per dimension.

On ``pymc_evidence.testing.correlated_gaussian(dim)`` (AR(1) correlation 0.9, exact evidence),
nested slice sampling runs with ``n_live`` and ``num_inner_steps`` set as multiples of the
dimension d, over several seeds each, through the package's compiled density and its nested
sampling core (one run per seed, ``num_delete = n_live // 2``, termination 1e-3, as ``nested``
runs them). z = (log Ẑ − log Z) / SE with the run's own SE (simulated log-volumes); a calibrated
setting has mean z ≈ 0 and rms z ≈ 1. The live points' covariance gives the slice directions:
with few points per dimension it is a poor estimate of the constrained region's shape.

Written: ``benchmarks/results/nested_high_dim.csv`` (one row per run, appended as runs end,
and skipped when already there: the study resumes) and ``nested_high_dim.md``.

Usage::

    python benchmarks/nested_high_dim.py --dim 60 --live 2.5 10 25 --inner 5 --seeds 4
    python benchmarks/nested_high_dim.py --report     # rewrite the markdown from the CSV
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

import pymc_evidence as pm_evidence
from pymc_evidence.estimators._nested_core import nested_core
from pymc_evidence.testing import correlated_gaussian

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "benchmarks" / "results" / "nested_high_dim.csv"
MARKDOWN = CSV.with_suffix(".md")
NOTES = "## Notes"


def one_run(density, exact, dim, live_per_dim, inner_per_dim, seed) -> dict:
    n_live = int(round(live_per_dim * dim))
    rng = np.random.default_rng([dim, n_live, int(round(10 * inner_per_dim)), seed])
    begun = time.perf_counter()
    run = nested_core(rng, density.log_densities, density.prior_draws(rng, n_live),
                      num_delete=n_live // 2, num_inner_steps=int(inner_per_dim * dim),
                      termination=1e-3)
    return {"dim": dim, "live_per_dim": live_per_dim, "n_live": n_live,
            "inner_per_dim": inner_per_dim, "seed": seed, "log_z": run.log_z,
            "se": run.log_z_se, "exact": exact, "z": (run.log_z - exact) / run.log_z_se,
            "insertion_z": run.insertion_z, "information": run.information,
            "evaluations": run.n_evaluations, "seconds": time.perf_counter() - begun}


def report(table: pd.DataFrame) -> str:
    old = MARKDOWN.read_text() if MARKDOWN.exists() else ""
    notes = old[old.index(NOTES):] if NOTES in old else f"{NOTES}\n\nHand-written; kept when the table is rewritten.\n"
    lines = [
        "# Nested sampling in high dimensions: live points and slice moves per dimension",
        "",
        f"Written by `benchmarks/nested_high_dim.py` on {datetime.date.today()} "
        f"(Python {platform.python_version()}, {os.cpu_count()} cores, one BLAS thread, other "
        "jobs sharing the machine). Target: `correlated_gaussian(dim)` (AR(1) correlation 0.9, "
        "likelihood scale 0.1 on a N(0, 1) prior; exact log Z). One nested run per seed, "
        "`num_delete = n_live // 2`. z = (log Ẑ − log Z) / SE with each run's own SE; "
        "insertion z: the rank test `nested` warns on beyond ±3.",
        "",
        "| d | n_live | n_live / d | moves / d | runs | mean error | mean z | rms z | max abs z "
        "| mean SE | mean insertion z | s per run |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    keys = ["dim", "live_per_dim", "inner_per_dim"]
    for (dim, live, inner), runs in table.sort_values(keys).groupby(keys, sort=False):
        error = runs["log_z"] - runs["exact"]
        lines.append(
            f"| {dim} | {runs['n_live'].iloc[0]} | {live:g} | {inner:g} | {len(runs)} | "
            f"{error.mean():+.2f} | {runs['z'].mean():+.2f} | {np.sqrt(np.mean(runs['z'] ** 2)):.2f} "
            f"| {runs['z'].abs().max():.2f} | {runs['se'].mean():.2f} | "
            f"{runs['insertion_z'].mean():+.1f} | {runs['seconds'].mean():.0f} |")
    lines += ["", "Each run: `nested_high_dim.csv`.", "", notes.rstrip(), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dim", type=int, nargs="+", default=[60])
    parser.add_argument("--live", type=float, nargs="+", default=[25.0],
                        help="live points per dimension")
    parser.add_argument("--inner", type=float, nargs="+", default=[5.0],
                        help="slice moves per replacement, per dimension")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--report", action="store_true", help="only rewrite the markdown")
    parser.add_argument("--csv", type=Path, default=CSV,
                        help="where the runs go (another file for a second process at once)")
    args = parser.parse_args()
    table = pd.read_csv(args.csv) if args.csv.exists() else pd.DataFrame()
    if not args.report:
        for dim in args.dim:
            model, exact = correlated_gaussian(dim=dim)
            density = pm_evidence.get_density(model)
            for live in args.live:
                for inner in args.inner:
                    for seed in range(args.seeds):
                        done = (not table.empty and (
                            (table["dim"] == dim) & np.isclose(table["live_per_dim"], live)
                            & np.isclose(table["inner_per_dim"], inner) & (table["seed"] == seed)
                        ).any())
                        if done:
                            continue
                        row = one_run(density, exact, dim, live, inner, seed)
                        print(f"d={dim} n_live={row['n_live']} moves={inner:g} d seed={seed}: "
                              f"error {row['log_z'] - exact:+.2f}, z {row['z']:+.2f}, "
                              f"insertion z {row['insertion_z']:+.1f}, {row['seconds']:.0f} s",
                              flush=True)
                        table = pd.concat([table, pd.DataFrame([row])], ignore_index=True)
                        table.to_csv(args.csv, index=False)
    if args.csv == CSV:
        MARKDOWN.write_text(report(table))
    print(MARKDOWN.read_text())


if __name__ == "__main__":
    warnings.simplefilter("ignore", UserWarning)  # PyTensor's BLAS notice
    with threadpool_limits(1):
        main()
