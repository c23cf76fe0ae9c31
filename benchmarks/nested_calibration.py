"""nested() at its defaults on the exact-evidence models of pymc_evidence.testing: error in
units of the reported SE over seeds, and wall time.

    python benchmarks/nested_calibration.py            # writes benchmarks/results/nested_calibration.md
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

import pymc_evidence as pm_evidence
from pymc_evidence import testing

OUTPUT = Path(__file__).resolve().parent / "results" / "nested_calibration.md"
CASES = {
    "beta_binomial (d=1)": testing.beta_binomial,
    "conjugate_regression (d=5)": lambda: testing.conjugate_regression(dim=5),
    "gaussian_mixture_potential (d=2, bimodal)": lambda: testing.gaussian_mixture_potential(dim=2),
    "correlated_gaussian (d=10, ρ=0.9)": lambda: testing.correlated_gaussian(dim=10),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    lines = ["# nested() calibration at its defaults", "",
             f"Written by `benchmarks/nested_calibration.py`; {args.seeds} seeds per model, "
             "`target_se=0.1`. z = (estimate − exact) / reported SE.", "",
             "| model | mean z | mean abs z | max abs z | within 2 SE | mean SE | mean runs "
             "| seconds per fit |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, build in CASES.items():
        model, exact = build()
        z, se, runs, seconds = [], [], [], []
        for seed in range(args.seeds):
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = pm_evidence.nested(model, random_seed=seed, progressbar=False)
            seconds.append(time.perf_counter() - start)
            z.append((res.log_evidence - exact) / res.se)
            se.append(res.se)
            runs.append(res.n_runs)
        z = np.array(z)
        lines.append(f"| {name} | {z.mean():+.2f} | {np.abs(z).mean():.2f} | {np.abs(z).max():.2f} "
                     f"| {np.mean(np.abs(z) < 2):.0%} | {np.mean(se):.3f} | {np.mean(runs):.1f} "
                     f"| {np.median(seconds):.1f} |")
        print(lines[-1], flush=True)
    OUTPUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
