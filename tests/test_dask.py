"""``compare`` on executors: a Dask ``LocalCluster`` (2 worker processes) and the local pool.

The same seed must give the identical table whichever executor runs the models, and a model that
fails on a worker must raise an error naming it. Dask is the optional extra ``[dask]`` (also in
``[test]``, so CI runs these); without it the cluster tests skip, except under CI where a missing
Dask is an error.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
import pytest
from _scripts import load_script  # tests/_scripts.py
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

import pymc_evidence as pm_evidence
from pymc_evidence import testing

#: Small thermodynamic settings: a run of these models takes a second or two.
OPTIONS = dict(random_seed=11, progressbar=False, target_se=None, n_particles=64, n_groups=2)
#: The tables here test dispatch, not a comparison: their models observe different data.
pytestmark = pytest.mark.filterwarnings("ignore:the models observe different data")


def small_models():
    """Three tiny models, more than the cluster has workers, so some queue."""
    return {
        "regression": testing.conjugate_regression(dim=2, n_obs=15)[0],
        "informative": testing.beta_binomial()[0],
        "flat": testing.beta_binomial(alpha=1.0, beta=1.0)[0],
    }


def failing_off_this_process(name: str = "") -> pm.Model:
    """A beta-binomial model whose likelihood raises in any process but the one that built it.

    It validates, pickles and evaluates here, so ``compare`` dispatches it; only on a worker
    does its first likelihood evaluation fail (the error comes from inside the estimator).
    """
    home = os.getpid()

    class OnlyAtHome(Op):  # local class: cloudpickle sends it, with ``home``, by value
        __props__ = ()

        def make_node(self, x):
            x = pt.as_tensor_variable(x)
            return Apply(self, [x], [x.type()])

        def perform(self, node, inputs, outputs):
            if os.getpid() != home:
                raise FloatingPointError("likelihood evaluated away from home")
            outputs[0][0] = np.zeros_like(inputs[0])

        def grad(self, inputs, output_grads):
            return [pt.zeros_like(inputs[0])]

    model = testing.beta_binomial(name=name)[0]
    with model:
        pm.Potential("zero_at_home", OnlyAtHome()(model["p"]))
    return model


@pytest.fixture(scope="module")
def dask_client():
    """A ``LocalCluster`` of 2 single-threaded worker processes, closed after the module."""
    if os.environ.get("CI"):
        import distributed  # CI installs .[test], which has the dask extra: fail, do not skip
    else:
        distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        silence_logs=logging.ERROR,
    ) as cluster, distributed.Client(cluster) as client:
        yield client


def assert_identical(table: pd.DataFrame, reference: pd.DataFrame) -> None:
    """Bit-identical evidences (not approximately equal), and the same table."""
    assert list(table.index) == list(reference.index)
    np.testing.assert_array_equal(table["log_evidence"], reference["log_evidence"])
    np.testing.assert_array_equal(table["se"], reference["se"])
    pd.testing.assert_frame_equal(table, reference, check_exact=True)


@pytest.fixture(scope="module")
def sequential_table():
    return pm_evidence.compare(small_models(), **OPTIONS)


def test_dask_cluster_gives_identical_table(dask_client, sequential_table):
    table = pm_evidence.compare(small_models(), executor=dask_client.get_executor(), **OPTIONS)
    assert_identical(table, sequential_table)
    assert len(dask_client.scheduler_info()["workers"]) == 2


# compiling the failing model here, with PyTensor 3's numba backend, notes its Python-only Op
@pytest.mark.filterwarnings("ignore:Numba will use object mode:UserWarning")
def test_dask_worker_error_names_the_model(dask_client):
    models = {"fine": testing.beta_binomial()[0], "away": failing_off_this_process("away")}
    models["away"].compile_logp()(models["away"].initial_point())  # fine in this process
    with pytest.raises(
        RuntimeError,
        match=r"model 'away' on the executor failed: FloatingPointError: likelihood evaluated "
        "away from home",
    ) as info:
        # a Client is accepted as it is (compare uses client.get_executor())
        pm_evidence.compare(models, executor=dask_client, **OPTIONS)
    assert isinstance(info.value.__cause__, FloatingPointError)
    # the cluster is still usable afterwards, also for the same model and seed as the cancelled
    # task (Dask keys a task by its arguments: compare makes each submission's key unique)
    table = pm_evidence.compare({"fine": models["fine"]}, executor=dask_client, **OPTIONS)
    assert np.isfinite(table.loc["fine", "log_evidence"])


def test_local_process_pool_gives_identical_table(sequential_table):
    table = pm_evidence.compare(small_models(), executor="processes", **OPTIONS)
    assert_identical(table, sequential_table)


def test_local_process_pool_error_names_the_model():
    models = {"fine": testing.beta_binomial()[0], "away": failing_off_this_process("away")}
    with pytest.raises(RuntimeError, match="'away' on the executor failed: FloatingPointError"):
        pm_evidence.compare(models, executor="processes", **OPTIONS)


def test_sequential_error_names_the_model():
    models = {"informative": testing.beta_binomial()[0]}
    with pytest.raises(
        RuntimeError, match=r"model 'informative' failed: ValueError: ladder must be"
    ) as info:
        pm_evidence.compare(models, **dict(OPTIONS, ladder=[0.0, 0.6, 0.3, 1.0]))
    assert isinstance(info.value.__cause__, ValueError)


def test_executor_argument_is_validated():
    models = {"informative": testing.beta_binomial()[0]}
    with pytest.raises(ValueError, match=r"executor must be None, one of \['processes'\]"):
        pm_evidence.compare(models, executor="threads", **OPTIONS)
    with pytest.raises(TypeError, match="executor must be .* got a int"):
        pm_evidence.compare(models, executor=4, **OPTIONS)


@pytest.mark.slow
def test_dask_cluster_example_quick(tmp_path):
    """``examples/dask_cluster.py --quick``: its own LocalCluster, checked against sequential."""
    pytest.importorskip("distributed")
    example = load_script("examples/dask_cluster.py", "dask_cluster_example")
    table = example.main(["--quick", "--out", str(tmp_path)])  # exits if not identical
    assert list(table["h"].sort_values()) == [1, 2]
    assert (tmp_path / "dask_cluster_quick.csv").exists()
