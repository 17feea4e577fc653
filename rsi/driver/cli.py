"""``rsi``: validate, run, resume, new, eval, show, report, ls, compare, export, submit.

A user's mistake is one line on stderr and exit code 2; nothing is started before the input
is known to be good.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rsi.errors import ConfigError, RsiError


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return args.func(args, extra)
    except ConfigError as exc:
        print(f"rsi: error: {exc}", file=sys.stderr)
        return 2
    except RsiError as exc:
        print(f"rsi: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rsi: interrupted; `rsi resume RUN_DIR` continues from the last decision", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rsi", description="Ray-based parallel search for recursive self-improvement")
    sub = p.add_subparsers(dest="command")
    _add_run_commands(sub)
    _add_inspect_commands(sub)
    _add_submit_command(sub)
    return p


def _add_run_commands(sub) -> None:
    """Commands that check, start or continue a run, or measure a target once."""
    pa = sub.add_parser("params", help="an algorithm's parameters: type, default, description")
    pa.add_argument("algorithm", help="a registered algorithm name (darwinx, adas, ahe, meta, evaluate, ...)")
    pa.set_defaults(func=cmd_params)

    v = sub.add_parser("validate", help="check a config (no run directory, no Ray, no model call)")
    v.add_argument("config")
    v.set_defaults(func=cmd_validate)

    r = sub.add_parser("run", help="run an experiment; extra --section.key VALUE pairs override the config")
    r.add_argument("config")
    r.add_argument("--run-dir", help="write the run here instead of <storage>/<name>-<timestamp>")
    r.set_defaults(func=cmd_run)

    rs = sub.add_parser("resume", help="continue a run that was stopped or killed")
    rs.add_argument("run_dir")
    rs.add_argument(
        "--allow-changed",
        action="store_true",
        help="resume although the benchmark, harness or target limits changed (re-executes their rollouts)",
    )
    rs.set_defaults(func=cmd_resume)

    n = sub.add_parser("new", help="scaffold a runnable problem directory (problem.py, seed/, config.yaml)")
    n.add_argument("name", help="the directory to create")
    n.set_defaults(func=cmd_new)

    e = sub.add_parser("eval", help="measure one target directory on a benchmark")
    e.add_argument("target_dir")
    e.add_argument("--benchmark", required=True)
    e.add_argument("--split", default="test", choices=["train", "dev", "test"])
    e.add_argument("--kind", default="program", help="target kind (default program)")
    e.add_argument("--entry", default=None, help="entry script for program targets without a harness")
    e.add_argument("--json", dest="json_out", help="also write the results as JSON here")
    e.set_defaults(func=cmd_eval)


def _add_inspect_commands(sub) -> None:
    """Commands that read a finished or running run: show, report, ls, compare, export."""
    s = sub.add_parser("show", help="summary and decisions of a run")
    s.add_argument("run_dir")
    sv = s.add_mutually_exclusive_group()
    sv.add_argument(
        "--diff", metavar="SNAPSHOT", help="the unified diff of a snapshot (id or unique prefix) against its parent"
    )
    sv.add_argument("--lineage", action="store_true", help="the lineage of every candidate as a text tree")
    s.set_defaults(func=cmd_show)

    rp = sub.add_parser("report", help="one self-contained HTML report of a run (figures also as PNGs beside it)")
    rp.add_argument("run_dir")
    rp.add_argument("--out", default="report.html", help="the HTML file to write (default report.html)")
    rp.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="also write the decisions' figures as TensorBoard scalars under DIR/<run name>/",
    )
    rp.set_defaults(func=cmd_report)

    ls = sub.add_parser("ls", help="list the runs in a storage directory")
    ls.add_argument("storage", nargs="?", default="runs", help="local path or pyarrow.fs URI (default ./runs)")
    ls.add_argument(
        "--active-s",
        type=float,
        default=600.0,
        help="an unfinished run written to within this many seconds is listed as running (default 600)",
    )
    ls.add_argument("--json", action="store_true", help="the rows as JSON")
    ls.set_defaults(func=cmd_ls)

    cp = sub.add_parser("compare", help="side-by-side results of runs, and their curves in one plot")
    cp.add_argument("run_dirs", nargs="+")
    cp.add_argument("--plot", default="compare.png", help="where to write the curve plot (default compare.png)")
    cp.set_defaults(func=cmd_compare)

    x = sub.add_parser("export", help="write a snapshot's files to a directory")
    x.add_argument("run_dir")
    g = x.add_mutually_exclusive_group(required=True)
    g.add_argument("--best", action="store_true", help="the promoted snapshot of summary.json")
    g.add_argument("--snapshot", help="a snapshot id")
    x.add_argument("dest")
    x.set_defaults(func=cmd_export)


def _add_submit_command(sub) -> None:
    sb = sub.add_parser("submit", help="submit a run as a Ray job to a cluster")
    sb.add_argument("config", nargs="?", help="the run's config (omit with --resume)")
    sb.add_argument("--resume", metavar="RUN_DIR", help="submit `rsi resume RUN_DIR` instead of a new run")
    sb.add_argument(
        "--working-dir",
        help="with --resume: the directory the run's config paths resolve against (default: the current directory)",
    )
    sb.add_argument("--address", required=True, help="the cluster's job server, e.g. http://HEAD:8265")
    sb.add_argument("--run-dir")
    sb.add_argument("--allow-changed", action="store_true", help="with --resume: as `rsi resume --allow-changed`")
    sb.add_argument("--no-wait", action="store_true", help="return after submission instead of streaming logs")
    sb.set_defaults(func=cmd_submit)


def _overrides(extra: list[str]):
    from rsi.config import parse_overrides

    return parse_overrides(extra)


def _no_extra(extra: list[str]) -> None:
    if extra:
        raise ConfigError(f"unexpected arguments: {' '.join(extra)}")


def cmd_params(args, extra) -> int:
    _no_extra(extra)
    from rsi.params import params_rows

    print(f"algorithm {args.algorithm}: parameters (set as algorithm.<parameter> in a config)")
    for row in params_rows(args.algorithm):
        bounds = f"  [{row['range']}]" if row["range"] else ""
        print(f"\n  {row['parameter']}: {row['type']} = {row['default']}{bounds}")
        if row["description"]:
            print(f"      {row['description']}")
    return 0


def cmd_validate(args, extra) -> int:
    from rsi.config import load_config
    from rsi.driver.runner import prepare

    prepared = prepare(load_config(args.config, _overrides(extra)))
    cfg = prepared.config
    print(
        f"{args.config}: ok — algorithm {cfg.algo_params.name}, benchmark {cfg.bench_params.name}, "
        f"target {cfg.run.target.path} ({len(prepared.seed.files)} files, snapshot {prepared.seed.snapshot_id})"
    )
    return 0


def cmd_run(args, extra) -> int:
    from rsi.driver.runner import start_run
    from rsi.report import print_summary

    run = start_run(args.config, _overrides(extra), args.run_dir)
    summary = run.execute()
    print_summary(summary)
    return 0


def cmd_resume(args, extra) -> int:
    _no_extra(extra)
    from rsi.driver.resume import resume_run
    from rsi.report import print_summary

    summary = resume_run(args.run_dir, args.allow_changed)
    print_summary(summary)
    return 0


def cmd_new(args, extra) -> int:
    _no_extra(extra)
    from rsi.scaffold import scaffold

    dest = scaffold(args.name)
    print(f"created {dest}/: problem.py (tasks, score), seed/ (the program to evolve), config.yaml")
    print(f"run it:  rsi run {dest}/config.yaml")
    return 0


def cmd_eval(args, extra) -> int:
    from rsi.driver.evaluate import evaluate_target

    result = evaluate_target(args.target_dir, args.benchmark, args.split, args.kind, args.entry, _overrides(extra))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2))
    return 0


def cmd_show(args, extra) -> int:
    _no_extra(extra)
    if args.diff or args.lineage:
        from rsi.reporting.data import RunView
        from rsi.reporting.text import lineage_text, snapshot_diff

        view = RunView(args.run_dir)
        sys.stdout.write(snapshot_diff(view, view.resolve_snapshot(args.diff)) if args.diff else lineage_text(view))
        return 0
    from rsi.report import show_run

    show_run(args.run_dir)
    return 0


def cmd_report(args, extra) -> int:
    _no_extra(extra)
    from rsi.reporting.html import build_report

    result = build_report(args.run_dir, args.out)
    print(
        f"report: {result['html']} ({result['status']} run; figures: {', '.join(result['figures'].values()) or 'none'})"
    )
    for note in result["notes"]:
        print(f"note: {note}", file=sys.stderr)
    if args.tensorboard:
        from rsi.reporting.tensorboard import export_run

        path, n = export_run(args.run_dir, args.tensorboard)
        print(f"tensorboard: {n} scalars in {path} (tensorboard --logdir {args.tensorboard})")
    return 0


def cmd_ls(args, extra) -> int:
    _no_extra(extra)
    from rsi.runs import format_ls, list_runs, ls_json

    rows = list_runs(args.storage, active_s=args.active_s)
    sys.stdout.write(ls_json(rows) + "\n" if args.json else format_ls(rows))
    return 0


def cmd_compare(args, extra) -> int:
    _no_extra(extra)
    from rsi.runs import compare

    text, plot = compare(args.run_dirs, args.plot)
    sys.stdout.write(text)
    if plot:
        print(f"curves: {plot}")
    return 0


def cmd_export(args, extra) -> int:
    _no_extra(extra)
    from rsi.records import RunRecords

    records = RunRecords.open(args.run_dir)
    if args.best:
        if not records.exists("summary.json"):
            raise ConfigError(f"{args.run_dir}: no summary.json (the run has not finished); use --snapshot ID")
        snapshot_id = records.read_json("summary.json")["snapshot_id"]
    else:
        snapshot_id = args.snapshot
    dest = Path(args.dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ConfigError(f"{dest} exists and is not an empty directory")
    snapshot = records.get_snapshot(snapshot_id)  # checked: every path stays inside dest
    snapshot.materialize(dest)
    print(f"exported snapshot {snapshot_id} to {dest}")
    return 0


def cmd_submit(args, extra) -> int:
    from cluster.submit import submit, submit_resume

    if args.resume:
        if args.config or args.run_dir or extra:
            raise ConfigError(
                "rsi submit --resume RUN_DIR takes no config, --run-dir or overrides: the run's own "
                "config is resumed as it was"
            )
        return submit_resume(
            args.resume, args.address, args.working_dir, wait=not args.no_wait, allow_changed=args.allow_changed
        )
    if not args.config:
        raise ConfigError("rsi submit: give a config, or --resume RUN_DIR")
    if args.allow_changed:
        raise ConfigError("--allow-changed goes with --resume: a new run has nothing stored to re-execute")
    if args.working_dir:
        raise ConfigError("--working-dir goes with --resume; a new run ships its config's directory")
    return submit(args.config, args.address, _overrides(extra), args.run_dir, wait=not args.no_wait)


if __name__ == "__main__":
    sys.exit(main())
