"""Contour Monte Carlo on lists of exact-evidence models: calibration of its error bars.

``cmc`` estimates the models' evidence ratios from one joint run (replicas' spread: SEs by
``difference_se``) and lifts them to log evidences with an importance-sampling anchor (each
model's ``se``). Both must cover the error. For every case and seed,
``pm_evidence.cmc(models, random_seed=seed, progressbar=False)`` at its defaults; per case:

* each model's log evidence against the exact one: mean z, RMS z (1 for a calibrated error
  bar), mean |z| (0.80), share within 2 SE (0.95);
* each model's log ratio to the case's first model, in units of ``difference_se``.

Cases (``pymc_evidence.testing``): Barber's annotators (two Dirichlet–categorical models),
regressions of 1, 2 and 3 exchangeable units (``unit_regression`` on Liang's data, independence
proposals), the eight schools written centred and non-centred (one evidence, two
parameterisations) and wind directions with a free and a fixed von Mises concentration.

Usage::

    python benchmarks/cmc_calibration.py               # 10 seeds, every case
    python benchmarks/cmc_calibration.py --seeds 2 --cases annotators

Written: ``benchmarks/results/cmc_calibration.md`` and the fits in ``.csv`` beside it, rewritten
after every seed; fits already in the CSV are not run again.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pymc as pm

import pymc_evidence as pm_evidence
from pymc_evidence import testing

OUTPUT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "cmc_calibration.md"


def _split(pairs: dict) -> tuple[dict, dict]:
    """{name: (model, exact)} as ({name: model}, {name: exact})."""
    return ({k: m for k, (m, _) in pairs.items()}, {k: z for k, (_, z) in pairs.items()})


def _cases() -> dict:
    """Each case: a function returning ({name: model}, {name: exact log evidence})."""

    def units():
        x, y = testing.liang_data()
        return _split({f"h={h}": testing.unit_regression(h, x, y, name=f"h{h}")
                       for h in (1, 2, 3)})

    def schools():
        return _split({"centred": testing.hierarchical_normal(centered=True, name="centred"),
                       "non-centred": testing.hierarchical_normal(name="noncentred")})

    def wind():
        return _split({"free kappa": testing.von_mises(name="free"),
                       "kappa 1.5": testing.von_mises(kappa=1.5, name="fixed")})

    return {"annotators": testing.annotators, "unit regressions": units,
            "eight schools": schools, "wind directions": wind}


def run_case(models: dict, exact: dict, seed: int) -> list[dict]:
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pm_evidence.EvidenceWarning)
        results = pm_evidence.cmc(models, random_seed=seed, progressbar=False)
    seconds = time.perf_counter() - start
    names = list(models)
    first = results[names[0]]
    rows = []
    for name in names:
        res = results[name]
        ratio_error = (res.log_evidence - first.log_evidence) - (exact[name] - exact[names[0]])
        rows.append({
            "seed": seed, "model": name, "exact": exact[name],
            "log_evidence": res.log_evidence, "se": res.se,
            "error": res.log_evidence - exact[name],
            "ratio_error": ratio_error if name != names[0] else np.nan,
            "ratio_se": first.difference_se(res) if name != names[0] else np.nan,
            "anchor_weight": res.anchor_weight, "seconds": seconds,
            "warnings": sum(issubclass(w.category, pm_evidence.EvidenceWarning) for w in caught),
        })
    return rows


def summarise(fits: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (case, model), g in fits.groupby(["case", "model"], sort=False):
        z = g["error"] / g["se"]
        row = {"case": case, "model": model, "fits": len(g), "bias": g["error"].mean(),
               "RMSE": np.sqrt((g["error"] ** 2).mean()), "mean SE": g["se"].mean(),
               "mean z": z.mean(), "RMS z": np.sqrt((z**2).mean()),
               "mean abs z": z.abs().mean(), "within 2 SE": (z.abs() <= 2).mean(),
               "anchor weight": g["anchor_weight"].mean()}
        ratio = (g["ratio_error"] / g["ratio_se"]).dropna()
        row["ratio RMS z"] = np.sqrt((ratio**2).mean()) if len(ratio) else np.nan
        row["ratio within 2 SE"] = (ratio.abs() <= 2).mean() if len(ratio) else np.nan
        row["seconds"] = g["seconds"].mean()
        rows.append(row)
    return pd.DataFrame(rows)


def write_report(fits: pd.DataFrame, command: str) -> None:
    table = summarise(fits)
    fmt = {"bias": "{:+.4f}", "RMSE": "{:.4f}", "mean SE": "{:.4f}", "mean z": "{:+.2f}",
           "RMS z": "{:.2f}", "mean abs z": "{:.2f}", "within 2 SE": "{:.0%}",
           "anchor weight": "{:.2f}", "ratio RMS z": "{:.2f}", "ratio within 2 SE": "{:.0%}",
           "seconds": "{:.0f}"}
    aligns = ["---" if c in ("case", "model") else "--:" for c in table.columns]
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "|".join(aligns) + "|"]
    for _, r in table.iterrows():
        cells = [("" if pd.isna(r[c]) else fmt[c].format(r[c])) if c in fmt else str(r[c])
                 for c in table.columns]
        lines.append("| " + " | ".join(cells) + " |")
    header = f"""# Contour Monte Carlo: calibration of its error bars on exact-evidence models

Written by `{command}` on {datetime.date.today()}. Python {platform.python_version()}, PyMC \
{pm.__version__}; `cmc(models, random_seed=seed)` at its defaults, one process.

Per model: error = log evidence − exact; z = error / `se` (the SE of the log evidence, anchor
included): RMS z is 1 and mean |z| 0.80 for a calibrated error bar, 95 % within 2 SE. Anchor
weight: the model's mean share in the importance-sampling anchor that fixes the level. Ratio:
the log evidence ratio to the case's first model against the exact one, in units of
`difference_se` (from the replicas). Seconds: mean wall time of the joint run (all the case's
models; the first seed's includes compiling).

"""
    OUTPUT.write_text(header + "\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--cases", nargs="*", default=None)
    args = parser.parse_args()
    cases = _cases()
    chosen = args.cases or list(cases)
    csv = OUTPUT.with_suffix(".csv")
    fits = pd.read_csv(csv) if csv.exists() else pd.DataFrame(columns=["case", "seed"])
    command = "python benchmarks/cmc_calibration.py" + (
        f" --seeds {args.seeds}" if args.seeds != 10 else "") + (
        " --cases " + " ".join(f"'{c}'" for c in args.cases) if args.cases else "")
    for name in chosen:
        models, exact = cases[name]()
        for seed in range(1, args.seeds + 1):
            if ((fits["case"] == name) & (fits["seed"] == seed)).any():
                continue
            rows = [{"case": name, **row} for row in run_case(models, exact, seed)]
            fits = pd.concat([fits, pd.DataFrame(rows)], ignore_index=True)
            fits.to_csv(csv, index=False)
            write_report(fits, command)
            print(name, seed, [f"{r['error'] / r['se']:+.2f}" for r in rows], flush=True)


if __name__ == "__main__":
    main()
