"""Shared helpers for the server tests: start and stop `sluice serve`, their command line and exit, a small
synthesized model; for those that speak raw HTTP (robustness and soak) send bytes, read one response. Standard library
only."""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import unittest


def require(module, hint="bash scripts/python-env.sh"):
    """Imports `module`, or says the test is skipped and exits 77 (CTest's skip code) when it is not installed."""
    import importlib
    import sys
    try:
        return importlib.import_module(module)
    except ImportError:
        print(f"skipped: the {module} package is not installed ({hint})")
        sys.exit(77)


def sluice_args():
    """The test's command line: (the absolute path of --sluice, the arguments left for unittest)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    return os.path.abspath(args.sluice), rest


def run_tests(rest):
    """Runs the module's unittest cases with the arguments sluice_args left; the result."""
    return unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2).result


def synth_small_k2(sluice, out_dir):
    """`sluice synth` of a small Kimi K2 (2 layers of 8 experts, widths / 32, 512 ids) into out_dir."""
    subprocess.run([sluice, "synth", "--like", "kimi-k2", "--layers", "2", "--experts", "8", "--scale-down", "32",
                    "--vocab-size", "512", "--no-sync", "-o", out_dir], check=True, capture_output=True)


def stop_server(proc, timeout=30):
    """SIGTERM, then waits: its exit status, or a sentence saying it was killed when it did not stop in time."""
    proc.terminate()
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return "killed (did not stop on SIGTERM)"


def exit_with(result, server_code=0):
    """Exits 1 when the server did not exit 0 (server_code, as stop_server gives it) or a test failed, else 0."""
    if server_code != 0:
        print(f"sluice serve exited with {server_code} after SIGTERM")
        sys.exit(1)
    sys.exit(0 if result.wasSuccessful() else 1)


def start_server(sluice, model, extra_args, log_path, env=None):
    """Starts `sluice serve --port 0 ...`; returns (process, port) once it prints "listening on"."""
    log = open(log_path, "w+")
    proc = subprocess.Popen([sluice, "serve", "-m", model, "--port", "0", "--threads", "2"] + list(extra_args),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    port = None
    lines = []
    timer = threading.Timer(120, proc.kill)
    timer.start()
    for line in proc.stderr:
        lines.append(line)
        log.write(line)
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    timer.cancel()
    if port is None:
        proc.kill()
        raise RuntimeError("sluice serve did not start:\n" + "".join(lines))

    def drain():
        for l in proc.stderr:
            log.write(l)
            log.flush()
    threading.Thread(target=drain, daemon=True).start()
    return proc, port


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


_pending = {}  # bytes read past a response, by socket (the start of a pipelined response)


def read_response(sock, timeout=10):
    """Reads one HTTP/1.1 response (Content-Length, chunked, or until close), skipping interim 1xx answers.
    Returns (status, headers, body bytes); status None when the connection closed before a status line."""
    sock.settimeout(timeout)
    buf = _pending.pop(id(sock), b"")

    def more():
        try:
            return sock.recv(65536)
        except ConnectionResetError:
            return b""
    while True:
        while b"\r\n\r\n" not in buf:
            d = more()
            if not d:
                return None, {}, buf
            buf += d
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        if status >= 200:
            break
    headers = {}
    for l in lines[1:]:
        k, v = l.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(buf) < n:
            d = more()
            if not d:
                break
            buf += d
        _pending[id(sock)] = buf[n:]
        return status, headers, buf[:n]
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            while b"\r\n" not in buf:
                d = more()
                if not d:
                    return status, headers, body
                buf += d
            size_line, buf = buf.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(buf) < size + 2:
                d = more()
                if not d:
                    return status, headers, body + buf
                buf += d
            body += buf[:size]
            buf = buf[size + 2:]
            if size == 0:
                _pending[id(sock)] = buf
                return status, headers, body
    while True:
        d = more()
        if not d:
            return status, headers, buf
        buf += d


def request_bytes(method, path, body=None, headers=None):
    h = {"Host": "127.0.0.1", "Content-Type": "application/json"}
    h.update(headers or {})
    if body is not None and "Transfer-Encoding" not in h:
        h["Content-Length"] = str(len(body))
    out = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return out.encode() + (body or b"")


def call(port, method, path, obj=None, timeout=30):
    """One request on its own connection; returns (status, parsed JSON or raw text)."""
    s = connect(port, timeout)
    try:
        body = None if obj is None else json.dumps(obj).encode()
        s.sendall(request_bytes(method, path, body, {"Connection": "close"}))
        status, headers, data = read_response(s, timeout)
    finally:
        s.close()
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data.decode("utf-8", "replace")


def metrics(port):
    status, text = call(port, "GET", "/metrics")
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            k, v = line.split(" ")
            out[k] = float(v)
    return out


def wait_for(pred, timeout, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def model_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "models", "sluice-k2-tiny")
