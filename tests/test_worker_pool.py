"""The driver's view of the worker actors: concurrent calls and how their failures surface."""

from __future__ import annotations

import gc
import os
import weakref

import pytest
from _runs import agent_worker

from actors.worker_pool import WorkerPool
from rsi.config import validate_worker
from rsi.errors import WorkerError
from rsi.testing.scripted_server import ScriptedServer

KEY = "pool-test-key-5c1e02"
# Ray worker processes get the environment Ray started with: set the key at import.
os.environ["RSI_TEST_POOL_KEY"] = KEY


def test_a_failed_call_is_raised_after_every_other_call_has_ended(tmp_path, ray_session):
    """Two asks on two replicas, both refused by the model server, the first one two seconds
    later than the second. The error raised is the first call's, so it is raised only once the
    slow call has ended, and the second call's failure comes with it as a note instead of being
    dropped in flight (Ray would print it as an unhandled error). Calls that succeed still
    answer in call order, whatever order they finish in."""
    rules = [{"match": "ZZSLOW", "reply": {"status": 400, "message": "slow refusal", "delay_s": 2}},
             {"match": "ZZFAST", "reply": {"status": 400, "message": "fast refusal"}},
             {"match": "ZZLATE", "reply": {"text": "late", "delay_s": 1}},
             {"match": "ZZSOON", "reply": "soon"}]
    with ScriptedServer([{"rules": rules}], loop=True, api_key=KEY) as srv:
        cfg = validate_worker({**agent_worker(srv.base_url, "RSI_TEST_POOL_KEY", max_retries=0), "replicas": 2}, "t")
        pool = WorkerPool(cfg, tmp_path, seed=0)
        with pytest.raises(WorkerError, match="slow refusal") as caught:
            pool.ask_many(["ZZSLOW", "ZZFAST"])
        notes = getattr(caught.value, "__notes__", [])
        assert len(notes) == 1 and notes[0].startswith("call 2 of 2 also failed: "), notes
        assert "fast refusal" in notes[0]
        assert [reply for reply, _ in pool.ask_many(["ZZLATE", "ZZSOON"])] == ["late", "soon"]


def test_a_raised_call_failure_leaves_no_cycle_holding_the_callers_frames(tmp_path, ray_session):
    """The error ``ask_many`` raises must not keep its callers' frames alive past the handler:
    a run's frames hold its actor handles, and a cycle kept them until some later garbage
    collection, which killed the archive actor under a run resumed in the same process."""
    class Held:
        pass

    def caller(pool, held):  # a frame holding an object, as a run's frames hold its handles
        pool.ask_many(["ZZFAST", "ZZFAST"])

    rules = [{"match": "ZZFAST", "reply": {"status": 400, "message": "fast refusal"}}]
    with ScriptedServer([{"rules": rules}], loop=True, api_key=KEY) as srv:
        cfg = validate_worker({**agent_worker(srv.base_url, "RSI_TEST_POOL_KEY", max_retries=0), "replicas": 2}, "t")
        pool = WorkerPool(cfg, tmp_path, seed=0)
        held = Held()
        alive = weakref.ref(held)
        gc.disable()
        try:
            with pytest.raises(WorkerError):
                caller(pool, held)
            del held
            assert alive() is None, "the caller's frame outlived the error"
        finally:
            gc.enable()
