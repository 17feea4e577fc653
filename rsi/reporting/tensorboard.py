"""TensorBoard scalars from a run's decisions, with no dependency: the event-file format
(TFRecord framing, CRC-32C, three protobuf messages) is written here directly.

``export_run`` writes a finished, running or killed run's decision log after the fact
(``rsi report RUN_DIR --tensorboard DIR``); ``EventWriter.decision`` takes one decision at a
time, so a live hook is one line where decisions are recorded (see the module's README entry).
Each decision's numeric figures become scalars named ``<kind>/<figure>`` at its step
(``confirm/gain``, ``screen/regression_mass``, ``confirm/uncertainty.sign_test_p``,
``screen/accepted`` as 0/1); per-task maps (``means``, ``parent_means``, ...) are left out.
"""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from collections.abc import Sequence
from pathlib import Path

# ---- CRC-32C (Castagnoli), as TFRecord frames need -------------------------------------------
_POLY = 0x82F63B78
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the bytes, their masked CRC."""
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", masked_crc(length)) + record + struct.pack("<I", masked_crc(record))


# ---- the three protobuf messages (tensorflow/core/util/event.proto, summary.proto) ----------
def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes a negative step
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def scalar_value(tag: str, value: float) -> bytes:
    """Summary.Value {tag = 1; simple_value = 2 (float)}."""
    return _bytes_field(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", value)


def event(wall_time: float, step: int, *, file_version: str | None = None, values: Sequence[bytes] = ()) -> bytes:
    """Event {wall_time = 1 (double); step = 2 (int64); file_version = 3; summary = 5}."""
    out = _varint(1 << 3 | 1) + struct.pack("<d", wall_time) + _varint(2 << 3 | 0) + _varint(step)
    if file_version is not None:
        out += _bytes_field(3, file_version.encode())
    if values:
        out += _bytes_field(5, b"".join(_bytes_field(1, v) for v in values))
    return out


SKIP = frozenset({"step"})


def scalars(decision: dict) -> dict[str, float]:
    """A decision's numeric figures, one level of nesting flattened; per-task maps left out."""
    kind = str(decision.get("kind", "decision"))
    out: dict[str, float] = {}

    def put(name: str, v) -> None:
        if isinstance(v, bool):
            out[f"{kind}/{name}"] = float(v)
        elif isinstance(v, (int, float)) and math.isfinite(v):
            out[f"{kind}/{name}"] = float(v)

    for key, v in decision.items():
        if key in SKIP or key.endswith("means"):
            continue
        if isinstance(v, dict):
            for sub, w in v.items():
                if not isinstance(w, (dict, list)):
                    put(f"{key}.{sub}", w)
        else:
            put(key, v)
    return out


class EventWriter:
    """An ``events.out.tfevents.*`` file in ``logdir``; every write is flushed."""

    def __init__(self, logdir: str | Path, suffix: str = ".rsi"):
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.path = self.logdir / f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}{suffix}"
        self._f = open(self.path, "ab")
        self._write(event(time.time(), 0, file_version="brain.Event:2"))

    def _write(self, record: bytes) -> None:
        self._f.write(frame(record))
        self._f.flush()

    def scalars(self, step: int, values: dict[str, float], wall_time: float | None = None) -> int:
        if values:
            self._write(
                event(
                    wall_time or time.time(), int(step), values=[scalar_value(t, v) for t, v in sorted(values.items())]
                )
            )
        return len(values)

    def decision(self, record: dict) -> int:
        """The live hook: one decision's figures at its step."""
        return self.scalars(int(record.get("step") or 0), scalars(record))

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def export_run(run_dir: str, logdir: str | Path) -> tuple[str, int]:
    """Every decision of a run (and its candidates' search-split means, its model usage) as
    scalars under ``logdir/<run name>/``, replacing an earlier export there."""
    from rsi.reporting.data import RunView

    view = RunView(run_dir)
    dest = Path(logdir) / view.name
    if dest.is_dir():
        for old in dest.glob("events.out.tfevents.*.rsi"):
            os.remove(old)
    n = 0
    with EventWriter(dest) as w:
        for d in view.decisions:
            n += w.decision(d)
        for c in view.candidates:
            if c.score is not None:
                n += w.scalars(
                    c.step, {f"candidate/{view.split}_mean": c.score, "candidate/admitted": float(c.admitted)}
                )
        usage = {
            f"usage/{k}": v
            for k, v in ((view.summary or {}).get("usage") or view.state.get("usage") or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        n += w.scalars(view.steps, usage)
        path = str(w.path)
    return path, n


def read_events(path: str | Path) -> list[dict]:
    """The events of a file written here, frames and CRCs checked: ``[{step, wall_time, values}]``
    (for tests and for a look without TensorBoard)."""
    data = Path(path).read_bytes()
    out, i = [], 0
    while i < len(data):
        (length,) = struct.unpack_from("<Q", data, i)
        (lcrc,) = struct.unpack_from("<I", data, i + 8)
        if lcrc != masked_crc(data[i : i + 8]):
            raise ValueError(f"bad length CRC at byte {i}")
        rec = data[i + 12 : i + 12 + length]
        (dcrc,) = struct.unpack_from("<I", data, i + 12 + length)
        if dcrc != masked_crc(rec):
            raise ValueError(f"bad data CRC at byte {i}")
        out.append(_parse_event(rec))
        i += 16 + length
    return out


def _read_varint(b: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        c = b[i]
        n |= (c & 0x7F) << shift
        i += 1
        shift += 7
        if not c & 0x80:
            return n, i


def _fields(b: bytes):
    i = 0
    while i < len(b):
        key, i = _read_varint(b, i)
        num, wire = key >> 3, key & 7
        v: int | bytes
        if wire == 0:
            v, i = _read_varint(b, i)
        elif wire == 1:
            v, i = b[i : i + 8], i + 8
        elif wire == 5:
            v, i = b[i : i + 4], i + 4
        elif wire == 2:
            n, i = _read_varint(b, i)
            v, i = b[i : i + n], i + n
        else:
            raise ValueError(f"wire type {wire}")
        yield num, v


def _parse_event(rec: bytes) -> dict:
    ev: dict = {"values": {}}
    for num, v in _fields(rec):
        if num == 1:
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2:
            ev["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 3:
            ev["file_version"] = v.decode()
        elif num == 5:
            for _, val in _fields(v):
                parts = dict(_fields(val))
                ev["values"][parts[1].decode()] = struct.unpack("<f", parts[2])[0]
    return ev
