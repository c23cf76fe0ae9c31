"""Bridge sampling's error bars on exact-evidence models.

For each case of ``thermodynamic_vs_smc._cases`` but the 100-dimensional Gaussian and each seed,
``pm_evidence.bridge(model, random_seed=seed)`` at its defaults (4 chains × 2000 NUTS draws after
1000 tuning steps, run one after another on one core). Per case: bias, RMSE, mean SE, mean
|error| / SE (0.80 for a calibrated error bar), the share within 2 SE (0.95), the largest |z|,
how many fits warned and of what, and the mean wall time.

Usage::

    python benchmarks/bridge_calibration.py            # 10 seeds, eight cases: about 8 minutes
    python benchmarks/bridge_calibration.py --report   # the report again, from the CSV

Written: ``benchmarks/results/bridge_calibration.md`` and the fits in ``.csv`` beside it.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import platform
import re
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import pymc_evidence as pm_evidence
from evidence_calibration import _notes
from thermodynamic_vs_smc import EXPENSIVE_CASES, _cases

OUTPUT = Path(__file__).resolve().parent / "results" / "bridge_calibration.md"


def run(model, seed: int) -> dict:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = pm_evidence.bridge(model, random_seed=seed, progressbar=False,
                                    sample_kwargs={"cores": 1})
    return {"log_z": result.log_evidence, "se": result.se,
            "divergences": int(result.diagnostics["divergences"].iloc[0]),
            "warnings": " | ".join(result.warnings), "seconds": time.perf_counter() - start}


def _kinds(messages: pd.Series) -> str:
    """The kinds of warning among the fits, by their first words (numbers as N), with counts."""
    kinds = [re.sub(r"\d+(\.\d+)?", "N", m).split(":")[0][:40]
             for text in messages.fillna("") for m in text.split(" | ") if m]
    counts = pd.Series(kinds).value_counts()
    return "; ".join(f"{n}× “{k}…”" for k, n in counts.items())


def report(runs: pd.DataFrame, notes: str) -> str:
    import pymc as pm

    lines = [
        "# Bridge sampling's error bars on exact-evidence models", "",
        f"Written by `python benchmarks/bridge_calibration.py` on {datetime.date.today()}: "
        f"Python {platform.python_version()}, PyMC {pm.__version__}; `bridge(model, "
        "random_seed=seed)` at its defaults, its chains on one core. Error = estimate − exact; "
        "|z| = |error| / SE (0.80 on average and 95 % within 2 SE for a calibrated error bar).",
        "", "| case | fits | bias | RMSE | mean SE | mean abs z | within 2 SE | max abs z "
        "| warned | divergences (median) | seconds | warnings |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for case, group in runs.groupby("case", sort=False):
        error = group["log_z"] - group["exact"]
        z = np.abs(error) / group["se"]
        warned = int((group["warnings"].fillna("") != "").sum())
        lines.append(
            f"| {case} | {len(group)} | {error.mean():+.3f} | {np.sqrt(np.mean(error**2)):.3f} "
            f"| {group['se'].mean():.3f} | {z.mean():.2f} | {np.mean(z <= 2):.0%} "
            f"| {z.max():.2f} | {warned} | {group['divergences'].median():.0f} "
            f"| {group['seconds'].mean():.1f} | {_kinds(group['warnings'])} |")
    lines += ["", "## Notes", "", notes.strip() or "(written by hand after the run)", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--report", action="store_true", help="only rewrite the report")
    args = parser.parse_args()
    if args.report:
        OUTPUT.write_text(report(pd.read_csv(OUTPUT.with_suffix(".csv")), _notes(OUTPUT)))
        return 0
    logging.getLogger("pymc").setLevel(logging.ERROR)
    rows = []
    for name, (_, factory) in _cases().items():
        if name in EXPENSIVE_CASES:
            continue
        model, exact = factory()
        for seed in range(args.seeds):
            rows.append({"case": name, "seed": seed, "exact": exact, **run(model, seed)})
            r = rows[-1]
            print(f"{name} {seed}: {r['log_z'] - exact:+.4f} ± {r['se']:.4f}", flush=True)
    runs = pd.DataFrame(rows)
    runs.to_csv(OUTPUT.with_suffix(".csv"), index=False)
    OUTPUT.write_text(report(runs, _notes(OUTPUT)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
