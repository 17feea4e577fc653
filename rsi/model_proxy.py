"""The model proxy: how a jailed rollout reaches its model without holding the key.

A rollout's jail has no network (``rsi.jail``), and nothing a candidate holds may be worth
stealing. So around each rollout, in the trusted process that runs it, a ``ModelProxy``
listens on a Unix socket in a fresh private directory, and only that directory is bound into
that one jail (``binds`` of ``rsi.sandbox.run_program``). The proxy holds the real endpoint and
key (read from the variable ``api_key_env`` names, never passed into the jail); the candidate
gets a per-rollout random token instead, which dies with the proxy.

What it forwards: ``POST .../chat/completions`` bearing ``Authorization: Bearer <token>``, for
the configured model, nothing else (wrong or missing token: 401; another path or method: 404;
another model or ``n`` > 1: 403). Before forwarding it caps the reply length at the config's
``max_tokens`` and, for a streamed call, asks the endpoint for its usage. The request goes out
with the real key; the reply comes back as the endpoint sent it, with the key masked should it
appear.

Usage is counted here, from the endpoint's own ``usage`` of each reply (JSON or the usage chunk
of a stream), never from what the candidate prints; cost is priced from the config's ``prices``.
A call whose reply carries no usage (or that was cut off) is charged an estimate: its request
size in tokens (bytes / 3) and its whole reply cap. Per rollout the config caps calls
(``rollout_max_calls``), tokens (``rollout_max_tokens``) and cost (``rollout_max_cost_usd``):
a call is refused with 429 (and ``x-should-retry: false``, so the SDK does not retry) once any
is reached. A call is only checked before it goes out, so the last call may end past a token or
cost cap by its own size; calls in flight count at their estimate until they settle.

Bounds: request bodies up to ``MAX_REQUEST_BYTES``, replies up to ``MAX_RESPONSE_BYTES`` (over:
502), ``MAX_CONNECTIONS`` at once (more are closed unanswered), ``CLIENT_TIMEOUT_S`` per read
from the jail, the config's ``timeout_s`` per upstream call. One request per connection.

    with ModelProxy(cfg) as proxy:
        run_program(..., env=proxy.env(jailed=True), binds=proxy.binds)
        spent = proxy.usage()
"""

from __future__ import annotations

import hmac
import importlib
import json
import os
import secrets
import shutil
import socketserver
import tempfile
import threading
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from rsi import untrusted
from rsi.errors import ConfigError, RsiError
from rsi.llm.config import LLMConfig

JAIL_DIR = "/run/rsi-model"  # where the socket's directory appears inside the jail
JAIL_BASE_URL = "http://rsi-model/v1"  # the host part is never resolved: the transport is the socket
TOKEN_ENV = "RSI_MODEL_API_KEY"
ENDPOINT = "/chat/completions"

MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
MAX_CONNECTIONS = 16
CLIENT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ProxyUsage:
    """What one rollout spent, as the proxy counted it."""

    calls: int = 0  # forwarded to the endpoint
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    estimated: int = 0  # calls charged at the estimate (no usage in the reply, cut off, in flight)
    refused: int = 0  # calls refused by a cap (429)
    denied: int = 0  # requests refused otherwise (token, path, model)

    def as_dict(self) -> dict:
        return asdict(self)


def _httpx() -> Any:
    # By name: which of the two a machine has depends on its openai release, so neither is a
    # static import a type checker could resolve everywhere.
    try:
        return importlib.import_module("httpx")
    except ImportError:  # some openai releases ship it as httpx2
        return importlib.import_module("httpx2")


class ModelProxy:
    """One rollout's proxy (see the module docstring). A context manager: the socket, its
    directory and the token exist between ``__enter__`` and ``__exit__``."""

    def __init__(self, cfg: LLMConfig):
        from rsi.llm import DEFAULT_BASE_URLS

        base_url = cfg.base_url or DEFAULT_BASE_URLS.get(cfg.provider)
        if not base_url:
            raise ConfigError("provider local: start the model first (rsi.llm.serve(cfg)) and proxy the served config")
        self.cfg = cfg
        self.upstream = base_url.rstrip("/") + ENDPOINT
        self.token = secrets.token_urlsafe(32)
        self.socket_dir: str | None = None
        self.socket_name = f"model-{secrets.token_hex(8)}.sock"
        self._key = cfg.api_key()
        self._lock = threading.Lock()
        self._count = {"calls": 0, "tokens_in": 0, "tokens_out": 0, "estimated": 0, "refused": 0, "denied": 0}
        self._pending: dict[int, tuple[int, int]] = {}  # in-flight call -> its estimate
        self._live = False
        self._server: _Server | None = None
        self._client = None

    # ---- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> ModelProxy:
        parent = "/tmp" if os.path.isdir("/tmp") and os.access("/tmp", os.W_OK | os.X_OK) else None
        self.socket_dir = tempfile.mkdtemp(prefix="rsi-model-", dir=parent)
        try:
            # 0711: a root caller's rollout runs as its own slot uid, which must reach the socket
            # by its (random) name but can neither list nor change the directory
            os.chmod(self.socket_dir, 0o711)
            if len(self.socket_path.encode()) > 100:
                raise RsiError(f"model proxy socket path too long for AF_UNIX: {self.socket_path}")
            httpx = _httpx()
            timeout = httpx.Timeout(self.cfg.timeout_s, connect=min(self.cfg.timeout_s, 30.0))
            self._client = httpx.Client(timeout=timeout, follow_redirects=False)
            handler = type("Handler", (_Handler,), {"proxy": self})
            self._server = _Server(self.socket_path, handler)
            os.chmod(self.socket_path, 0o666)  # the token, not the mode, is the credential
            self._live = True
            threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="rsi-model-proxy", daemon=True
            ).start()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._close()

    def _close(self) -> None:
        self._live = False  # the token is refused from here on, even by a handler mid-request
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._client is not None:
            self._client.close()  # cuts calls still in flight; they keep their estimate
            self._client = None
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)

    # ---- what the rollout is given -----------------------------------------------------------
    @property
    def socket_path(self) -> str:
        return os.path.join(self.socket_dir or "", self.socket_name)

    @property
    def binds(self) -> dict[str, str]:
        """For ``run_program``: the socket's directory, bound into the jail at ``JAIL_DIR``."""
        if self.socket_dir is None:
            raise RsiError("the model proxy has no socket before it is started")
        return {self.socket_dir: JAIL_DIR}

    def env(self, jailed: bool = True) -> dict[str, str]:
        """The harness's model environment (targets/miniagent/runtime/README.md): the socket as
        the jail sees it (``jailed``) or as it lies on this machine (the process backend), the
        token as the key, and the model settings. Never the key itself."""
        from rsi.llm import miniagent_env

        env = miniagent_env(self.cfg)
        env.update(
            {
                "RSI_MODEL_SOCKET": f"{JAIL_DIR}/{self.socket_name}" if jailed else self.socket_path,
                "RSI_MODEL_BASE_URL": JAIL_BASE_URL,
                "RSI_MODEL_API_KEY_ENV": TOKEN_ENV,
                TOKEN_ENV: self.token,
            }
        )
        return env

    def usage(self) -> ProxyUsage:
        """Spent so far: settled calls at their reported usage, calls in flight at their estimate."""
        with self._lock:
            return self._usage_locked()

    def _usage_locked(self) -> ProxyUsage:
        c, pending = self._count, self._pending.values()
        tin = c["tokens_in"] + sum(e[0] for e in pending)
        tout = c["tokens_out"] + sum(e[1] for e in pending)
        return ProxyUsage(
            c["calls"], tin, tout, self.cfg.cost(tin, tout), c["estimated"] + len(pending), c["refused"], c["denied"]
        )

    # ---- the one call it forwards ------------------------------------------------------------
    def _over_cap(self, spent: ProxyUsage) -> str | None:
        cfg = self.cfg
        if cfg.rollout_max_calls is not None and spent.calls >= cfg.rollout_max_calls:
            return f"{spent.calls} of rollout_max_calls={cfg.rollout_max_calls} calls made"
        tokens = spent.tokens_in + spent.tokens_out
        if cfg.rollout_max_tokens is not None and tokens >= cfg.rollout_max_tokens:
            return f"{tokens} of rollout_max_tokens={cfg.rollout_max_tokens} tokens spent"
        if cfg.rollout_max_cost_usd is not None and spent.cost_usd >= cfg.rollout_max_cost_usd:
            return f"${spent.cost_usd:.6f} of rollout_max_cost_usd={cfg.rollout_max_cost_usd:g} spent"
        return None

    def _reserve(self, estimate: tuple[int, int]) -> int | str:
        """A call id, or why the caps refuse the call."""
        with self._lock:
            spent = self._usage_locked()
            why = self._over_cap(spent)
            if why is not None:
                self._count["refused"] += 1
                return why
            self._count["calls"] += 1
            call = self._count["calls"]
            self._pending[call] = estimate
            return call

    def _settle(self, call: int, used: tuple[int, int] | None) -> None:
        """Replace a call's estimate by what the endpoint reported (None: keep the estimate)."""
        with self._lock:
            estimate = self._pending.pop(call, (0, 0))
            tin, tout = used if used is not None else estimate
            self._count["tokens_in"] += tin
            self._count["tokens_out"] += tout
            if used is None:
                self._count["estimated"] += 1

    def _deny(self) -> None:
        with self._lock:
            self._count["denied"] += 1

    def _authorized(self, header: str | None) -> bool:
        scheme, _, given = (header or "").strip().partition(" ")
        return (
            self._live
            and scheme.lower() == "bearer"
            and hmac.compare_digest(given.strip().encode(), self.token.encode())
        )

    def _prepare(self, body: dict) -> str | None:
        """Pin the request to what this rollout may spend; why it is refused, or None."""
        cfg = self.cfg
        if body.get("model") != cfg.model:
            return f"model {untrusted.show(body.get('model'))} is not this rollout's model ({cfg.model})"
        if body.get("n") not in (None, 1):
            return "n must be 1"
        capped = False
        for name in ("max_tokens", "max_completion_tokens"):
            if name in body:
                value = body[name]
                if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= cfg.max_tokens:
                    body[name] = cfg.max_tokens
                capped = True
        if not capped:
            body["max_tokens"] = cfg.max_tokens
        if body.get("stream") is True:
            options = body.get("stream_options")
            body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return None

    def _forward(self, data: bytes) -> tuple[int, bytes, dict[str, str], tuple[int, int] | None]:
        """(status, body, headers to relay, usage reported). Raises the client's errors."""
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "authorization": f"Bearer {self._key}",
        }
        client = self._client
        if client is None:
            raise RuntimeError("the model proxy is closed")
        with client.stream("POST", self.upstream, content=data, headers=headers) as resp:
            chunks, size = [], 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise _TooLarge()
                chunks.append(chunk)
            body = b"".join(chunks)
            relay = {k: resp.headers[k] for k in ("content-type", "retry-after") if k in resp.headers}
            status = resp.status_code
        if len(self._key) >= 8:
            body = body.replace(self._key.encode(), b"[redacted]")
        return status, body, relay, _reported_usage(body) if 200 <= status < 300 else (0, 0)


class _TooLarge(Exception):
    pass


def _reported_usage(body: bytes) -> tuple[int, int] | None:
    """(prompt, completion) tokens the endpoint reported in a reply (JSON, or the last usage of
    a server-sent-event stream); None when it reported none that reads as counts."""
    found: tuple[int, int] | None = None
    try:
        docs = [untrusted.loads(body)]
    except untrusted.Invalid:
        docs = []
        for line in body.splitlines():
            line = line.strip()
            if line.startswith(b"data:") and line[5:].strip() not in (b"", b"[DONE]"):
                try:
                    docs.append(untrusted.loads(line[5:]))
                except untrusted.Invalid:
                    continue
    for doc in docs:
        usage = doc.get("usage") if isinstance(doc, dict) else None
        if isinstance(usage, dict):
            try:
                found = (
                    untrusted.nonneg_int(usage.get("prompt_tokens"), "prompt_tokens", untrusted.MAX_TOKENS),
                    untrusted.nonneg_int(usage.get("completion_tokens"), "completion_tokens", untrusted.MAX_TOKENS),
                )
            except untrusted.Invalid:
                continue
    return found


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str, handler):
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(path, handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):  # a flood: close it unanswered
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Handler(BaseHTTPRequestHandler):
    proxy: ModelProxy
    protocol_version = "HTTP/1.0"  # one request per connection: no idle connection holds a thread
    timeout = CLIENT_TIMEOUT_S
    server_version = "rsi-model-proxy"
    sys_version = ""

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        proxy = self.proxy
        if self.headers.get("transfer-encoding"):
            return self._refuse(411, "send a content-length, not a chunked body")
        try:
            length = int(self.headers.get("content-length") or "")
        except ValueError:
            return self._refuse(411, "content-length required")
        if not 0 < length <= MAX_REQUEST_BYTES:
            return self._refuse(413, f"request body must be 1 to {MAX_REQUEST_BYTES} bytes")
        try:  # read before any answer: a client still sending would see a broken pipe, not the answer
            raw = self.rfile.read(length)
        except OSError:  # timed out or gone mid-body
            return
        if not proxy._authorized(self.headers.get("authorization")):
            return self._refuse(401, "missing or wrong token: use the RSI_MODEL_API_KEY of this rollout")
        if not urlsplit(self.path).path.rstrip("/").endswith(ENDPOINT):
            return self._refuse(404, f"only POST {JAIL_BASE_URL}{ENDPOINT} is served")
        try:
            body = untrusted.loads(raw)
        except untrusted.Invalid as exc:
            return self._refuse(400, f"request body is not valid JSON: {exc}")
        if not isinstance(body, dict):
            return self._refuse(400, "request body must be a JSON object")
        why = proxy._prepare(body)
        if why is not None:
            return self._refuse(403, why)
        data = json.dumps(body).encode()
        estimate = (len(data) // 3 + 1, int(body.get("max_tokens") or body.get("max_completion_tokens") or 0))
        call = proxy._reserve(estimate)
        if isinstance(call, str):
            return self._error(429, f"this rollout's model budget is spent: {call}", counted=False)
        used: tuple[int, int] | None = None
        try:
            status, payload, headers, used = proxy._forward(data)
        except _TooLarge:
            return self._error(502, f"the model's reply exceeded {MAX_RESPONSE_BYTES} bytes", counted=False)
        except Exception as exc:  # unreachable, timed out, cut off, or the proxy closed meanwhile
            httpx = _httpx()
            if isinstance(exc, httpx.ConnectError):
                used = (0, 0)  # nothing reached the endpoint: nothing spent
            return self._error(
                504 if isinstance(exc, httpx.TimeoutException) else 502,
                f"model endpoint failed: {type(exc).__name__}",
                counted=False,
            )
        finally:
            proxy._settle(call, used)
        self._send(status, payload, headers)

    def do_GET(self) -> None:
        self._other()

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    def _other(self) -> None:
        if not self.proxy._authorized(self.headers.get("authorization")):
            return self._refuse(401, "missing or wrong token: use the RSI_MODEL_API_KEY of this rollout")
        self._refuse(404, f"only POST {JAIL_BASE_URL}{ENDPOINT} is served")

    def _refuse(self, status: int, message: str) -> None:
        self._error(status, message, counted=True)

    def _error(self, status: int, message: str, counted: bool) -> None:
        if counted:
            self.proxy._deny()
        payload = {"error": {"message": f"rsi model proxy: {message}", "type": "rsi_model_proxy", "code": status}}
        self._send(
            status, json.dumps(payload).encode(), {"content-type": "application/json", "x-should-retry": "false"}
        )

    def _send(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
        try:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(payload)))
            self.send_header("connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
        except OSError:  # the rollout gave up on the call (or ended)
            pass
