"""A `python -m firstfault ...` server started as a subprocess on a free loopback port, for tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LiveProcess:
    """A running firstfault server; its output goes to `log_path`. Ready when `health_path` answers 200."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path
    health_path: str
    stop_signal: int

    @classmethod
    def launch(cls, command: list[str], *, log_dir: Path, health_path: str, stop_signal: int = signal.SIGTERM,
               env: dict[str, str] | None = None) -> LiveProcess:
        """Start `firstfault <command> --port N` (FIRSTFAULT_* settings of the caller's environment dropped)."""
        port = free_port()
        log_path = log_dir / f"{command[0]}-{port}.log"
        environ = {k: v for k, v in os.environ.items() if not k.startswith("FIRSTFAULT_")}
        environ.update(env or {})
        with open(log_path, "wb") as log:
            process = subprocess.Popen([sys.executable, "-m", "firstfault", *command, "--port", str(port)],
                                       stdout=log, stderr=subprocess.STDOUT, env=environ)
        live = cls(process, f"http://127.0.0.1:{port}", log_path, health_path, stop_signal)
        live.wait_ready()
        return live

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.process.args} exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}{self.health_path}", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.process.args} was not ready after {START_TIMEOUT_S} s:\n{self.log()}")

    def stop(self, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(self.stop_signal)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")
