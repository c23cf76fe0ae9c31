"""Thermodynamic chaining vs ``pm.sample_smc`` on models with exact evidence, side by side.

For every case of :mod:`pymc_evidence.testing` with a known log evidence, and for every seed, the
same process runs

* ``pm_evidence.thermodynamic(model, random_seed=seed, progressbar=False)`` (all defaults), and
* ``pm.sample_smc(model=model, random_seed=seed, progressbar=False)`` (all defaults; on PyTensor 3,
  whose default backend is Numba, with ``compile_kwargs={"mode": "CVM"}`` so that both methods
  run on PyTensor's C backend),

alternating which goes first from seed to seed, and records the estimate, its standard error and
the wall time of the call (compilation included: it is part of the user's wait). Both methods run
once, untimed, on a throwaway model first (:func:`warm_up`), so that the process's one-off PyTensor
start is charged to neither.

``pm.sample_smc``'s evidence: ``sample_stats["log_marginal_likelihood"]`` holds, per chain, one
entry per tempering stage (NaN until the last stage). Its layout differs between PyMC versions and
with the number of chains and of stages (ragged object arrays when chains ran different numbers of
stages); :func:`smc_log_evidence_per_chain` extracts the last stage's value of each chain. The
estimate is the **log-mean-exp over chains** (each chain's Ẑ is an unbiased estimate of Z, so the
pooled estimate is their mean on the Z scale; the plain mean of the chains' log Ẑ is kept in the
CSV as ``smc_mean_log``). ``pm.sample_smc`` reports no error bar; its SE here is the standard
deviation of the chains' log Ẑ divided by √chains — with the default 2 chains, a one-degree-of-
freedom estimate, so its calibration numbers are themselves very noisy.

Metrics per case and method over the seeds: bias (mean error), spread (standard deviation of the
estimates), RMSE, SE calibration (mean |error|/SE and the fraction of runs within 2 SE of the
truth), mean SE, mean wall time, and the wall-time ratio smc / thermodynamic. A run that raises is
recorded (exception type and message) and left out of the metrics.

The robot-arm MLP (``pymc_evidence.testing.robot_arm_mlp(h)``, Barber & Bishop's §5 model) is run
once per h with both methods; there is no exact evidence, the point is whether each method
completes, what it estimates and how long it takes. There ``thermodynamic`` gets what the docs
recommend for an MLP, ``mlp_layers`` (the symmetry alignment), and the population of
``benchmarks/robot_arm_curve.py``'s run (:data:`MLP_THERMODYNAMIC`); ``pm.sample_smc`` its
defaults.

Usage::

    python benchmarks/thermodynamic_vs_smc.py --quick   # 2 seeds, 3 cheapest cases, no MLP
    python benchmarks/thermodynamic_vs_smc.py            # 5 seeds, all cases, MLP h=2 and 8
    # what produced benchmarks/results/ (2-core machine, ~45 min):
    python benchmarks/thermodynamic_vs_smc.py --seeds 5 --expensive-seeds 3 --mlp 2 8 --budget-minutes 45

Results: a markdown report (``--output``, default
``benchmarks/results/thermodynamic_vs_smc.md``) and the raw runs as CSV beside it (same name,
``.csv``). Both are rewritten after every case, so an interrupted run leaves a usable report.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import hashlib
import inspect
import logging
import math
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "thermodynamic_vs_smc.md"

METHODS = ("thermodynamic", "smc")


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


def _many_schools(groups=40, seed=7):
    """Data for a centred hierarchy of ``groups`` groups whose spread (1.5) is small against
    their known noise (5 to 15): the posterior of τ reaches down into the funnel's neck."""
    rng = np.random.default_rng(seed)
    sigma = rng.uniform(5.0, 15.0, groups)
    theta = 3.0 + 1.5 * rng.normal(size=groups)
    return theta + sigma * rng.normal(size=groups), sigma


def _cases():
    """Name → (description, factory returning (model, exact log Z)), cheapest first."""
    from pymc_evidence import testing

    return {
        "beta_binomial": ("beta_binomial()", lambda: testing.beta_binomial()),
        "conjugate_d5": ("conjugate_regression(dim=5)", lambda: testing.conjugate_regression(dim=5)),
        "dirichlet_categorical": (
            "dirichlet_categorical(ANNOTATOR_1, 3)",
            lambda: testing.dirichlet_categorical(testing.ANNOTATOR_1, 3),
        ),
        "normal_inverse_gamma": (
            "normal_inverse_gamma_regression()",
            lambda: testing.normal_inverse_gamma_regression(),
        ),
        "gaussian_mixture": ("gaussian_mixture_potential()", lambda: testing.gaussian_mixture_potential()),
        "gamma_precision": (
            "gamma_precision_regression()",
            lambda: testing.gamma_precision_regression(),
        ),
        "hierarchical_centred_j40": (
            "hierarchical_normal(*_many_schools(), centered=True)",
            lambda: testing.hierarchical_normal(*_many_schools(), centered=True),
        ),
        "conjugate_d20": (
            "conjugate_regression(dim=20, n_obs=50)",
            lambda: testing.conjugate_regression(dim=20, n_obs=50),
        ),
        "correlated_gaussian_d100": (
            "correlated_gaussian(dim=100)",
            lambda: testing.correlated_gaussian(dim=100),
        ),
    }


QUICK_CASES = ("beta_binomial", "conjugate_d5", "dirichlet_categorical")
EXPENSIVE_CASES = ("correlated_gaussian_d100",)


# --------------------------------------------------------------------------------------------
# pm.sample_smc
# --------------------------------------------------------------------------------------------


def smc_kwargs() -> dict:
    """Keyword arguments that keep ``pm.sample_smc`` at its defaults but on the C backend.

    PyTensor 2 (PyMC 5) compiles with the C linker by default: nothing to pass. PyTensor 3
    (PyMC 6) defaults to Numba: pass ``compile_kwargs={"mode": "CVM"}`` if the installed
    ``sample_smc`` accepts it.
    """
    import pymc as pm
    import pytensor

    major = int(pytensor.__version__.split(".")[0])
    if major >= 3 and "compile_kwargs" in inspect.signature(pm.sample_smc).parameters:
        return {"compile_kwargs": {"mode": "CVM"}}
    return {}


def _is_sequence(x) -> bool:
    return isinstance(x, (list, tuple, np.ndarray))


def _flatten(x):
    if _is_sequence(x):
        for item in x:
            yield from _flatten(item)
    else:
        yield float(x)


def _last_non_nan(values) -> float:
    values = np.asarray(list(values), dtype=float)
    values = values[~np.isnan(values)]
    return float(values[-1]) if values.size else math.nan


def smc_log_evidence_per_chain(idata) -> np.ndarray:
    """Each chain's log evidence (its last stage's ``log_marginal_likelihood``) from ``pm.sample_smc``.

    Works on ``arviz.InferenceData`` (PyMC 5) and ``xarray.DataTree`` (PyMC 6). Layouts seen:

    * regular, several chains: object or float array ``(chain, stage)``;
    * ragged (chains ran different numbers of stages): an object array whose elements are one
      list per chain — on PyMC 5 labelled ``(chain=1, draw=chains)``, i.e. the chain axis is not
      the first one;
    * one chain: float ``(1, stage)`` on PyMC 5, ``(stage,)`` labelled ``chain`` on PyMC 6.

    So the ``chain`` label is not trusted: the number of chains comes from the posterior group.
    """
    values = np.asarray(idata["sample_stats"]["log_marginal_likelihood"].values, dtype=object)
    n_chains = int(idata["posterior"].sizes["chain"])
    leaves = list(values.ravel())
    if any(_is_sequence(leaf) for leaf in leaves):
        # Ragged: one sequence of per-stage values per chain (possibly nested).
        rows = [list(_flatten(leaf)) for leaf in leaves if _is_sequence(leaf)]
    else:
        numeric = values.astype(float)
        if n_chains == 1:
            rows = [list(numeric.ravel())]
        elif numeric.ndim >= 1 and numeric.shape[0] == n_chains:
            rows = [list(numeric[c].ravel()) for c in range(n_chains)]
        else:
            rows = []
    if len(rows) != n_chains:
        raise ValueError(
            f"found {len(rows)} per-chain sequences in log_marginal_likelihood of shape "
            f"{values.shape}, expected {n_chains} chains"
        )
    return np.array([_last_non_nan(row) for row in rows])


def log_mean_exp(x) -> float:
    x = np.asarray(x, dtype=float)
    m = np.max(x)
    if not np.isfinite(m):
        return float(m)
    return float(m + np.log(np.mean(np.exp(x - m))))


def smc_estimate(per_chain) -> dict:
    """Pooled estimate (log-mean-exp over chains), mean of logs, and SE = std/√chains."""
    per_chain = np.asarray(per_chain, dtype=float)
    n = per_chain.size
    se = float(np.std(per_chain, ddof=1) / np.sqrt(n)) if n > 1 else math.nan
    return {
        "log_z": log_mean_exp(per_chain),
        "se": se,
        "smc_mean_log": float(np.mean(per_chain)),
        "smc_chains": ";".join(f"{v:.6f}" for v in per_chain),
        "n_chains": n,
    }


# --------------------------------------------------------------------------------------------
# Running one method on one model
# --------------------------------------------------------------------------------------------


class RunTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    """Raise :class:`RunTimeout` after ``seconds`` (SIGALRM; checked between Python bytecodes)."""
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def handler(signum, frame):
        raise RunTimeout(f"time limit of {seconds:.0f} s reached")

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


#: Thermodynamic settings on the robot-arm MLP: the symmetry alignment the docs recommend for
#: every MLP, and the population of ``benchmarks/robot_arm_curve.py``'s run (defaults otherwise).
MLP_THERMODYNAMIC = {"n_particles": 64, "n_groups": 4, "max_groups": 4, "target_cess": 0.95}


def run_thermodynamic(model, seed, **options) -> dict:
    import pymc_evidence as pm_evidence

    with warnings.catch_warnings(record=True):  # kept in result.warnings; not printed
        warnings.simplefilter("always", pm_evidence.EvidenceWarning)
        result = pm_evidence.thermodynamic(model, random_seed=seed, progressbar=False, **options)
    return {
        "log_z": float(result.log_evidence),
        "se": float(result.se),
        "ti": result.ti_log_evidence,
        "ti_se": result.ti_se,
        "n_stages": result.n_stages,
        "n_groups": result.n_groups,
        "compile_s": float(result.timing.get("compile", math.nan)),
        "n_warnings": len(result.warnings),
        "warnings": " | ".join(str(w) for w in result.warnings)[:300],
    }


def run_smc(model, seed, kwargs) -> dict:
    import pymc as pm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample_smc(model=model, random_seed=seed, progressbar=False, **kwargs)
    per_chain = smc_log_evidence_per_chain(idata)
    out = smc_estimate(per_chain)
    stats = idata["sample_stats"]
    n_stages = ""
    with contextlib.suppress(Exception):
        lml = np.asarray(stats["log_marginal_likelihood"].values, dtype=object)
        leaves = list(lml.ravel())
        if any(_is_sequence(leaf) for leaf in leaves):
            n_stages = ";".join(str(len(list(_flatten(l)))) for l in leaves if _is_sequence(l))
        else:
            n_stages = str(len(leaves) // out["n_chains"])
    out["n_stages"] = n_stages
    return out


def warm_up(kwargs) -> None:
    """Run both methods once, untimed, on a throwaway model. A process's first PyTensor
    compilation pays one-off costs (imports, loading the compile cache) that would otherwise be
    charged to whichever method happens to run first."""
    import pymc as pm

    with pm.Model() as model:
        mean = pm.Normal("mean")
        pm.Normal("y", mean, 1.0, observed=[0.1, -0.3, 0.2])
    run_thermodynamic(model, 0, target_se=None)
    run_smc(model, 0, kwargs)


def timed(fn, *args, timeout=None, **kwargs) -> dict:
    """Run ``fn``; return its dict plus ``time_s``, ``ok`` and the exception if it raised."""
    start = time.perf_counter()
    try:
        with time_limit(timeout):
            out = fn(*args, **kwargs)
        out.update(ok=True, error_type="", error="")
    except Exception as exc:  # noqa: BLE001 — every failure is a result here
        out = {
            "ok": False,
            "error_type": type(exc).__name__,
            # PyTensor appends the failing node's details; keep the message itself.
            "error": " ".join(str(exc).split("Apply node that caused the error")[0].split())[:500],
            "traceback_tail": " / ".join(
                line.strip() for line in traceback.format_exc().strip().splitlines()[-6:]
            )[:800],
        }
    out["time_s"] = time.perf_counter() - start
    return out


# --------------------------------------------------------------------------------------------
# Metrics and report
# --------------------------------------------------------------------------------------------

CSV_FIELDS = [
    "kind", "case", "method", "seed", "ok", "log_z", "se", "exact", "error_nats", "abs_err_over_se",
    "time_s", "compile_s", "ti", "ti_se", "n_stages", "n_groups", "n_chains", "smc_mean_log",
    "smc_chains", "n_warnings", "warnings", "error_type", "error", "traceback_tail",
]


def summarise(rows, cases) -> dict:
    """{case: {method: metrics}} over the successful exact-case runs."""
    out = {}
    for case in cases:
        out[case] = {}
        for method in METHODS:
            runs = [r for r in rows if r["kind"] == "exact" and r["case"] == case and r["method"] == method]
            ok = [r for r in runs if r["ok"]]
            m = {"n_runs": len(runs), "n_ok": len(ok), "n_failed": len(runs) - len(ok)}
            if ok:
                err = np.array([r["log_z"] - r["exact"] for r in ok])
                est = np.array([r["log_z"] for r in ok])
                se = np.array([r["se"] for r in ok], dtype=float)
                ratio = np.abs(err) / se
                finite = np.isfinite(ratio)
                m.update(
                    bias=float(err.mean()),
                    spread=float(est.std(ddof=1)) if len(ok) > 1 else math.nan,
                    rmse=float(np.sqrt(np.mean(err**2))),
                    mean_se=float(np.nanmean(se)) if np.isfinite(se).any() else math.nan,
                    calib=float(ratio[finite].mean()) if finite.any() else math.nan,
                    within2=float(np.mean(np.abs(err) <= 2 * se)) if finite.any() else math.nan,
                    time=float(np.mean([r["time_s"] for r in ok])),
                )
            first = [r["time_s"] for r in ok if r["seed"] == 0]
            later = [r["time_s"] for r in ok if r["seed"] != 0]
            m["time_first"] = first[0] if first else math.nan
            m["time_later"] = float(np.mean(later)) if later else math.nan
            compile_s = [r.get("compile_s") for r in ok if r.get("compile_s") not in (None, "")]
            m["compile_first"] = float(compile_s[0]) if compile_s else math.nan
            out[case][method] = m
    return out


def _f(x, fmt="{:.3f}"):
    if x is None or x == "" or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return fmt.format(x)


def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def versions() -> dict:
    import arviz
    import pymc as pm
    import pytensor

    return {
        "python": platform.python_version(),
        "pymc": pm.__version__,
        "pytensor": pytensor.__version__,
        "arviz": arviz.__version__,
        "numpy": np.__version__,
    }


def git_info() -> dict:
    def git(*args):
        try:
            return subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    files = ["pymc_evidence/estimators/thermodynamic.py", "pymc_evidence/estimators/_tempering.py",
             "pymc_evidence/estimators/_stepping_stone.py", "pymc_evidence/kernels.py"]
    diff = git("diff", "HEAD", "--", *files)
    return {
        "estimator_diff_sha1": hashlib.sha1(diff.encode()).hexdigest()[:10] if diff else "",
        "estimator_diff_lines": len(diff.splitlines()),
        "head": git("rev-parse", "--short", "HEAD"),
        "estimator_commit": git("log", "-1", "--format=%h %s", "--", *files),
        "estimator_dirty": bool(git("status", "--porcelain", "--", *files)),
        "package_dirty": git("status", "--porcelain", "--", "pymc_evidence").replace("\n", "; "),
    }


def write_csv(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_FIELDS})


def write_report(path: Path, rows, ctx, finished: bool) -> None:
    from pymc_evidence import __version__ as package_version

    cases = [c for c in ctx["cases"] if any(r["case"] == c for r in rows if r["kind"] == "exact")]
    summary = summarise(rows, cases)
    descr = ctx["case_descriptions"]
    v, m, g = ctx["versions"], ctx["machine"], ctx["git"]
    end_load = os.getloadavg() if hasattr(os, "getloadavg") else None
    elapsed = time.time() - ctx["t0"]
    lines = [
        "# Thermodynamic chaining vs `pm.sample_smc` on exact-evidence models",
        "",
        f"Generated by `python benchmarks/thermodynamic_vs_smc.py {' '.join(ctx['argv'])}` on "
        f"{ctx['date']}{'' if finished else ' — **partial: run still in progress or interrupted**'}.",
        "",
        f"- **Machine**: {m['cpu']}, {m['cpus']} CPUs, {m['platform']}; shared with other jobs — "
        f"load average (1/5/15 min) {_load(m['loadavg'])} at the start, {_load(end_load)} at the end. "
        "Wall times are noisy: read them as ratios and orders of magnitude.",
        f"- **Versions**: Python {v['python']}, PyMC {v['pymc']}, PyTensor {v['pytensor']}, "
        f"ArviZ {v['arviz']}, NumPy {v['numpy']}.",
        f"- **Estimator code**: pymc_evidence {package_version}"
        + (" with local modifications" if g["estimator_dirty"] or g["package_dirty"] else "") + ".",
        "- **thermodynamic**: `pm_evidence.thermodynamic(model, random_seed=seed, progressbar=False)` "
        "(all defaults, C backend).",
        "- **smc**: `pm.sample_smc(model=model, random_seed=seed, progressbar=False"
        + "".join(f", {k}={val!r}" for k, val in ctx["smc_kwargs"].items())
        + ")` — otherwise defaults (IMH kernel, 2000 draws, chains = max(2, cores) where PyMC counts "
        f"`cpu_count() // 2` cores, here {ctx['smc_chains']} chain(s), run "
        f"{'in parallel' if ctx['smc_parallel'] else 'sequentially in this process'}). "
        "Estimate = log-mean-exp of the chains' last-stage `log_marginal_likelihood`; "
        "SE = std of the chains' values / √chains (smc reports no error bar; with 2 chains this SE "
        "has one degree of freedom, so smc's calibration figures are themselves very noisy).",
        f"- **Seeds**: {ctx['seeds_desc']}; both methods get the same seed, in the same process, "
        "alternating which runs first. Wall time = the whole call, compilation included "
        "(PyTensor's compile cache is warm after the first run of a case).",
        f"- **Total run time**: {elapsed / 60:.1f} min.",
        "",
        "Cases (`pymc_evidence.testing`): "
        + "; ".join(f"`{c}` = `{descr[c]}`" for c in cases) + ".",
        "",
    ]

    def metric_table(title, key, fmt="{:.3f}", note=""):
        out = [f"## {title}", ""]
        if note:
            out += [note, ""]
        out += ["| case | thermodynamic | smc |", "|---|---:|---:|"]
        for c in cases:
            cells = [_f(summary[c][meth].get(key, math.nan), fmt) for meth in METHODS]
            out.append(f"| {c} | " + " | ".join(cells) + " |")
        return out + [""]

    # Summary table first.
    lines += [
        "## Summary",
        "",
        "Errors in nats (estimate − exact). *n* = successful runs / runs. *calib* = mean |error|/SE; "
        "*≤2SE* = fraction of runs within 2 SE of the truth. *time ratio* = mean smc time / mean "
        "thermodynamic time (> 1: thermodynamic is faster).",
        "",
        "| case | method | n | bias | spread | RMSE | mean SE | calib | ≤2SE | mean time (s) | time ratio smc/thermo |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cases:
        t_th = summary[c]["thermodynamic"].get("time", math.nan)
        t_smc = summary[c]["smc"].get("time", math.nan)
        ratio = t_smc / t_th if t_th and math.isfinite(t_th) and math.isfinite(t_smc) else math.nan
        for meth in METHODS:
            s = summary[c][meth]
            lines.append(
                f"| {c} | {meth} | {s['n_ok']}/{s['n_runs']} | {_f(s.get('bias', math.nan), '{:+.3f}')} | "
                f"{_f(s.get('spread', math.nan))} | {_f(s.get('rmse', math.nan))} | "
                f"{_f(s.get('mean_se', math.nan))} | {_f(s.get('calib', math.nan), '{:.2f}')} | "
                f"{_f(s.get('within2', math.nan), '{:.2f}')} | {_f(s.get('time', math.nan), '{:.1f}')} | "
                f"{_f(ratio, '{:.2f}') if meth == 'smc' else ''} |"
            )
    lines.append("")

    lines += metric_table("Bias (mean error, nats)", "bias", "{:+.3f}")
    lines += metric_table("Spread (std of the estimates over seeds, nats)", "spread")
    lines += metric_table("RMSE (nats)", "rmse")
    lines += metric_table("Mean reported SE (nats)", "mean_se")
    lines += metric_table("SE calibration: mean |error| / SE", "calib", "{:.2f}",
                          "For a well-calibrated Gaussian error bar ≈ 0.80.")
    lines += metric_table("SE calibration: fraction of runs within 2 SE", "within2", "{:.2f}",
                          "For a well-calibrated Gaussian error bar ≈ 0.95.")
    lines += metric_table("Mean wall time (s)", "time", "{:.1f}")
    lines += [
        "## Wall-time ratio smc / thermodynamic",
        "",
        "*all* = ratio of the mean times over all seeds; *first* = seed 0 only (the first call on "
        "the case in this process: compiles its functions, from PyTensor's on-disk cache when warm); "
        "*later* = ratio of the mean times of seeds ≥ 1 (thermodynamic may reuse functions compiled "
        "for the same model in the process; `pm.sample_smc` compiles again on every call). "
        "Seconds in brackets: thermodynamic / smc.",
        "",
        "| case | all | first | later | thermodynamic compile time, first run (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for c in cases:
        th, sm = summary[c]["thermodynamic"], summary[c]["smc"]
        cells = []
        for key in ("time", "time_first", "time_later"):
            a, b = th.get(key, math.nan), sm.get(key, math.nan)
            r = b / a if a and math.isfinite(a) and math.isfinite(b) else math.nan
            cells.append(f"{_f(r, '{:.2f}')} ({_f(a, '{:.1f}')} / {_f(b, '{:.1f}')})")
        lines.append(f"| {c} | " + " | ".join(cells) + f" | {_f(th.get('compile_first', math.nan), '{:.1f}')} |")
    lines.append("")

    failures = [r for r in rows if not r["ok"] and r.get("error_type") != "Skipped"]
    lines += ["## Failures", ""]
    if failures:
        lines += ["| kind | case | method | seed | exception | message |", "|---|---|---|---:|---|---|"]
        for r in failures:
            msg = r["error"].replace("|", "\\|")[:300]
            lines.append(f"| {r['kind']} | {r['case']} | {r['method']} | {r['seed']} | "
                         f"`{r['error_type']}` | {msg} |")
    else:
        lines.append("None: every run completed.")
    lines.append("")

    mlp = [r for r in rows if r["kind"] == "mlp"]
    if mlp or ctx["mlp"]:
        lines += [
            "## Robot-arm MLP (`pymc_evidence.testing.robot_arm_mlp(h)`, no exact evidence)",
            "",
            f"One run per h and method (seed {ctx['mlp_seed']}; smc on every h first, then thermodynamic), per-run time limit "
            f"{_f(ctx['mlp_timeout'], '{:.0f}')} s"
            + (f", and at most the time left of the {ctx['budget_minutes']:g}-min total budget"
               if ctx["budget_minutes"] else "") + ". `RunTimeout` = stopped at the limit, not a crash. "
            "thermodynamic: `mlp_layers=MLPLayer(weights=\"z_w_in\", bias=\"z_b_hidden\", "
            "output=\"z_w_out\")`, " + ", ".join(f"`{k}={v}`" for k, v in MLP_THERMODYNAMIC.items())
            + "; smc: defaults.",
            "",
            "| h | method | completed | log Z | SE | time (s) | notes |",
            "|---:|---|---|---:|---:|---:|---|",
        ]
        for r in mlp:
            if r["ok"]:
                note = (f"TI {_f(r.get('ti'), '{:.4g}')} ± {_f(r.get('ti_se'), '{:.3g}')}; "
                        f"{r.get('n_warnings', 0)} warning(s)") if r[
                    "method"] == "thermodynamic" else f"chains: {r.get('smc_chains', '')}"
                if r.get("warnings"):
                    note += ": " + r["warnings"].replace("|", "/")[:200]
            else:
                note = f"**{r['error_type']}**: {r['error'].replace('|', '/')[:300]}"
            lines.append(
                f"| {r['case'].removeprefix('robot_arm_mlp_h')} | {r['method']} | {'yes' if r['ok'] else 'no'} | "
                f"{_f(r.get('log_z'), '{:.2f}')} | {_f(r.get('se'), '{:.3f}')} | {r['time_s']:.1f} | {note} |"
            )
        lines.append("")

    lines += [
        "Raw runs: `" + ctx["csv_name"] + "` (one row per run; `smc_chains` = each chain's log Ẑ, "
        "`smc_mean_log` = their plain mean; `ti` = the thermodynamic-integration estimate).",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def _load(load) -> str:
    return "/".join(f"{x:.2f}" for x in load) if load else "n/a"


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    all_cases = _cases()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 seeds, the three cheapest cases, no MLP (default output ..._quick.md)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per case (default 5; quick 2)")
    parser.add_argument("--expensive-seeds", type=int, default=None,
                        help=f"seeds for the expensive cases {EXPENSIVE_CASES} (default: --seeds)")
    parser.add_argument("--cases", nargs="+", choices=list(all_cases), default=None,
                        help="exact-evidence cases to run (default: all; quick: the three cheapest)")
    parser.add_argument("--mlp", nargs="*", type=int, default=None,
                        help="robot-arm MLP hidden-layer sizes (default 2 8; quick: none; none: bare --mlp)")
    parser.add_argument("--mlp-timeout", type=float, default=1800.0,
                        help="per-run time limit (s) on the MLP runs (0: none)")
    parser.add_argument("--budget-minutes", type=float, default=0.0,
                        help="total budget: each MLP run is limited to the time left (0: none); "
                        "an MLP run with less than a minute left is skipped and recorded as such")
    parser.add_argument("--timeout", type=float, default=0.0,
                        help="per-run time limit (s) on the exact-case runs (0: none)")
    parser.add_argument("--output", type=Path, default=None,
                        help="markdown report (default benchmarks/results/thermodynamic_vs_smc.md, "
                        "quick: ..._quick.md); the CSV of raw runs goes beside it (.csv)")
    args = parser.parse_args(argv)

    seeds = args.seeds if args.seeds is not None else (2 if args.quick else 5)
    expensive_seeds = args.expensive_seeds if args.expensive_seeds is not None else seeds
    cases = args.cases or (list(QUICK_CASES) if args.quick else list(all_cases))
    mlp_hs = args.mlp if args.mlp is not None else ([] if args.quick else [2, 8])
    md_path = args.output or (DEFAULT_OUTPUT.with_name(DEFAULT_OUTPUT.stem + "_quick.md")
                              if args.quick else DEFAULT_OUTPUT)
    csv_path = md_path.with_suffix(".csv")

    # Quiet PyMC's per-call logging; failures are recorded, not printed.
    logging.getLogger("pymc").setLevel(logging.ERROR)
    logging.getLogger("pytensor").setLevel(logging.ERROR)

    import pymc as pm  # noqa: F401 — imported early so that versions() and timings are clean

    from pymc.sampling.parallel import _cpu_count

    kwargs = smc_kwargs()
    cores = _cpu_count()
    smc_chains = max(2, cores)
    ctx = {
        "argv": sys.argv[1:] if argv is None else list(argv),
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "t0": time.time(),
        "machine": machine_info(),
        "versions": versions(),
        "git": git_info(),
        "smc_kwargs": kwargs,
        "smc_chains": smc_chains,
        "smc_parallel": cores > 1,
        "cases": cases,
        "case_descriptions": {k: d for k, (d, _) in all_cases.items()},
        "seeds_desc": (f"{seeds} per case (0…{seeds - 1})"
                       + (f", {expensive_seeds} for {', '.join(c for c in EXPENSIVE_CASES if c in cases)}"
                          if expensive_seeds != seeds and any(c in cases for c in EXPENSIVE_CASES) else "")),
        "mlp": mlp_hs,
        "mlp_seed": 0,
        "mlp_timeout": args.mlp_timeout or math.nan,
        "budget_minutes": args.budget_minutes,
        "csv_name": csv_path.name,
    }
    print(f"versions {ctx['versions']}; smc kwargs {kwargs}; estimator {ctx['git']['estimator_commit']}",
          flush=True)

    rows: list[dict] = []

    def record(kind, case, method, seed, exact, result):
        row = {"kind": kind, "case": case, "method": method, "seed": seed, "exact": exact, **result}
        if result["ok"] and exact is not None:
            row["error_nats"] = row["log_z"] - exact
            se = row.get("se", math.nan)
            row["abs_err_over_se"] = abs(row["error_nats"]) / se if se and math.isfinite(se) else math.nan
        rows.append(row)
        status = (f"{row['log_z']:.4f} ± {row['se']:.4f}" if result["ok"]
                  else f"FAILED {row['error_type']}: {row['error'][:120]}")
        err = f" err {row['error_nats']:+.4f}" if "error_nats" in row else ""
        print(f"[{(time.time() - ctx['t0']) / 60:6.1f} min] {kind} {case} {method} seed={seed}: "
              f"{status}{err} ({row['time_s']:.1f} s)", flush=True)

    def flush(finished=False):
        write_csv(csv_path, rows)
        write_report(md_path, rows, ctx, finished)

    warm_up(kwargs)
    for case in cases:
        _, factory = all_cases[case]
        model, exact = factory()
        n_seeds = expensive_seeds if case in EXPENSIVE_CASES else seeds
        for seed in range(n_seeds):
            order = METHODS if seed % 2 == 0 else METHODS[::-1]
            for method in order:
                if method == "thermodynamic":
                    result = timed(run_thermodynamic, model, seed, timeout=args.timeout)
                else:
                    result = timed(run_smc, model, seed, kwargs, timeout=args.timeout)
                record("exact", case, method, seed, exact, result)
        flush()

    from pymc_evidence import testing

    # smc on every h first (quick to crash or finish: answers "does it crash?" within the budget),
    # then thermodynamic on every h with the time left.
    for method, h in [(m, h) for m in ("smc", "thermodynamic") for h in mlp_hs]:
        model = testing.robot_arm_mlp(h)
        limit = args.mlp_timeout or math.inf
        if args.budget_minutes:
            limit = min(limit, args.budget_minutes * 60 - (time.time() - ctx["t0"]))
        if limit < 60:
            result = {"ok": False, "error_type": "Skipped", "time_s": 0.0,
                      "error": f"not run: {max(limit, 0):.0f} s left of the {args.budget_minutes:g}-min budget"}
        elif method == "thermodynamic":
            result = timed(run_thermodynamic, model, ctx["mlp_seed"],
                           mlp_layers=testing.ROBOT_ARM_LAYER, **MLP_THERMODYNAMIC,
                           timeout=None if math.isinf(limit) else limit)
        else:
            result = timed(run_smc, model, ctx["mlp_seed"], kwargs,
                           timeout=None if math.isinf(limit) else limit)
        record("mlp", f"robot_arm_mlp_h{h}", method, ctx["mlp_seed"], None, result)
        flush()

    flush(finished=True)
    print(f"wrote {md_path} and {csv_path} in {(time.time() - ctx['t0']) / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
