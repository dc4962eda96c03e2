"""Executors: local serial and process pool agree; Ray is optional and gives the same results."""
from __future__ import annotations

import importlib.util

import pytest

from ole.errors import ValidationError
from ole.executors import ExecutorUnavailable, LocalExecutor, make_executor
from ole.jobs import EvalJob
from ole.trace import RunCondition, TaskSpec
from synthetic import fake_evaluate

HAS_RAY = importlib.util.find_spec("ray") is not None


def _square(x: int) -> int:
    return x * x


def _jobs():
    from ole.bundle import Bundle
    from ole.loop_policy import LoopPolicy
    b = Bundle(name="coder", loop_policy=LoopPolicy())
    return [EvalJob(bundle_ref="coder@1", bundle=b, task=TaskSpec(env="gym/acrobot", pool_seed=p),
                    condition=RunCondition(host="builtin", seed=s), runs_root="r") for p in (1, 2) for s in (0, 1)]


def test_local_serial_and_pool_return_the_same_results_in_job_order():
    jobs = list(range(9))
    with LocalExecutor(1) as serial, LocalExecutor(2) as pool:
        assert serial.map(_square, jobs) == pool.map(_square, jobs) == [x * x for x in jobs]
        indices = [i for i, _ in pool.run(_square, jobs)]
        assert sorted(indices) == jobs


def test_jobs_are_picklable_and_give_identical_traces_across_processes():
    jobs = _jobs()
    with LocalExecutor(2) as pool:
        assert pool.map(fake_evaluate, jobs) == [fake_evaluate(j) for j in jobs]


def test_bad_executor_arguments_are_clear_errors():
    with pytest.raises(ValidationError, match="unknown executor"):
        make_executor("dask")
    with pytest.raises(ValidationError, match="--address"):
        make_executor("local", address="ray://x:10001")
    with pytest.raises(ValidationError, match="workers"):
        make_executor("local", workers=0)


@pytest.mark.skipif(HAS_RAY, reason="ray is installed: the missing-extra message cannot be shown")
def test_ray_without_the_extra_names_the_extra():
    with pytest.raises(ExecutorUnavailable, match="ray") as info:
        make_executor("ray", workers=2)
    assert "extra" in info.value.hint


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.skipif(not HAS_RAY, reason="the `ray` extra is not installed (pip install 'openloopevolve[ray]')")
def test_ray_gives_the_same_results_as_local_processes():
    jobs = _jobs()
    with make_executor("ray", workers=2) as ray_ex, LocalExecutor(2) as local:
        assert ray_ex.map(fake_evaluate, jobs) == local.map(fake_evaluate, jobs)
