"""One config system: YAML -> pydantic models with ``extra="forbid"``, dotted CLI overrides.

Validation happens here, all of it, before any run directory, Ray start or model call: the
run-level keys, the benchmark's and algorithm's own parameter models (looked up in the
registry), the worker's model, literal credentials, and unset credential variables.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rsi.errors import ConfigError
from rsi.untrusted import MAX_BYTES

# Values that look like a credential written into the file instead of named by variable.
_KEY_PATTERNS = [
    re.compile(r"^sk-[A-Za-z0-9_\-]{12,}$"),
    re.compile(r"^sk-ant-[A-Za-z0-9_\-]{8,}$"),
    re.compile(r"^AKIA[0-9A-Z]{16}$"),
    re.compile(r"^(ghp|gho|github_pat|xox[bap]|hf)_[A-Za-z0-9_]{16,}$"),
    re.compile(r"^AIza[0-9A-Za-z_\-]{30,}$"),
]
_SECRET_KEY_NAMES = re.compile(r"(^|_)(api_?key|secret|token|password)$", re.I)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class RayConfig(Strict):
    address: str = Field("local", description="local (start Ray in-process), auto, or a head/ray:// address")
    num_cpus: int | None = Field(None, ge=1, description="CPUs for a local Ray (default: the machine's)")
    namespace: str = Field("rsi", description="Ray namespace; named actors of a run live here")


class LimitsConfig(Strict):
    """The rollout sandbox: how candidate code is contained (``backend``) and what one rollout may use."""

    backend: Literal["auto", "bwrap", "docker", "process"] = Field(
        "auto",
        description="auto: the bubblewrap jail on Linux (namespaces, no network, no capabilities); "
        "docker: the same jail as a container of this machine's Docker engine; "
        "process: rlimits and a scrubbed environment only — candidates are NOT contained (explicit opt-in)",
    )
    tmpfs_mb: int = Field(64, ge=1, le=65536, description="size of each of the jail's private /tmp and /dev/shm")
    open_files: int = Field(256, ge=16, le=65536, description="open files a rollout process may hold")
    timeout_s: float = Field(60.0, gt=0, le=86400, description="wall-clock limit of one rollout (at most a day)")
    cpu_s: int | None = Field(
        None, ge=1, le=604800, description="CPU seconds, all threads together (default: timeout + 1; at most a week)"
    )
    memory_mb: int = Field(
        2048, ge=64, le=1048576, description="address-space limit of the rollout process (at most 1 TiB)"
    )
    max_procs: int = Field(64, ge=1, le=4096, description="processes/threads a rollout may create (at most 4096)")
    file_size_mb: int = Field(64, ge=1, le=65536, description="largest file a rollout may write (at most 64 GiB)")
    stdout_max_bytes: int = Field(
        8 * 1024 * 1024,
        ge=1024,
        le=MAX_BYTES,
        description=f"stdout cap; over it: protocol_error (at most {MAX_BYTES} bytes)",
    )


class TargetConfig(Strict):
    path: str = Field(description="target directory (with components.yaml)")
    kind: str = Field("program", description="program | miniagent | policy")
    entry: str | None = Field(None, description="entry script inside the target (program kinds)")
    evolve_scope: list[str] | str = Field("*", description="components a worker may change; * = all")
    deterministic: bool = Field(
        False, description="true: repeated measurements reuse rollout rows (no fresh sample seeds)"
    )
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    env_pass: list[str] = Field(default_factory=list, description="env variables passed into rollouts by name")
    model: dict[str, Any] | None = Field(None, description="the target's own model (miniagent): an llm block")


class EvaluatorConfig(Strict):
    num_cpus: float = Field(
        1.0, ge=0, le=1024, description="CPUs per rollout task (0 or a fraction for model-bound work; at most 1024)"
    )
    resources: dict[str, float] = Field(default_factory=dict, description="custom resources per rollout task")
    max_concurrency: int | None = Field(
        None,
        ge=1,
        description="rollouts in flight at once (model rate limits). With num_cpus < 1 (model-bound work) "
        "each Ray task runs several waiting rollouts at once on threads, within this cap",
    )
    batch_size: int | None = Field(None, ge=1, description="rollouts per remote task (default: automatic)")
    max_retries: int = Field(3, ge=0, description="retries of a rollout task lost to infrastructure failure")


class BudgetConfig(Strict):
    max_cost_usd: float | None = Field(
        None,
        gt=0,
        description="stop new proposals at this model spend: the "
        "workers' calls plus agent rollouts' calls through their model proxy",
    )
    max_calls: int | None = Field(None, ge=1, description="stop new proposals after this many model calls")


class RunConfig(Strict):
    name: str = Field("run", pattern=r"^[A-Za-z0-9_.\-]+$", description="run directory prefix")
    seed: int = Field(42, description="seed of every random choice the run makes")
    storage: str = Field("runs", description="local path or pyarrow.fs URI (s3://, gs://, file://)")
    ray: RayConfig = Field(default_factory=RayConfig)
    target: TargetConfig
    benchmark: dict[str, Any]
    algorithm: dict[str, Any]
    evaluator: EvaluatorConfig = Field(default_factory=EvaluatorConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    tracker: Literal["none", "tensorboard"] = Field(
        "none",
        description="live experiment tracking: tensorboard writes each decision's figures as TensorBoard "
        "scalars under <run dir>/tensorboard as they are decided (no server, no extra package; local storage)",
    )


class Resolved:
    """A validated config with its parts built: what the runner consumes."""

    def __init__(self, raw: dict, run: RunConfig, bench_params, algo_cls, algo_params, worker_cfg, base_dir: Path):
        self.raw = raw
        self.run = run
        self.bench_params = bench_params
        self.algo_cls = algo_cls
        self.algo_params = algo_params
        self.worker_cfg = worker_cfg
        self.base_dir = base_dir

    @property
    def secret_env_names(self) -> list[str]:
        return sorted(set(_find_values(self.raw, "api_key_env")))

    def secrets(self) -> list[str]:
        return [os.environ[n] for n in self.secret_env_names if os.environ.get(n)]

    def storage(self) -> str:
        """Where runs go: a URI as written, a local path relative to the config's directory."""
        storage = self.run.storage
        if "://" in storage or Path(storage).expanduser().is_absolute():
            return storage
        return str(self.base_dir / Path(storage).expanduser())

    def target_dir(self) -> Path:
        return resolve_path(self.run.target.path, self.base_dir)

    def redacted(self) -> dict:
        return redact(self.raw, self.secrets())


# ---- loading ---------------------------------------------------------------------------------
#: Nodes a config may hold once its aliases are expanded. A config is a few hundred; a file
#: of nested aliases (a "billion laughs") expands exponentially and is refused before it is.
MAX_YAML_NODES = 100_000


def read_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start]
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{bad:02x} at offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return load_yaml(text, str(path)) or {}
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: YAML syntax error: {_one_line(exc.problem or exc.context)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: YAML error: {_one_line(exc)}") from None


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load`` that refuses a document whose aliases expand past ``MAX_YAML_NODES``
    nodes, or refer to themselves, before building it (ConfigError naming ``where``)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, where)
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError(f"{where}: YAML nested too deeply") from None
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node, where: str) -> None:
    """Count the nodes of the document as if every alias were a copy (each distinct node once,
    memoised, iteratively): linear in the file, however much it would expand."""

    def children(node):
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return node.value if isinstance(node, yaml.SequenceNode) else []

    sizes: dict[int, int] = {}
    started: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            started.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children(node))
            if sizes[key] > MAX_YAML_NODES:
                raise ConfigError(f"{where}: YAML aliases expand to more than {MAX_YAML_NODES} nodes")
        elif key not in sizes:
            if key in started:
                raise ConfigError(f"{where}: YAML alias refers to a node that contains it (a recursive structure)")
            started.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in children(node) if id(c) not in sizes)


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def apply_overrides(raw: dict, overrides: Iterable[tuple[str, str]]) -> dict:
    """``("algorithm.max_steps", "2")`` sets raw["algorithm"]["max_steps"] = 2 (YAML scalar)."""
    raw = copy.deepcopy(raw)
    for dotted, text in overrides:
        keys = dotted.split(".")
        node = raw
        for k in keys[:-1]:
            if not isinstance(node.setdefault(k, {}), dict):
                raise ConfigError(f"override --{dotted}: {k} is not a mapping")
            node = node[k]
        try:
            node[keys[-1]] = load_yaml(text, f"override --{dotted}")
        except yaml.YAMLError:
            raise ConfigError(f"override --{dotted}: {text!r} is not a YAML scalar") from None
    return raw


def parse_overrides(args: list[str]) -> list[tuple[str, str]]:
    """``["--algorithm.max_steps", "2", "--a.b=3"]`` -> pairs; anything else is an error."""
    out, i = [], 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) < 3:
            raise ConfigError(f"unexpected argument {arg!r}; overrides look like --section.key VALUE")
        if "=" in arg:
            key, _, value = arg[2:].partition("=")
            i += 1
        else:
            if i + 1 >= len(args):
                raise ConfigError(f"override {arg} has no value")
            key, value = arg[2:], args[i + 1]
            i += 2
        out.append((key, value))
    return out


def load_config(path: str | Path, overrides: Iterable[tuple[str, str]] = (), raw: dict | None = None) -> Resolved:
    path = Path(path)
    if raw is None:
        raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    raw = apply_overrides(raw, overrides)
    where = str(path)
    check_literal_secrets(raw, where)
    check_finite(raw, where)
    run = validate_model(RunConfig, raw, where, "")
    check_local_cpus(run, where)
    base_dir = path.parent.resolve() if path.name else Path.cwd()
    base_dir = _project_root(base_dir)

    from rsi.registry import algorithm_class, benchmark_class, problem_ref

    if "problem" in run.benchmark and "name" not in run.benchmark:  # bring your own problem
        run.benchmark = {"name": "problem", **run.benchmark}
    if "problem" not in run.benchmark:  # a problem module registered under a short name
        ref = _registry_call(problem_ref, run.benchmark.get("name"), where, "benchmark.name")
        if ref is not None:
            run.benchmark = {**run.benchmark, "problem": ref}
    bench_cls = _registry_call(benchmark_class, run.benchmark.get("name"), where, "benchmark.name")
    bench_params = validate_model(bench_cls.Params, run.benchmark, where, "benchmark")
    algo_cls = _registry_call(algorithm_class, run.algorithm.get("name"), where, "algorithm.name")
    algo_raw = {k: v for k, v in run.algorithm.items() if k != "worker"}
    algo_params = validate_model(algo_cls.Params, algo_raw, where, "algorithm")
    worker_cfg = None
    if "worker" in run.algorithm and run.algorithm["worker"] is not None:
        worker_cfg = validate_worker(run.algorithm["worker"], where)
    for prefix, params in (("benchmark", bench_params), ("algorithm", algo_params), ("algorithm.worker", worker_cfg)):
        if params is not None:  # a string such as "1e999" becomes inf only in validation
            check_finite(params.model_dump(), where, prefix)
    check_credentials_set(raw, where)
    resolved = Resolved(raw, run, bench_params, algo_cls, algo_params, worker_cfg, base_dir)
    algo_cls.check_config(resolved)
    return resolved


def check_finite(raw: Any, where: str, prefix: str = "") -> None:
    """Every number in a config is finite: ``.inf``/``.nan`` (or a float literal past the float
    range) would otherwise reach timeouts, budgets and statistics."""
    for p, v in _walk(raw, prefix):
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{where}: {p}: must be a finite number (got {v!r})")


def check_local_cpus(run: RunConfig, where: str) -> None:
    """A rollout asking for more CPUs than a local Ray has would wait forever, never start."""
    if run.ray.address != "local":
        return  # a cluster's size is known only once connected (and an autoscaler may grow it)
    total = run.ray.num_cpus or os.cpu_count() or 1
    if run.evaluator.num_cpus > total:
        raise ConfigError(
            f"{where}: evaluator.num_cpus: each rollout asks for {run.evaluator.num_cpus:g} CPUs but "
            f"the local Ray has {total} (ray.num_cpus, or this machine's CPUs); no rollout could start"
        )


def _project_root(config_dir: Path) -> Path:
    """Relative paths in a config resolve against the directory holding it, except for the
    shipped ``configs/`` folder whose paths are written relative to the repository root."""
    if config_dir.name == "configs" and (config_dir.parent / "pyproject.toml").exists():
        return config_dir.parent
    return config_dir


def resolve_path(p: str, base_dir: Path) -> Path:
    path = Path(p).expanduser()
    if path.is_absolute():
        return path
    cwd_path = Path.cwd() / path
    return (base_dir / path) if (base_dir / path).exists() or not cwd_path.exists() else cwd_path


def _registry_call(fn, name, where, key):
    if name is None:
        raise ConfigError(f"{where}: {key} is required")
    try:
        return fn(name)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {key}: {exc}") from None


def validate_worker(data: Any, where: str):
    from rsi.workers import worker_class

    if not isinstance(data, dict) or "type" not in data:
        raise ConfigError(f"{where}: algorithm.worker needs a type (scripted, mutator, llm, agent, claude_code)")
    cls = _registry_call(worker_class, data["type"], where, "algorithm.worker.type")
    return validate_model(cls.Config, data, where, "algorithm.worker")


def validate_model(model: type[BaseModel], data: Any, where: str, prefix: str):
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, model, where, prefix)) from None


def format_validation_error(exc: ValidationError, model: type[BaseModel], where: str, prefix: str) -> str:
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    dotted = ".".join(([prefix] if prefix else []) + loc) or "(top level)"
    if err["type"] == "extra_forbidden":
        valid = _fields_at(model, loc[:-1])
        close = difflib.get_close_matches(loc[-1], valid, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"{where}: unknown key {dotted!r}; {hint}valid keys: {', '.join(valid)}"
    if err["type"] == "missing":
        return f"{where}: {dotted}: required key is missing"
    got = err.get("input")
    shown = "" if isinstance(got, (dict, list)) else f" (got {got!r})"
    return f"{where}: {dotted}: {err['msg']}{shown}"


def _fields_at(model: type[BaseModel], loc: list[str]) -> list[str]:
    for part in loc:
        field = model.model_fields.get(part)
        ann = getattr(field, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return list(model.model_fields)


# ---- credentials -------------------------------------------------------------------------------
def _walk(node: Any, path: str = ""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")
    else:
        yield path, node


def _find_values(raw: Any, key_name: str) -> list[str]:
    return [v for p, v in _walk(raw) if p.split(".")[-1] == key_name and isinstance(v, str)]


def check_literal_secrets(raw: dict, where: str) -> None:
    for path, value in _walk(raw):
        name = path.split(".")[-1]
        literal = isinstance(value, str) and any(p.match(value) for p in _KEY_PATTERNS)
        named_key = bool(_SECRET_KEY_NAMES.search(name)) and not name.endswith("_env") and value not in (None, "")
        if literal or named_key:
            raise ConfigError(
                f"{where}: {path}: an API key is written literally in the config; put it in an environment "
                f"variable and name that variable with api_key_env"
            )


def check_credentials_set(raw: dict, where: str) -> None:
    for path, value in _walk(raw):
        if path.split(".")[-1] == "api_key_env" and value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(value)):
                raise ConfigError(f"{where}: {path}: {value!r} is not an environment variable name")
            if not os.environ.get(value):
                raise ConfigError(f"{where}: {path}: environment variable {value} is not set")


def redact(node: Any, secrets: Iterable[str]) -> Any:
    secrets = [s for s in secrets if s]
    if isinstance(node, dict):
        return {
            k: (
                "<redacted>" if _SECRET_KEY_NAMES.search(str(k)) and not str(k).endswith("_env") else redact(v, secrets)
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [redact(v, secrets) for v in node]
    if isinstance(node, str):
        for s in secrets:
            node = node.replace(s, "<redacted>")
    return node
