"""Study: model-bound rollouts through the evaluator, against the ideal and a bare Ray loop.

Each rollout asks a local HTTP "model" on 127.0.0.1 that answers after a fixed latency (0.5 s),
as an agent waiting on its API does, and scores what it got. With ``max_concurrency`` lanes the
ideal wall time is ``ceil(rollouts / lanes) * latency``. A rollout waiting on I/O must not hold a
CPU, so every variant asks for ``num_cpus: 0``:

* the evaluator's own plan (about two Ray tasks per CPU, each running its share of the lanes on
  threads);
* the evaluator with ``batch_size: 1`` (one rollout per Ray task, ``max_concurrency`` tasks);
* a bare ``ray.remote`` loop, one rollout per task, ``max_concurrency`` tasks in flight;
* optionally (``--jailed N``) the evaluator's plan where each rollout also runs a trivial program
  in the bubblewrap jail after its model call: the jail's own CPU cost on this machine.

The server counts requests in flight, so each row also shows the peak it saw (never above the cap).

    unshare -n sh -c 'ip link set lo up && exec .venv/bin/python perf/model_bound.py'
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import shutil
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from benchmarks.table import TableBenchmark, TableParams
from rsi.config import EvaluatorConfig, TargetConfig
from rsi.snapshot import Snapshot
from rsi.target import ProgramTarget, RolloutResult, Target

REPO = Path(__file__).resolve().parents[1]


class SlowModel:
    """A local HTTP endpoint answering each request after ``latency_s``; counts requests in flight."""

    def __init__(self, latency_s: float):
        self.latency_s, self.in_flight, self.peak, self.lock = latency_s, 0, 0, threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                with owner.lock:
                    owner.in_flight += 1
                    owner.peak = max(owner.peak, owner.in_flight)
                time.sleep(owner.latency_s)
                with owner.lock:
                    owner.in_flight -= 1
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.request_queue_size = 1024
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


def ask_model(url: str, task) -> None:
    with urllib.request.urlopen(f"{url}/?task={task.task_id}", timeout=120) as reply:
        reply.read()


class WaitingTarget(Target):
    """One model call per rollout, nothing else: all of its time is waiting."""

    kind = "waiting"

    def __init__(self, config, benchmark, url: str):
        super().__init__(config, benchmark)
        self.url = url

    def run(self, workdir, task, trial, sample_seed) -> RolloutResult:
        ask_model(self.url, task)
        return RolloutResult(1.0, "ok", 0.0, {})


class WaitingProgramTarget(ProgramTarget):
    """The model call, then the candidate's program in the jail, as an agent harness's end does."""

    def __init__(self, config, benchmark, url: str):
        super().__init__(config, benchmark)
        self.url = url

    def run(self, workdir, task, trial, sample_seed) -> RolloutResult:
        ask_model(self.url, task)
        return super().run(workdir, task, trial, sample_seed)


def bare_one(target, task):
    return target.run(None, task, 0, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rollouts", type=int, default=400)
    ap.add_argument("--lanes", type=int, default=64, help="max_concurrency")
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--jailed", type=int, default=0, help="also run this many rollouts with a jailed program each")
    ap.add_argument(
        "--batch-sizes", default="", help="also the evaluator with these batch_size values (comma-separated)"
    )
    ap.add_argument("--no-per-task", action="store_true", help="skip the one-rollout-per-task variants (slow)")
    args = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    import ray

    from actors.client import EvaluatorClient

    tmp = Path(tempfile.mkdtemp(prefix="rsi-perf-"))
    load0 = os.getloadavg()[0]
    model = SlowModel(args.latency)
    ideal = math.ceil(args.rollouts / args.lanes) * args.latency
    rows = []
    try:
        ids = [f"t{i}" for i in range(args.rollouts)]
        (tmp / "table.yaml").write_text(
            yaml.safe_dump({"splits": {"train": ids}, "scores": {"v0": dict.fromkeys(ids, 1.0)}})
        )
        bench = TableBenchmark(TableParams(name="table", path="table.yaml"), base_dir=tmp)
        demo = REPO / "targets" / "table_demo"
        snap = Snapshot.from_dir(demo)
        cfg = TargetConfig(path=str(demo), entry="solve.py")
        waiting = WaitingTarget(cfg, bench, model.url)
        ray.init(num_cpus=args.cpus, include_dashboard=False, configure_logging=False, log_to_driver=False)
        tasks = bench.split("train")

        def evaluator(name: str, target, **config):
            client = EvaluatorClient.start(
                name, target, EvaluatorConfig(num_cpus=0, max_concurrency=args.lanes, **config), 0, False, None
            )
            return lambda salt: client.evaluate(snap, "train", salt=salt)

        def bare(salt: str):
            ref, remote = ray.put(waiting), ray.remote(bare_one).options(num_cpus=0)
            queue, pending = list(tasks), list[ray.ObjectRef]()
            while queue or pending:
                while queue and len(pending) < args.lanes:
                    pending.append(remote.remote(ref, queue.pop()))
                _, pending = ray.wait(pending, num_returns=1)

        variants = {"evaluator, its own plan (threads per task)": evaluator("plan", waiting)}
        for size in filter(None, args.batch_sizes.split(",")):
            variants[f"evaluator, batch_size {size}"] = evaluator(f"b{size}", waiting, batch_size=int(size))
        if not args.no_per_task:
            variants["evaluator, batch_size 1 (one rollout per task)"] = evaluator("one", waiting, batch_size=1)
            variants["bare ray.remote, one rollout per task"] = bare
        for name, fn in variants.items():
            fn("warm")  # worker processes started, imports done: what a long run sees
            model.peak = 0
            t0 = time.perf_counter()
            fn("timed")
            wall = time.perf_counter() - t0
            rows.append((name, args.rollouts, wall, wall / ideal, model.peak))
        if args.jailed:
            jailed = WaitingProgramTarget(cfg, bench, model.url)
            jailed.check(snap)
            client = EvaluatorClient.start(
                "jailed", jailed, EvaluatorConfig(num_cpus=0, max_concurrency=args.lanes), 0, False, None
            )
            sub = ids[: args.jailed]
            client.evaluate(snap, "train", task_ids=sub, salt="warm")
            model.peak = 0
            t0 = time.perf_counter()
            table = client.evaluate(snap, "train", task_ids=sub, salt="timed")
            wall = time.perf_counter() - t0
            assert set(table["status"].to_pylist()) == {"ok"}, table["status"].to_pylist()
            jailed_ideal = math.ceil(args.jailed / args.lanes) * args.latency
            rows.append(
                ("evaluator's plan + a jailed program per rollout", args.jailed, wall, wall / jailed_ideal, model.peak)
            )
    finally:
        ray.shutdown()
        model.httpd.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)

    print(
        f"machine: {os.cpu_count()} CPUs, load average {load0:.1f} before / {os.getloadavg()[0]:.1f} after; "
        f"local Ray with {args.cpus} CPUs; latency {args.latency} s, max_concurrency {args.lanes}, num_cpus 0"
    )
    print()
    print("| variant | rollouts | wall (s) | x ideal | peak in flight |")
    print("| --- | --- | --- | --- | --- |")
    for name, n, wall, ratio, peak in rows:
        print(f"| {name} | {n} | {wall:.2f} | x{ratio:.2f} | {peak} |")
    print()
    print(f"ideal for {args.rollouts}: ceil({args.rollouts} / {args.lanes}) x {args.latency} s = {ideal:.3f} s")


if __name__ == "__main__":
    main()
