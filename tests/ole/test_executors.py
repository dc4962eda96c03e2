"""Executors: local serial and process pool agree; Ray on a real cluster is in test_ray.py."""
from __future__ import annotations

import sys

import pytest

from ole.errors import ValidationError
from ole.executors import ExecutorUnavailable, LocalExecutor, make_executor
from ole.chosen import ChosenVersion
from ole.jobs import EvalJob
from ole.trace import RunCondition, TaskSpec
from synthetic import fake_evaluate


def _square(x: int) -> int:
    return x * x


def _jobs():
    from ole.bundle import Bundle
    from ole.loop_policy import LoopPolicy
    b = Bundle(name="coder", loop_policy=LoopPolicy())
    return [EvalJob(chosen=ChosenVersion("coder@1", b), task=TaskSpec(env="gym/acrobot", pool_seed=p),
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


def test_ray_without_the_extra_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    with pytest.raises(ExecutorUnavailable, match="ray") as info:
        make_executor("ray", workers=2)
    assert "extra" in info.value.hint
