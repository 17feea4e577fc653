"""A scripted model server: real HTTP on 127.0.0.1, replies read from a script.

It speaks the OpenAI chat-completions protocol (plain and streamed, with tool calls) and the
Anthropic messages endpoint, so the real SDKs, the agent worker and MiniAgent subprocesses run
unchanged against it in tests and demos. Nothing here is a language model, and it is named
"scripted" wherever it appears.

A script is a list of steps, consumed one per request:

- ``"text"`` or ``{"text": "..."}``: a reply; add ``"tool_calls": [{"name", "arguments"}]``
  (``arguments`` a dict, or a string sent verbatim, e.g. malformed JSON), ``"finish_reason"``,
  ``"tokens_in"``/``"tokens_out"``;
- ``{"status": 429}``: an HTTP error (``"retry_after"`` sets the header);
- ``{"delay_s": 5, ...}``: wait before answering (a hung response; the wait ends at ``stop``);
- ``{"rules": [{"match": REGEX, "reply": STEP}], "default": STEP}``: the first rule whose regex
  matches the request's message text (pair with ``loop=True`` for a stateless responder);
- a callable ``f(request_body) -> step`` (Python only).

Every request is recorded in ``requests`` (path, body, headers with credentials removed), so a
test can assert what a prompt contained. ``python -m rsi.testing.scripted_server --script FILE`` serves
a JSON or YAML script for demos.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Step = dict | str | Callable[[dict], Any]
_CREDENTIAL_HEADERS = {"authorization", "x-api-key", "api-key"}


def request_text(body: dict) -> str:
    """All message text of a request (system included), for rules and for test assertions."""
    parts = [body.get("system") if isinstance(body.get("system"), str) else ""]
    for m in body.get("messages", []):
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict):
                    parts.append(str(block.get("text") or block.get("content") or ""))
    return "\n".join(p for p in parts if p)


class ScriptedServer:
    def __init__(
        self,
        steps: Sequence[Step] = (),
        loop: bool = False,
        api_key: str | None = None,
        model: str = "scripted-model",
        port: int = 0,
    ):
        self.steps = list(steps)
        self.loop = loop
        self.api_key = api_key
        self.model = model
        self.port = port
        self.requests: list[dict] = []
        self._next = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> ScriptedServer:
        handler = type("Handler", (_Handler,), {"owner": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, name="scripted-server", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """OpenAI-style root (``.../v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, *steps: Step) -> None:
        with self._lock:
            self.steps.extend(steps)

    @property
    def remaining(self) -> int:
        return max(0, len(self.steps) - self._next)

    # ---- choosing a reply ----------------------------------------------------------------------
    def _take(self, body: dict) -> dict | None:
        with self._lock:
            if not self.steps or (self._next >= len(self.steps) and not self.loop):
                return None
            step = self.steps[self._next % len(self.steps)]
            self._next += 1
        return resolve(step, body)


def resolve(step: Step, body: dict) -> dict:
    while True:
        if callable(step):
            step = step(body)
        elif isinstance(step, str):
            return {"text": step}
        elif isinstance(step, dict) and "rules" in step:
            text = request_text(body)
            hit = next((r["reply"] for r in step["rules"] if re.search(r["match"], text)), None)
            step = hit if hit is not None else step.get("default", {"status": 500, "message": "no rule matched"})
        else:
            return dict(step)


def _calls(step: dict) -> list[dict]:
    out = []
    for _i, c in enumerate(step.get("tool_calls") or []):
        args = c.get("arguments", {})
        out.append(
            {
                "id": c.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                "name": c["name"],
                "arguments": args if isinstance(args, str) else json.dumps(args),
            }
        )
    return out


def _tokens(step: dict, body: dict) -> tuple[int, int]:
    return (
        int(step.get("tokens_in", len(json.dumps(body.get("messages", []))) // 4 + 1)),
        int(step.get("tokens_out", len(step.get("text") or "") // 4 + 1)),
    )


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedServer
    protocol_version = "HTTP/1.0"  # one request per connection: a streamed body ends at close

    def log_message(self, *args) -> None:  # tests read ``requests``, not stderr
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            return self._json(200, {"object": "list", "data": [{"id": self.owner.model, "object": "model"}]})
        self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        owner = self.owner
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            return self._json(400, {"error": {"message": "request body is not JSON"}})
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in _CREDENTIAL_HEADERS}
        given = (self.headers.get("x-api-key") or self.headers.get("authorization", "").removeprefix("Bearer ")).strip()
        authorized = owner.api_key is None or given == owner.api_key
        owner.requests.append({"path": self.path, "body": body, "headers": headers, "authorized": authorized})
        anthropic = self.path.rstrip("/").endswith("/messages") and "/chat/" not in self.path
        if not authorized:
            return self._error(401, "invalid api key", anthropic)
        if not (anthropic or self.path.rstrip("/").endswith("/chat/completions")):
            return self._error(404, f"no route {self.path}", anthropic)
        step = owner._take(body)
        if step is None:
            return self._error(410, f"scripted server: the script has no step left ({owner._next} used)", anthropic)
        if step.get("delay_s") and owner._stop.wait(float(step["delay_s"])):
            return
        try:
            if "status" in step:
                self._error(
                    int(step["status"]),
                    step.get("message", f"scripted HTTP {step['status']}"),
                    anthropic,
                    step.get("retry_after"),
                )
            elif anthropic:
                self._json(200, self._anthropic(step, body))
            elif body.get("stream"):
                self._stream(step, body)
            else:
                self._json(200, self._openai(step, body))
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
            pass

    # ---- wire formats -------------------------------------------------------------------------
    def _openai(self, step: dict, body: dict) -> dict:
        calls = _calls(step)
        tin, tout = _tokens(step, body)
        message = {"role": "assistant", "content": step.get("text")}
        if calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls
            ]
        finish = step.get("finish_reason") or ("tool_calls" if calls else "stop")
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.owner.model),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout},
        }

    def _stream(self, step: dict, body: dict) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", self.owner.model),
        }

        def send(delta: dict | None, finish=None, usage=None) -> None:
            chunk = dict(base, choices=[] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}])
            if usage:
                chunk["usage"] = usage
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()

        send({"role": "assistant", "content": ""})
        text = step.get("text") or ""
        for i in range(0, len(text), 8):
            send({"content": text[i : i + 8]})
        calls = _calls(step)
        for i, c in enumerate(calls):
            send(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": ""},
                        }
                    ]
                }
            )
            for j in range(0, len(c["arguments"]), 10):
                send({"tool_calls": [{"index": i, "function": {"arguments": c["arguments"][j : j + 10]}}]})
        send({}, step.get("finish_reason") or ("tool_calls" if calls else "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            tin, tout = _tokens(step, body)
            send(None, usage={"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _anthropic(self, step: dict, body: dict) -> dict:
        content: list[dict] = [{"type": "text", "text": step["text"]}] if step.get("text") else []
        for c in _calls(step):
            try:  # the messages protocol carries tool input as an object: malformed JSON cannot be sent
                args = json.loads(c["arguments"])
            except json.JSONDecodeError:
                args = {}
            content.append(
                {
                    "type": "tool_use",
                    "id": c["id"].replace("call_", "toolu_"),
                    "name": c["name"],
                    "input": args if isinstance(args, dict) else {},
                }
            )
        finish = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
        reason = step.get("finish_reason") or ("tool_calls" if step.get("tool_calls") else "stop")
        tin, tout = _tokens(step, body)
        return {
            "id": f"msg_{uuid.uuid4().hex[:12]}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", self.owner.model),
            "content": content,
            "stop_reason": finish.get(reason, reason),
            "stop_sequence": None,
            "usage": {"input_tokens": tin, "output_tokens": tout},
        }

    def _error(self, status: int, message: str, anthropic: bool, retry_after=None) -> None:
        if anthropic:
            payload = {"type": "error", "error": {"type": "api_error", "message": message}}
        else:
            payload = {"error": {"message": message, "type": "scripted_error", "code": status}}
        self._json(status, payload, {"retry-after": str(retry_after)} if retry_after is not None else {})

    def _json(self, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


def load_script(path: str | Path) -> tuple[list[Step], bool]:
    """A JSON or YAML file: a list of steps, or ``{steps: [...], loop: bool}``."""
    import yaml

    data = yaml.safe_load(Path(path).read_text())
    if isinstance(data, dict):
        return list(data.get("steps", [])), bool(data.get("loop", False))
    return list(data or []), False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a scripted (not a model) chat endpoint on 127.0.0.1.")
    parser.add_argument("--script", required=True, help="JSON/YAML list of steps, or {steps, loop}")
    parser.add_argument("--port", type=int, default=0, help="0: an ephemeral port")
    parser.add_argument("--loop", action="store_true", help="start over when the script ends")
    args = parser.parse_args(argv)
    steps, loop = load_script(args.script)
    with ScriptedServer(steps, loop=loop or args.loop, port=args.port) as srv:
        print(f"scripted server: {srv.base_url} ({len(steps)} steps{', looping' if srv.loop else ''})", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
