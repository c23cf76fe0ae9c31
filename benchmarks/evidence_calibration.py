"""Nested sampling, thermodynamic chaining and ``pm.sample_smc`` on exact-evidence models:
calibration of the error bars over seeds, and efficiency at equal accuracy.

For every case and seed the same process runs the three methods one after another (the order
rotating from seed to seed), each as a user would call it:

* ``pm_evidence.nested(model, random_seed=seed, progressbar=False)``: defaults
  (``target_se=0.1``), except on the 100-d Gaussian (:data:`NESTED_OPTIONS`), where the default
  2500 live points would take hours per fit;
* ``pm_evidence.thermodynamic(model, random_seed=seed, progressbar=False)``: defaults;
* ``pm.sample_smc(model=model, random_seed=seed, progressbar=False)``: defaults on the C backend,
  its estimate and SE as in ``thermodynamic_vs_smc.py`` (log-mean-exp of the chains' evidences;
  SE = their SD / √chains, from 2 chains).

Per case and method: bias, RMSE, mean reported SE, mean |error| / SE (0.80 for a calibrated
Gaussian error bar), the fraction within 2 SE (0.95), mean wall time (compilation included),
efficiency = 1 / (MSE × time), and the time an unbiased method would need for an RMSE of 0.1 nats
(MSE × time / 0.01: error variance falls as 1/time), left blank where |bias| > 0.1.

Usage::

    python benchmarks/evidence_calibration.py                  # 10 seeds, every case
    python benchmarks/evidence_calibration.py --seeds 2 --cases beta_binomial   # a quick look
    python benchmarks/evidence_calibration.py --seeds 100 --cases normal_inverse_gamma \
        --methods thermodynamic                                # more seeds of one method
    python benchmarks/evidence_calibration.py --report   # the report again, from the CSV

Written: ``benchmarks/results/evidence_calibration.md`` and the runs in ``.csv`` beside it, both
rewritten after every seed. The runs already in the CSV are kept and a (case, seed, method) it
holds is not run again, so an interrupted invocation resumes where it stopped (the 100-d case
takes hours); delete a method's rows to rerun it, the CSV to start afresh. Nested fits with
non-default settings (an hour each) are also checkpointed, to
``benchmarks/checkpoints/evidence_calibration/`` (ignored by git): a fit interrupted midway
resumes from its finished runs, its seconds summed over the parts.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import math
import os
import platform
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import pymc_evidence as pm_evidence
from thermodynamic_vs_smc import _cases, run_smc, smc_kwargs, timed

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "benchmarks" / "results" / "evidence_calibration.md"
METHODS = ("nested", "thermodynamic", "smc")
#: Non-default nested settings: on the 100-d Gaussian (information 309 nats) 500 live points
#: (5 per parameter, the fewest ``nested`` accepts without warning of a bias) and two runs, so
#: that a fit takes about an hour on one core; its SE is then about 0.6 nats. The two runs
#: share the two cores (seeds 0 and 1 ran them one after the other, which gives the same
#: estimates in about twice the wall time).
NESTED_OPTIONS = {"correlated_gaussian_d100": {"n_live": 500, "n_runs": 2, "target_se": None,
                                               "cores": 2}}
TARGET_RMSE = 0.1
CHECKPOINTS = ROOT / "benchmarks" / "checkpoints" / "evidence_calibration"


def run(method: str, case: str, model, seed: int, smc_options: dict) -> dict:
    if method == "smc":
        return run_smc(model, seed, smc_options)
    estimator = pm_evidence.nested if method == "nested" else pm_evidence.thermodynamic
    options = {}
    if method == "nested" and case in NESTED_OPTIONS:
        CHECKPOINTS.mkdir(parents=True, exist_ok=True)
        options = {**NESTED_OPTIONS[case], "checkpoint": CHECKPOINTS / f"{case}_seed{seed}"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
        result = estimator(model, random_seed=seed, progressbar=False, **options)
    return {"log_z": result.log_evidence, "se": result.se, "n_warnings": len(result.warnings),
            "earlier_s": result.timing.get("earlier_sessions", 0.0)}


def warm_up(smc_options: dict) -> None:
    """Each method once, untimed, on a throwaway model: a process's first compilation pays
    one-off costs that would otherwise be charged to whichever method runs first."""
    import pymc as pm

    with pm.Model() as model:
        mean = pm.Normal("mean")
        pm.Normal("y", mean, 1.0, observed=[0.1, -0.3, 0.2])
    for method in METHODS:
        run(method, "warm-up", model, 0, smc_options)


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (case, method) over the finished runs."""
    rows = []
    for (case, method), group in runs[runs["ok"]].groupby(["case", "method"], sort=False):
        error = group["log_z"] - group["exact"]
        mse, seconds = float(np.mean(error**2)), float(group["time_s"].mean())
        bias = float(error.mean())
        attempted = ((runs["case"] == case) & (runs["method"] == method)).sum()
        rows.append({
            "case": case, "method": method, "runs": f"{len(group)}/{attempted}",
            "bias": bias, "rmse": math.sqrt(mse), "mean_se": group["se"].mean(),
            "mean_abs_z": float(np.mean(np.abs(error) / group["se"])),
            "within_2se": float(np.mean(np.abs(error) <= 2 * group["se"])),
            "seconds": seconds, "efficiency": 1 / (mse * seconds),
            "seconds_to_rmse": (mse * seconds / TARGET_RMSE**2 if abs(bias) <= TARGET_RMSE
                                else math.nan),
        })
    return pd.DataFrame(rows)


def report(runs: pd.DataFrame, command: str, cases: dict, finished: bool, notes: str) -> str:
    """The Markdown report of ``runs``; ``cases`` maps every case name to its description,
    ``notes`` is the hand-written section kept from the earlier report."""
    import pymc as pm
    import pytensor

    table = summarise(runs)
    lines = [
        "# Nested sampling, thermodynamic chaining and pm.sample_smc on exact-evidence models", "",
        f"Written by `{command}` on {datetime.date.today()}"
        + ("" if finished else " (**partial**: still running or interrupted)") + ". "
        f"Python {platform.python_version()}, PyMC {pm.__version__}, PyTensor "
        f"{pytensor.__version__}, {os.cpu_count()} cores, one BLAS thread; each method at its "
        "defaults (nested and chaining start worker processes when runs are long enough; "
        "`pm.sample_smc` runs its 2 chains on 2 cores), "
        + "; ".join(f"nested on `{c}` with {o}" for c, o in NESTED_OPTIONS.items()) + ".", "",
        "Cases (`pymc_evidence.testing`): " + "; ".join(
            f"`{name}` = `{cases[name][0]}`" for name in runs["case"].unique()) + ".", "",
        "Error = estimate − exact (nats). |z| = |error| / reported SE: 0.80 on average and 95 % "
        "within 2 SE for a calibrated error bar. Seconds: mean wall time of a call. The package "
        "compiles a model's density once and reuses it (the first call of a case pays for it), "
        "`pm.sample_smc` compiles at every call, which dominates its time on the small cases. "
        "Efficiency = 1 / (MSE × seconds). Seconds to RMSE 0.1 = MSE × seconds / 0.01, "
        "what the method would need for an RMSE of 0.1 nats if its error variance falls as "
        "1 / time; blank where its bias alone exceeds 0.1.", "",
        "| case | method | runs | bias | RMSE | mean SE | mean abs z | within 2 SE | seconds "
        "| efficiency | seconds to RMSE 0.1 |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in table.itertuples():
        to_rmse = "" if math.isnan(row.seconds_to_rmse) else f"{row.seconds_to_rmse:.3g}"
        lines.append(
            f"| {row.case} | {row.method} | {row.runs} | {row.bias:+.3f} | {row.rmse:.3f} "
            f"| {row.mean_se:.3f} | {row.mean_abs_z:.2f} | {row.within_2se:.0%} "
            f"| {row.seconds:.3g} | {row.efficiency:.3g} | {to_rmse} |")
    short = _fewer_seeds(runs)
    if short:
        lines += ["", "Run on fewer seeds than the case's other methods: " + "; ".join(short)
                  + "."]
    failed = runs[~runs["ok"]]
    lines += ["", "## Failures", ""]
    lines += [f"- `{r.case}` {r.method} seed {r.seed}: {r.error_type}: {r.error}"
              for r in failed.itertuples()] or ["None."]
    lines += ["", "## Notes", "", notes.strip() or "(written by hand after the run)", ""]
    return "\n".join(lines)


def _fewer_seeds(runs: pd.DataFrame) -> list[str]:
    """"method on `case` (n of N)" for each method run on fewer seeds than the most any
    method of its case was run on."""
    seeds = runs.groupby(["case", "method"], sort=False)["seed"].nunique()
    most = seeds.groupby(level="case").transform("max")
    return [f"{method} on `{case}` ({n} of {m})"
            for (case, method), n, m in zip(seeds.index, seeds, most) if n < m]


def _written_by(path: Path) -> str | None:
    """The command that wrote an earlier report, if any (a rewritten report keeps it)."""
    match = re.search(r"^Written by `([^`]*)`", path.read_text() if path.exists() else "",
                      re.MULTILINE)
    return match.group(1) if match else None


def _notes(path: Path) -> str:
    """The hand-written Notes section of an earlier report, if any."""
    text = path.read_text() if path.exists() else ""
    return text.split("\n## Notes\n", 1)[1] if "\n## Notes\n" in text else ""


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    all_cases = _cases()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--cases", nargs="+", choices=list(all_cases), default=list(all_cases))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS),
                        help="run only these methods (e.g. more seeds of a cheap one)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--report", action="store_true",
                        help="only rewrite the report from the CSV (after editing its notes)")
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    command = " ".join(["python benchmarks/evidence_calibration.py",
                        *(a for a in argv if a != "--report")])
    smc_options = smc_kwargs()
    csv = args.output.with_suffix(".csv")
    rows = pd.read_csv(csv).to_dict("records") if csv.exists() else []
    if args.report:
        runs = pd.read_csv(csv)
        finished = runs.groupby("case")["seed"].nunique().min() >= args.seeds
        command = _written_by(args.output) or command
        args.output.write_text(report(runs, command, all_cases, finished=finished,
                                      notes=_notes(args.output)))
        return 0
    done = {(row["case"], row["seed"], row["method"]) for row in rows}
    warm_up(smc_options)
    for name in args.cases:
        model, exact = all_cases[name][1]()
        for seed in range(args.seeds):
            order = [method for method in METHODS[seed % 3:] + METHODS[:seed % 3]
                     if method in args.methods and (name, seed, method) not in done]
            if not order:
                continue
            for method in order:
                result = timed(run, method, name, model, seed, smc_options)
                result["time_s"] += result.get("earlier_s", 0.0)
                rows.append({"case": name, "method": method, "seed": seed, "exact": exact,
                             **{k: result.get(k) for k in
                                ("ok", "log_z", "se", "time_s", "error_type", "error")}})
                status = (f"{result['log_z'] - exact:+.3f} ± {result['se']:.3f}" if result["ok"]
                          else f"{result['error_type']}: {result['error'][:100]}")
                print(f"{name} {method} seed {seed}: {status} ({result['time_s']:.1f} s)",
                      flush=True)
            runs = pd.DataFrame(rows)
            runs.to_csv(csv, index=False)
            args.output.write_text(report(runs, command, all_cases, finished=False,
                                          notes=_notes(args.output)))
    args.output.write_text(report(pd.DataFrame(rows), command, all_cases, finished=True,
                              notes=_notes(args.output)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
