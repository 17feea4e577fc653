"""MiniAgent: a minimal tool-using agent loop, run once per task.

Task JSON on stdin (the question and the corpus, bare or wrapped in ``input``);
one JSON object on stdout: ``{"answer": str, "trace": [...], "usage": {...}}``. The model is
reached through the openai SDK as the RSI_MODEL_* variables say (README.md beside this file):
under the runner, over the Unix socket RSI_MODEL_SOCKET names (the rollout's model proxy).
Exit 2 on a bad environment or task, 1 when the model cannot be reached.
"""

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CLIP = 2000


def fail(code, message):
    print(f"miniagent: {message}", file=sys.stderr)
    sys.exit(code)


def model_settings():
    env = os.environ
    missing = [n for n in ("RSI_MODEL_BASE_URL", "RSI_MODEL_NAME") if not env.get(n)]
    if missing:
        fail(2, f"missing environment variables: {', '.join(missing)}")
    key_env = env.get("RSI_MODEL_API_KEY_ENV", "")
    if key_env and not env.get(key_env):
        fail(2, f"RSI_MODEL_API_KEY_ENV names {key_env}, which is not set")
    temperature = env.get("RSI_MODEL_TEMPERATURE")
    return {
        "base_url": env["RSI_MODEL_BASE_URL"],
        "model": env["RSI_MODEL_NAME"],
        "api_key": env[key_env] if key_env else "no-key",
        "max_tokens": int(env.get("RSI_MODEL_MAX_TOKENS", "512")),
        "temperature": float(temperature) if temperature else None,
        "timeout": float(env.get("RSI_MODEL_TIMEOUT_S", "60")),
        "max_retries": int(env.get("RSI_MODEL_MAX_RETRIES", "2")),
        "socket": env.get("RSI_MODEL_SOCKET") or None,
    }


def http_client(socket):
    """An HTTP client whose every request goes over the Unix socket ``socket``."""
    try:
        import httpx
    except ImportError:  # some openai releases ship it as httpx2
        import httpx2 as httpx
    return httpx.Client(transport=httpx.HTTPTransport(uds=socket))


def load_tools(names):
    tools = {}
    for name in names:
        spec = importlib.util.spec_from_file_location(f"miniagent_tool_{name}", ROOT / "tools" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        tools[module.SPEC["name"]] = module
    return tools


def system_prompt():
    parts = [(ROOT / "prompts" / "system.md").read_text().strip()]
    for skill in sorted((ROOT / "skills").glob("*.md")):
        parts.append(skill.read_text().strip())
    return "\n\n".join(parts)


def extract_answer(text):
    """The reply's answer: a quoted phrase, else what follows the last 'answer is:', else the
    first line (small models wrap the answer in a sentence)."""
    text = (text or "").strip()
    quoted = re.findall(r'"([^"]+)"', text)
    if quoted:
        return quoted[0].strip().rstrip(".")
    marked = re.split(r"(?i)\banswer\s*(?:is|would be)?\s*:", text)
    lines = (marked[-1] if len(marked) > 1 else text).strip().splitlines()
    return lines[0].strip().rstrip(".").strip() if lines else ""


def call_model(client, settings, messages, tool_specs):
    kwargs = {"model": settings["model"], "messages": messages, "max_tokens": settings["max_tokens"]}
    if settings["temperature"] is not None:
        kwargs["temperature"] = settings["temperature"]
    if tool_specs:
        kwargs["tools"] = [{"type": "function", "function": spec} for spec in tool_specs]
    return client.chat.completions.create(**kwargs)


def run(task, config, settings):
    from openai import OpenAI

    client = OpenAI(base_url=settings["base_url"], api_key=settings["api_key"],
                    timeout=settings["timeout"], max_retries=settings["max_retries"],
                    http_client=http_client(settings["socket"]) if settings["socket"] else None)
    tools = load_tools(config.get("tools") or [])
    question = str(task["question"])
    trace, usage = [], {"calls": 0, "tokens_in": 0, "tokens_out": 0}
    user = f"Question: {question}"
    prefetch = config.get("prefetch")
    if prefetch:
        found = tools[prefetch].run({"query": question, "k": config.get("prefetch_k", 3)}, task)
        trace.append({"kind": "prefetch", "tool": prefetch, "query": question, "result": found[:CLIP]})
        user = f"Documents:\n{found}\n\n{user}"
    messages = [{"role": "system", "content": system_prompt()}, {"role": "user", "content": user}]
    specs = [t.SPEC for t in tools.values()]
    text = ""
    for step in range(int(config.get("max_steps", 4))):
        resp = call_model(client, settings, messages, specs)
        usage["calls"] += 1
        if resp.usage:
            usage["tokens_in"] += resp.usage.prompt_tokens or 0
            usage["tokens_out"] += resp.usage.completion_tokens or 0
        msg = resp.choices[0].message
        calls = msg.tool_calls or []
        text = msg.content or ""
        trace.append({"kind": "model", "step": step, "text": text[:CLIP], "finish_reason": resp.choices[0].finish_reason,
                      "tool_calls": [{"name": c.function.name, "arguments": c.function.arguments[:CLIP]} for c in calls]})
        if not calls:
            break
        messages.append({"role": "assistant", "content": text, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in calls]})
        for c in calls:
            result = run_tool(tools, c.function.name, c.function.arguments, task)
            trace.append({"kind": "tool", "tool": c.function.name, "result": result[:CLIP]})
            messages.append({"role": "tool", "tool_call_id": c.id, "content": result})
    answer = extract_answer(text)
    trace.append({"kind": "answer", "answer": answer})
    return {"answer": answer, "trace": trace, "usage": usage}


def run_tool(tools, name, arguments, task):
    if name not in tools:
        return f"error: unknown tool {name!r}; tools: {', '.join(tools)}"
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"error: arguments are not valid JSON ({exc.msg}); resend the call"
    if not isinstance(args, dict):
        return "error: arguments must be a JSON object"
    return str(tools[name].run(args, task))


def main():
    try:
        payload = json.load(sys.stdin)
    except json.JSONDecodeError as exc:
        fail(2, f"stdin is not JSON: {exc}")
    task = payload.get("input", payload) if isinstance(payload, dict) else None
    if not isinstance(task, dict) or "question" not in task:
        fail(2, "the task needs an input object with a question")
    config = yaml.safe_load((ROOT / "agent.yaml").read_text()) or {}
    settings = model_settings()
    import openai

    try:
        out = run(task, config, settings)
    except openai.APIError as exc:
        fail(1, f"model call failed: {type(exc).__name__}: {exc}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
