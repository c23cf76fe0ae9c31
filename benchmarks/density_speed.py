"""Speed of the compiled batched density: µs per point, batched call vs a loop of single points.

The model is a Neal-style MLP of robot-arm size (Barber & Bishop 1997, §5): N = 200 cases of
MacKay's robot-arm data, 2 inputs, one layer of h tanh units, 2 linear outputs; Gaussian priors
on four weight groups (input→hidden weights, hidden biases, hidden→output weights, output
biases), each with its own precision α_k ~ Gamma(mean ω_k, shape s_k/2), and a noise precision
β ~ Gamma(ω=400, s=0.2).

One call of ``ModelDensity`` returns log prior, log likelihood and both gradients for K points.
For each h and K we time that call (median of several repeats) and a Python loop of K calls with
one point each, both at exact prior draws (not the initial point: ``tanh(0)`` is a fast path).

Usage::

    python benchmarks/density_speed.py            # full run, writes benchmarks/results/density_speed.md
    python benchmarks/density_speed.py --quick    # h=4 only, short timings, prints only
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA_CANDIDATES = [
    ROOT / "data" / "robot_arm_mackay.csv",
    ROOT / "examples" / "data" / "robot_arm_mackay.csv",
    ROOT.parent / "shared" / "data" / "robot_arm_mackay.csv",
]
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "density_speed.md"


def load_robot_arm(path: Path, n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Rows 1..n of MacKay's robot-arm data (the 200-case training set): inputs, targets."""
    import pandas as pd

    frame = pd.read_csv(path)
    missing = {"x1", "x2", "y1", "y2"} - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: expected columns x1, x2, y1, y2; missing {sorted(missing)}")
    frame = frame.iloc[:n]
    return frame[["x1", "x2"]].to_numpy(float), frame[["y1", "y2"]].to_numpy(float)


def gamma_prior(name: str, omega: float, s: float):
    """Barber & Bishop eq. 8: a Gamma hyperprior with mean ω and shape s/2."""
    import pymc as pm

    return pm.Gamma(name, alpha=s / 2, beta=s / (2 * omega))


def mlp_model(x: np.ndarray, y: np.ndarray, h: int):
    """The robot-arm MLP with Barber & Bishop's (after Neal) hyperpriors."""
    import pymc as pm

    n_in, n_out = x.shape[1], y.shape[1]
    with pm.Model() as model:
        a_w1 = gamma_prior("alpha_w1", omega=1.0, s=0.2)
        a_b1 = gamma_prior("alpha_b1", omega=1.0, s=0.2)
        a_w2 = gamma_prior("alpha_w2", omega=float(h), s=0.2)
        a_b2 = gamma_prior("alpha_b2", omega=0.2, s=1.0)
        beta = gamma_prior("beta", omega=400.0, s=0.2)
        w1 = pm.Normal("w1", 0.0, 1.0 / pm.math.sqrt(a_w1), shape=(n_in, h))
        b1 = pm.Normal("b1", 0.0, 1.0 / pm.math.sqrt(a_b1), shape=h)
        w2 = pm.Normal("w2", 0.0, 1.0 / pm.math.sqrt(a_w2), shape=(h, n_out))
        b2 = pm.Normal("b2", 0.0, 1.0 / pm.math.sqrt(a_b2), shape=n_out)
        f = pm.math.dot(pm.math.tanh(pm.math.dot(x, w1) + b1), w2) + b2
        pm.Normal("y", f, 1.0 / pm.math.sqrt(beta), observed=y)
    return model


def call_times(fns, min_time: float, repeats: int) -> list[tuple[float, float]]:
    """(median, minimum) over ``repeats`` of the mean time of one call of each of ``fns`` (s).

    The functions are timed in turn within each repeat, so a load change on a shared machine
    affects all of them alike rather than biasing their ratio.
    """
    numbers = []
    for fn in fns:
        fn()  # warm-up
        t0 = time.perf_counter()
        fn()
        numbers.append(max(1, int(min_time / max(time.perf_counter() - t0, 1e-7))))
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, number, out in zip(fns, numbers, times):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - t0) / number)
    return [(float(np.median(t)), float(np.min(t))) for t in times]


def run(args) -> tuple[list[dict], dict]:
    import warnings

    warnings.filterwarnings("ignore", "PyTensor could not link to a BLAS", UserWarning)
    import pymc as pm
    import pytensor

    from pymc_evidence.density import ModelDensity

    load_start = os.getloadavg()[0]
    x, y = load_robot_arm(args.data, args.cases)
    rng = np.random.default_rng(args.seed)
    rows, compile_times = [], {}
    for h in args.hidden:
        model = mlp_model(x, y, h)
        t0 = time.perf_counter()
        density = ModelDensity(model, backend=args.backend)
        X = density.prior_draws(rng, max(args.batch))
        density(X[:1])  # Numba compiles at the first call: count it as compilation
        compile_times[h] = time.perf_counter() - t0
        print(f"h={h}: d={density.dim}, compiled in {compile_times[h]:.1f} s", flush=True)
        for K in args.batch:
            XK = X[:K]
            singles = [XK[i : i + 1] for i in range(K)]

            def batched(XK=XK):
                density(XK)

            def loop(singles=singles):
                for xi in singles:
                    density(xi)

            (t_batch, best_batch), (t_loop, best_loop) = call_times(
                [batched, loop], args.min_time, args.repeats
            )
            row = {
                "h": h,
                "d": density.dim,
                "K": K,
                "batched_us_per_point": 1e6 * t_batch / K,
                "loop_us_per_point": 1e6 * t_loop / K,
                "speedup": t_loop / t_batch,
                "batched_best": 1e6 * best_batch / K,
                "loop_best": 1e6 * best_loop / K,
            }
            rows.append(row)
            print(
                f"  K={K:3d}: batched {row['batched_us_per_point']:9.1f} µs/point, "
                f"loop {row['loop_us_per_point']:9.1f} µs/point, speed-up ×{row['speedup']:.2f}",
                flush=True,
            )
    env = {
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "pymc": pm.__version__,
        "pytensor": pytensor.__version__,
        "numpy": np.__version__,
        "backend": args.backend,
        "blas__ldflags": repr(pytensor.config.blas__ldflags),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "compile_s": compile_times,
        "load": (load_start, os.getloadavg()[0]),
    }
    return rows, env


def markdown(rows: list[dict], env: dict, args) -> str:
    lines = [
        "# Batched density speed: robot-arm MLP",
        "",
        "Generated by `python benchmarks/density_speed.py"
        + (" --quick" if args.quick else "")
        + f"` on {env['date']}: Python {env['python']}, PyMC {env['pymc']}, "
        f"PyTensor {env['pytensor']}, NumPy {env['numpy']}, backend `{env['backend']}`, "
        f"BLAS flags {env['blas__ldflags']}, {env['cpus']} CPUs ({env['machine']}).",
        "",
        f"One call = log prior + log likelihood + both gradients at K points (N={args.cases} cases, "
        "2 inputs, 2 outputs, h tanh units, Gamma hyperpriors on 4 weight-group precisions and "
        "the noise precision; d parameters in unconstrained space). Points are exact prior draws. "
        f"Median (and best) of {args.repeats} repeats of ≥{args.min_time:g} s each, batched and loop "
        "timed in turn within each repeat. *loop* = K calls with one point each; *speed-up* = "
        "median loop time / median batched time.",
        "",
        "| h | d | K | batched µs/point | loop µs/point | speed-up | best batched | best loop |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['h']} | {r['d']} | {r['K']} | {r['batched_us_per_point']:.1f} | "
            f"{r['loop_us_per_point']:.1f} | {r['speedup']:.2f} | {r['batched_best']:.1f} | "
            f"{r['loop_best']:.1f} |"
        )
    lines += [
        "",
        "Compile time (model build + C compile, warm or cold `~/.pytensor` cache): "
        + ", ".join(f"h={h}: {t:.1f} s" for h, t in env["compile_s"].items())
        + ".",
        "",
        "The cost of one point depends on the point (libm's `tanh` is fast for saturated "
        "arguments, and the Gamma hyperpriors make weight scales span many orders of magnitude), "
        "so the loop column also varies with K: each K uses the first K of the same prior draws.",
        "",
        f"Timings come from a shared machine (1-min load average {env['load'][0]:.1f} at the start, "
        f"{env['load'][1]:.1f} at the end, on {env['cpus']} CPUs): read them as orders of magnitude.",
        "",
    ]
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="h=4, K=1 16, short timings; prints only (smoke test)"
    )
    parser.add_argument("--hidden", type=int, nargs="+", help="hidden units h (default 4 16 64)")
    parser.add_argument("--batch", type=int, nargs="+", help="batch sizes K (default 1 16 64)")
    parser.add_argument("--cases", type=int, default=200, help="training cases N (rows 1..N)")
    parser.add_argument("--repeats", type=int, default=7, help="repeats; the median is reported")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per repeat, at least")
    parser.add_argument("--backend", choices=("c", "numba"), default="c")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=None, help="robot_arm_mackay.csv")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"markdown results file (default {DEFAULT_OUTPUT.relative_to(ROOT)}; none with --quick)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.hidden, args.batch = args.hidden or [4], args.batch or [1, 16]
        args.repeats, args.min_time = 3, 0.05
    else:
        args.hidden, args.batch = args.hidden or [4, 16, 64], args.batch or [1, 16, 64]
        if args.output is None:
            args.output = DEFAULT_OUTPUT
    if args.data is None:
        found = [p for p in DATA_CANDIDATES if p.exists()]
        if not found:
            parser.error("robot_arm_mackay.csv not found; pass --data PATH")
        args.data = found[0]
    if min(args.batch) < 1 or min(args.hidden) < 1:
        parser.error("--batch and --hidden must be positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    rows, env = run(args)
    text = markdown(rows, env, args)
    print()
    print(text)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
