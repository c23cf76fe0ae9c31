"""Speed of the batched density of a robot-arm MLP: ours vs the naive graph vs a NumPy floor.

The model is :func:`pymc_evidence.testing.robot_arm_mlp` (Barber & Bishop 1997, §5): N = 200
robot-arm cases, 2 inputs, h tanh units, 2 linear outputs, four weight groups with Gamma
precisions (non-centred) and a Gamma noise precision; d = 5h + 7 parameters. One call returns the
log prior, the log likelihood and both gradients at K points. Timed side by side, in one process,
interleaved (so machine load hits all alike), at exact prior draws scaled by 0.3 (not the initial
point: ``tanh(0)`` is a fast path):

* ``ours``  — :class:`~pymc_evidence.density.ModelDensity` (C backend: NumPy's SIMD ``tanh`` in the
  graph, batches split into cache-sized chunks);
* ``naive`` — the same vectorised PyTensor graph compiled as is (C backend), one call per batch;
* ``numba`` — ``ModelDensity(backend="numba")``;
* ``floor`` — a hand-written batched NumPy implementation of the same density and gradients
  (checked against ours to 1e-6), with the same chunks.

BLAS runs on one thread (``--blas-threads one``, the default), as inside the samplers
(:func:`pymc_evidence._parallel.one_blas_thread`); ``--blas-threads default`` leaves the BLAS
library's own thread count.

Usage::

    python benchmarks/density_speed.py           # h = 4 16 64, K = 1 16 64 256; writes results/density_speed.md
    python benchmarks/density_speed.py --quick   # h = 4, K = 16, short timings, prints only
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "density_speed.md"
LOG_2PI = np.log(2 * np.pi)


class NumpyFloor:
    """Batched log prior, log likelihood and gradients of ``robot_arm_mlp`` in plain NumPy.

    Works on the flat unconstrained vector in the order of ``density.names``: per weight group g
    a log precision u_g (α_g = e^{u_g} ~ Gamma(s/2, s/2ω), Jacobian e^{u}) and standard normal
    z_g with weights w_g = z_g e^{−u_g/2}; the noise precision β = e^{v}.
    """

    def __init__(self, density, x, y, h):
        from pymc_evidence.testing import _gamma_precision

        self.density, self.x, self.y = density, x, y
        self.gamma = {
            "alpha_w_in_log__": _gamma_precision(0.2, 1.0),
            "alpha_b_hidden_log__": _gamma_precision(0.2, 1.0),
            "alpha_w_out_log__": _gamma_precision(0.2, float(h)),
            "alpha_b_out_log__": _gamma_precision(1.0, 0.2),
            "beta_log__": _gamma_precision(0.2, 400.0),
        }

    def __call__(self, X):
        from scipy.special import gammaln

        p = self.density.split(X)
        grad, log_prior = {}, 0.0
        for name, (a, b) in self.gamma.items():
            u = p[name]
            log_prior = log_prior + a * np.log(b) - gammaln(a) + a * u - b * np.exp(u)
            grad[name] = a - b * np.exp(u)
        for name in ("z_w_in", "z_b_hidden", "z_w_out", "z_b_out"):
            z = p[name]
            log_prior = log_prior - 0.5 * np.sum(z * z, axis=tuple(range(1, z.ndim))) - 0.5 * z[0].size * LOG_2PI
            grad[name] = -z
        scale = {g: np.exp(-0.5 * p[f"alpha_{g}_log__"]) for g in ("w_in", "b_hidden", "w_out", "b_out")}
        w_in = p["z_w_in"] * scale["w_in"][:, None, None]
        b_h = p["z_b_hidden"] * scale["b_hidden"][:, None]
        w_out = p["z_w_out"] * scale["w_out"][:, None, None]
        b_out = p["z_b_out"] * scale["b_out"][:, None]
        beta = np.exp(p["beta_log__"])
        hidden = np.tanh(np.matmul(self.x, w_in) + b_h[:, None, :])  # (K, N, h)
        resid = self.y - (np.matmul(hidden, w_out) + b_out[:, None, :])  # (K, N, D)
        sq = np.einsum("knd,knd->k", resid, resid)
        n_obs = self.y.size
        log_lik = 0.5 * n_obs * (p["beta_log__"] - LOG_2PI) - 0.5 * beta * sq
        g_f = beta[:, None, None] * resid  # ∂ log L / ∂ f
        g_w_out = np.matmul(hidden.transpose(0, 2, 1), g_f)
        g_b_out = g_f.sum(axis=1)
        g_a = np.matmul(g_f, w_out.transpose(0, 2, 1)) * (1 - hidden * hidden)
        g_w_in = np.matmul(self.x.T, g_a)
        g_b_h = g_a.sum(axis=1)
        lik = {name: np.zeros_like(v) for name, v in p.items()}
        lik["beta_log__"] = 0.5 * n_obs - 0.5 * beta * sq
        for g, gw in (("w_in", g_w_in), ("b_hidden", g_b_h), ("w_out", g_w_out), ("b_out", g_b_out)):
            s = scale[g].reshape((-1,) + (1,) * (gw.ndim - 1))
            lik[f"z_{g}"] = gw * s
            # w = z e^{-u/2}: ∂w/∂u = -w/2
            lik[f"alpha_{g}_log__"] = -0.5 * np.sum(gw * p[f"z_{g}"] * s, axis=tuple(range(1, gw.ndim)))
        flat = lambda parts: np.concatenate(  # noqa: E731
            [np.reshape(parts[n], (len(X), -1)) for n in self.density.names], axis=1
        )
        return log_prior, log_lik, flat(grad), flat(lik)


def _chunked(fn, rows):
    def call(X):
        return [fn(X[i : i + rows]) for i in range(0, len(X), rows)]

    return call


def _naive(density):
    """The vectorised graph of the same density, compiled without our changes."""
    import pytensor.tensor as pt
    from pymc.pytensorf import compile as compile_pymc

    from pymc_evidence.density import _batched

    prior, lik = _batched(list(density._single), density._x, density._X)
    grads = pt.grad(prior.sum(), density._X), pt.grad(lik.sum(), density._X)
    return compile_pymc([density._X], [prior, lik, *grads], mode=density.mode)


def time_interleaved(fns: dict, min_time: float, repeats: int) -> dict:
    """Median over ``repeats`` rounds (each fn in turn) of the mean seconds per call."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            n, start = 0, time.perf_counter()
            while True:
                fn()
                n += 1
                elapsed = time.perf_counter() - start
                if elapsed >= min_time:
                    break
            times[name].append(elapsed / n)
    return {name: float(np.median(t)) for name, t in times.items()}


def run(args):
    """Time every contender at every (h, K), BLAS threads as ``args.blas_threads`` says."""
    from pymc_evidence._parallel import one_blas_thread

    with one_blas_thread() if args.blas_threads == "one" else contextlib.nullcontext():
        return _run(args)


def _run(args):
    warnings.filterwarnings("ignore", "PyTensor could not link to a BLAS", UserWarning)
    import pymc as pm
    import pytensor

    from pymc_evidence.density import ModelDensity
    from pymc_evidence.testing import robot_arm_data, robot_arm_mlp

    x, y = robot_arm_data()[:2]
    rng = np.random.default_rng(args.seed)
    rows, compile_s = [], {}
    load_start = os.getloadavg()[0]
    for h in args.hidden:
        model = robot_arm_mlp(h)
        t0 = time.perf_counter()
        ours = ModelDensity(model)
        compile_s[h] = {"ours": time.perf_counter() - t0}
        t0 = time.perf_counter()
        naive = _naive(ours)
        compile_s[h]["naive"] = time.perf_counter() - t0
        X = ours.prior_draws(rng, max(args.batch)) * 0.3
        floor = NumpyFloor(ours, x, y, h)
        reference, check = ours(X[:8]), floor(X[:8])
        for a, b in zip(reference, check):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        contenders = {"ours": ours, "naive": naive, "floor": _chunked(floor, ours.chunk_rows)}
        if args.numba:
            t0 = time.perf_counter()
            numba = ModelDensity(model, backend="numba")
            numba(X[:1])  # Numba compiles at the first call
            compile_s[h]["numba"] = time.perf_counter() - t0
            contenders["numba"] = numba
        print(f"h={h}: d={ours.dim}, chunk_rows={ours.chunk_rows}, compile {compile_s[h]}", flush=True)
        for K in args.batch:
            XK = X[:K]
            times = time_interleaved(
                {name: (lambda f=f: f(XK)) for name, f in contenders.items()},
                args.min_time, args.repeats,
            )
            row = {"h": h, "d": ours.dim, "K": K}
            row.update({f"{name}_us": 1e6 * t / K for name, t in times.items()})
            rows.append(row)
            print("  " + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    env = {
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "pymc": pm.__version__,
        "pytensor": pytensor.__version__,
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "BLAS threads": args.blas_threads,
        "load average (start, end)": (round(load_start, 2), round(os.getloadavg()[0], 2)),
        "compile seconds": {h: {k: round(v, 1) for k, v in c.items()} for h, c in compile_s.items()},
    }
    return rows, env


def markdown(rows, env) -> str:
    import pandas as pd

    frame = pd.DataFrame(rows)
    for name in ("naive", "floor", "numba"):
        if f"{name}_us" in frame:
            frame[f"{name}/ours"] = frame[f"{name}_us"] / frame["ours_us"]
    lines = [
        "# Batched density speed: robot-arm MLP (µs per point, lower is better)",
        "",
        "Written by `benchmarks/density_speed.py`. `ours` = `ModelDensity` (C backend), `naive` = the",
        "same vectorised graph compiled as is, `floor` = hand-written batched NumPy, `numba` =",
        "`ModelDensity(backend='numba')`; ratios > 1 mean ours is faster. Timings interleaved in one",
        "process, median of repeats.",
        "",
        frame.to_markdown(index=False, floatfmt=".2f"),
        "",
        "Environment: " + "; ".join(f"{k}: {v}" for k, v in env.items()),
        "",
    ]
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="h=4, K=16, short timings; print only")
    parser.add_argument("--hidden", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds per timing, at least")
    parser.add_argument("--no-numba", dest="numba", action="store_false", help="skip the Numba backend")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--blas-threads", choices=["one", "default"], default="one",
                        help="one (as the samplers run the density) or the BLAS library's default")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    if args.quick:
        args.hidden, args.batch, args.repeats, args.min_time, args.numba = [4], [16], 1, 0.05, False
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    rows, env = run(args)
    if not args.quick:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(markdown(rows, env))
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
