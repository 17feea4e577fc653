"""A run on an autoscaling cluster that starts with no worker node.

The head has 0 CPUs and runs Ray's autoscaler with the fake multi-node provider
(``cluster/fake_multinode.yaml``: worker nodes of 1 CPU, at most 3, removed after 12 s idle;
each a real raylet on this machine, started by the autoscaler, token auth throughout). The
head is started and stopped by this test's own process group (``tests/_cluster.py
FakeAutoscalingCluster``), never through ``ray stop``. The same DarwinX config and seed is
submitted twice with ``rsi submit`` (``perf/autoscaling.py`` runs the same scenario and prints
its figures): once undisturbed, once with a worker node SIGKILLed while it runs a rollout; each
run starts from an empty cluster, and each is followed by the cluster scaling back to zero.

The cluster tests are slow (about 3 minutes on a busy 2-core machine: two runs that each wait
for worker nodes to start, and two idle-timeout scale-downs). Their figures are written to
``$RSI_ARTIFACTS/autoscaling.json`` (default ``build/artifacts/``). The last two tests are fast:
the YAML against Ray's schema, and the evaluator's per-request sizing in this process on the
session's local Ray.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections import Counter
from pathlib import Path

import pytest
from _cluster import FAKE_MULTINODE, REPO, FakeAutoscalingCluster, comparable, decisions, rollout_keys

_spec = importlib.util.spec_from_file_location("perf_autoscaling", REPO / "perf" / "autoscaling.py")
perf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(perf)

ARTIFACT = Path(os.environ.get("RSI_ARTIFACTS", REPO / "build" / "artifacts")) / "autoscaling.json"
MEASURED: dict = {}


@pytest.fixture(scope="module")
def cluster():
    c = FakeAutoscalingCluster()
    try:
        c.wait_ready()
        MEASURED.update(idle_timeout_s=c.idle_timeout_s, max_workers=c.autoscaling["max_workers"],
                        worker_cpus=c.autoscaling["available_node_types"]["cpu"]["resources"]["CPU"],
                        sleep_s=perf.SCENARIO["sleep_s"], load_before=os.getloadavg()[0])
        yield c
    finally:
        c.shutdown()
        if MEASURED:
            MEASURED["load_after"] = os.getloadavg()[0]
            ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
            ARTIFACT.write_text(json.dumps(MEASURED, indent=1))


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return perf.scenario(tmp_path_factory.mktemp("autoscaling"))


def _run(cluster, config, name: str, kill: bool) -> tuple[dict, dict]:
    assert cluster.workers() == {}, "the run starts on a cluster with no worker node"
    run = perf.submit(cluster, config, config.parent / "runs" / name, kill=kill)
    assert run["returncode"] == 0, run["output"][-4000:]
    summary = perf.summarise(run)
    # Scale-down: every worker node goes once idle for the timeout (counted from its last
    # rollout, at or before the job's end), plus the autoscaler's 1 s round and slack for a
    # busy machine.
    summary["scale_down_s"] = perf.scale_down(cluster, run["t_end"], cluster.idle_timeout_s + 45)
    MEASURED[name] = summary
    return run, summary


@pytest.fixture(scope="module")
def undisturbed(cluster, config):
    return _run(cluster, config, "undisturbed", kill=False)


@pytest.fixture(scope="module")
def disturbed(cluster, config, undisturbed):
    return _run(cluster, config, "node_killed", kill=True)


@pytest.mark.slow
def test_a_run_from_zero_workers_scales_up_and_uses_the_nodes_as_they_arrive(undisturbed):
    run, m = undisturbed
    run_dir = Path(run["run_dir"])
    assert [d["kind"] for d in decisions(run_dir)] == ["seed", "screen", "screen", "confirm", "promote", "test"]
    assert m["nodes_over_time"][0][1] == 0, f"no worker node at submission: {m['nodes_over_time']}"
    assert m["first_node_s"] is not None and m["max_workers_seen"] >= 2, m["nodes_over_time"]
    traces = perf.traces(run_dir)
    assert len(traces) == len(rollout_keys(run_dir)) == m["rollouts"] > 0
    by_node = Counter(t["node_id"] for t in traces)
    assert len(by_node) >= 2, f"rollouts ran on more than one worker node: {by_node}"
    # Fake provider node ids: the head is fff…00000 (0 CPUs: never a rollout), workers …00001 on.
    assert all(n.startswith("f" * 51) and not n.endswith("00000") for n in by_node), by_node
    # Batch sizing followed the cluster: the first measurement saw no CPU at all (sized as
    # one), later ones the nodes that had joined, with smaller batches.
    seen = {t["batch"]["cluster_cpus"] for t in traces}
    assert 0 in seen and max(seen) >= 2, seen
    sizes = {c: {t["batch"]["size"] for t in traces if t["batch"]["cluster_cpus"] == c} for c in seen}
    assert max(sizes[0]) > min(sizes[max(seen)]), f"batches shrank as the cluster grew: {sizes}"
    # The first measurement was sized before any node existed, and its batches ran on the
    # nodes as they joined.
    seed_at = min(t["batch"]["sized_at"] for t in traces)
    seed_rollouts = [t for t in traces if t["batch"]["sized_at"] == seed_at]
    assert {t["batch"]["cluster_cpus"] for t in seed_rollouts} == {0}
    assert len({t["node_id"] for t in seed_rollouts}) >= 2, Counter(t["node_id"] for t in seed_rollouts)


@pytest.mark.slow
def test_the_cluster_scales_back_down_after_the_run(undisturbed, cluster):
    _, m = undisturbed
    assert m["scale_down_s"] is not None, f"worker nodes still alive {cluster.idle_timeout_s + 45:.0f} s after the run"
    assert m["scale_down_s"] <= cluster.idle_timeout_s + 45, m["scale_down_s"]


@pytest.mark.slow
def test_a_worker_node_lost_mid_run_loses_nothing_and_changes_no_decision(undisturbed, disturbed, cluster):
    base_run, _ = undisturbed
    run, m = disturbed
    base_dir, run_dir = Path(base_run["run_dir"]), Path(run["run_dir"])
    killed = m["killed"]
    assert killed and "promote" not in killed["decisions_before"], "the kill landed mid-run"
    later = [s for s in run["samples"] if s["t"] > run["killed"]["t"] + 10]
    assert later and not any(killed["node_id"] in s["workers"] for s in later), "the killed node left the cluster"
    keys = rollout_keys(run_dir)
    dupes = [k for k, n in Counter(keys).items() if n > 1]
    assert not dupes, f"rollouts stored twice: {dupes[:3]}"
    assert sorted(keys) == sorted(rollout_keys(base_dir)), "every rollout exactly once, none missing"
    assert comparable(decisions(run_dir)) == comparable(decisions(base_dir))
    assert len(perf.traces(run_dir)) == len(keys), "one trace per stored rollout"
    assert m["scale_down_s"] is not None and m["scale_down_s"] <= cluster.idle_timeout_s + 45, m["scale_down_s"]


# ---- fast: the cluster definition and the sizing itself, in this process -------------------------
def test_the_fake_cluster_yaml_is_a_complete_autoscaler_config():
    import yaml
    from ray.autoscaler._private.util import validate_config

    raw = yaml.safe_load(FAKE_MULTINODE.read_text())
    assert raw["provider"]["type"] == "fake_multinode" and raw["provider"]["gcs_address"] is None
    validate_config({**raw, "provider": {**raw["provider"], "gcs_address": "127.0.0.1:6379"}})  # Ray's schema
    types = raw["available_node_types"]
    assert raw["head_node_type"] == "ray.head.default", "the fake provider's own head type name"
    assert types[raw["head_node_type"]]["resources"] == {"CPU": 0}, "no rollouts on the head"
    workers = [v for k, v in types.items() if k != raw["head_node_type"]]
    assert workers and all(v["min_workers"] == 0 and v["resources"]["CPU"] >= 1 for v in workers), "from zero"


def test_each_request_is_batched_for_the_cpus_the_cluster_has_then(tmp_path, ray_session, monkeypatch):
    """The Evaluator reads the cluster's CPUs for every request that runs rollouts, not once at
    start (a cluster that starts with no worker node would be sized for one CPU for good); and
    the rows never depend on the batching: seeds and cache keys are per rollout."""
    from test_evaluator import prepared_run

    from actors.evaluator import Evaluator
    from rsi.results import Request

    Plain = Evaluator.__ray_actor_class__
    cluster_cpus = [0]
    monkeypatch.setattr(Plain, "_live_cpus", staticmethod(lambda: cluster_cpus[0]))
    prepared = prepared_run(tmp_path, [f"q{k}" for k in range(8)], {})
    config = prepared.config.run.evaluator

    def rows(table):
        return [(r["task_id"], r["trial"], r["sample_seed"], r["score"], r["status"]) for r in table.to_pylist()]

    grown = Plain("grown", prepared.target, config, 5, False)  # started on an empty cluster
    first, _, first_traces = grown.evaluate(Request(prepared.seed, "test", None, 2, "a"))
    cluster_cpus[0] = 4                                             # four 1-CPU nodes joined
    later, _, later_traces = grown.evaluate(Request(prepared.seed, "test", None, 2, "b"))
    assert {(t["batch"]["cluster_cpus"], t["batch"]["size"]) for t in first_traces} == {(0, 4)}  # 16 as for 1 CPU
    assert {(t["batch"]["cluster_cpus"], t["batch"]["size"]) for t in later_traces} == {(4, 1)}  # ceil(16 / 16)
    assert sorted({t["batch"]["index"] for t in later_traces}) == list(range(16))
    assert all(t["batch"]["sized_at"] <= t["batch"]["returned_at"] for t in first_traces + later_traces)

    fresh = Plain("fresh", prepared.target, config, 5, False)     # the same request, other batches
    again, _, again_traces = fresh.evaluate(Request(prepared.seed, "test", None, 2, "a"))
    assert {t["batch"]["size"] for t in again_traces} == {1}
    assert rows(again) == rows(first) and len(rows(first)) == 16
    assert {r["status"] for r in first.to_pylist() + later.to_pylist()} == {"ok"}
