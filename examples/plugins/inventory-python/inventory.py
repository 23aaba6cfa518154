#!/usr/bin/env python3
"""A backendslice provider plugin in Python, written from the protocol
document alone (providers/plugin/protocol/openapi.yaml, docs/plugins.md),
with nothing but the standard library.

It serves an HTTP/JSON inventory kept in one JSON file:

    {"services": {
        "billing-db": {
            "namespaces": ["billing"],
            "endpoints": [
                {"address": "192.0.2.30", "serving": true, "zone": "a", "hostname": "db-0", "port": 5432}
            ]}}}

A source asks for one service: plugin: {parameters: {service: billing-db}}.
The file is read again when it changes, and long-polls answer at once.

Consent comes first: a namespace a service does not list is refused
(Forbidden) alike whether the service exists or not. A service taken out
of the file is NotFound (its endpoints drain) to the namespaces it listed
last, which the plugin remembers while it runs, and Forbidden to others.
Each error code goes with its one status: InvalidParameters 422, NotFound
404, Forbidden 403, Unavailable 503, Unauthorized 401.

    inventory.py --listen 127.0.0.1:9200 --file inventory.json
                 [--token-file F] [--tls-cert F --tls-key F] [--no-push]
"""

import argparse
import hmac
import hashlib
import json
import os
import re
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROTOCOL = "v1"
INFO_PATH = "/backendslice/v1/info"
RESOLVE_PATH = "/backendslice/v1/resolve"
MAX_WAIT = 300
SERVICE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class Inventory:
    """The file's last good contents, and a condition long-polls wait on."""

    def __init__(self, path):
        self.path = path
        self.raw = None
        self.services = {}
        # Services taken out of the file, with the namespaces they listed.
        self.gone = {}
        self.broken = None
        self.changed = threading.Condition()
        self.load()

    def load(self):
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except OSError as e:
            print(f"reading {self.path}: {e}", file=sys.stderr)
            return
        if raw == self.raw:
            return
        with self.changed:
            self.raw = raw
            try:
                services = json.loads(raw)["services"]
                if not isinstance(services, dict):
                    raise ValueError("services is not an object")
                for name, svc in self.services.items():
                    if name not in services:
                        self.gone[name] = svc.get("namespaces", [])
                for name in services:
                    self.gone.pop(name, None)
                self.services, self.broken = services, None
            except (ValueError, KeyError, TypeError) as e:
                self.broken = f"{self.path} does not parse: {e}"
            self.changed.notify_all()

    def watch(self, period):
        while True:
            time.sleep(period)
            self.load()

    def resolve(self, req):
        """The answer to a resolve request: (status, body)."""
        params = req.get("parameters") or {}
        unknown = sorted(k for k in params if k != "service")
        if unknown:
            return error(422, "InvalidParameters", f"unknown parameter {unknown[0]!r}; this plugin takes one, service")
        name = params.get("service", "")
        if not SERVICE.match(name):
            return error(422, "InvalidParameters", f"service: {name!r} is not a service name (a DNS label)")
        # Consent before existence: the same refusal for a service that
        # does not list the namespace and for one that does not exist.
        svc = self.services.get(name)
        allowed = svc.get("namespaces", []) if svc is not None else self.gone.get(name)
        if allowed is None or ("*" not in allowed and req.get("namespace") not in allowed):
            return error(403, "Forbidden", f"service {name!r} is not published to namespace {req.get('namespace')}")
        if self.broken:
            return error(503, "Unavailable", self.broken)
        if svc is None:
            return error(404, "NotFound", f"the inventory no longer has service {name!r}")
        eps = [{k: e[k] for k in ("address", "serving", "terminating", "zone", "hostname", "port") if k in e}
               for e in svc.get("endpoints", [])]
        return 200, {"endpoints": eps}


def error(status, code, message):
    return status, {"error": {"code": code, "message": message}}


def index_of(endpoints):
    lines = sorted(json.dumps(e, sort_keys=True) for e in endpoints)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:24]


def handler(inventory, token_file, push):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorized(self):
            if not token_file:
                return True
            try:
                with open(token_file) as f:
                    want = "Bearer " + f.read().strip()
            except OSError:
                return False
            return hmac.compare_digest(self.headers.get("Authorization", ""), want)

        def do_GET(self):
            if self.path != INFO_PATH:
                return self.send(*error(503, "Unavailable", f"no operation at GET {self.path}"))
            if not self.authorized():
                return self.send(*error(401, "Unauthorized", "a bearer token is required, and this is not it"))
            self.send(200, {"protocolVersions": [PROTOCOL], "name": "inventory-python", "pluginVersion": "1"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(min(length, 1 << 18))
            if self.path != RESOLVE_PATH:
                return self.send(*error(503, "Unavailable", f"no operation at POST {self.path}"))
            if not self.authorized():
                return self.send(*error(401, "Unauthorized", "a bearer token is required, and this is not it"))
            try:
                req = json.loads(body)
            except ValueError as e:
                return self.send(*error(503, "Unavailable", f"the request is not JSON: {e}"))
            deadline = time.monotonic() + min(int(req.get("waitSeconds") or 0), MAX_WAIT)
            with inventory.changed:
                while True:
                    status, answer = inventory.resolve(req)
                    if status != 200 or not push:
                        break
                    answer["index"] = index_of(answer["endpoints"])
                    left = deadline - time.monotonic()
                    if not req.get("index") or answer["index"] != req["index"] or left <= 0:
                        break
                    # Held until the file changes or the wait ends.
                    inventory.changed.wait(left)
            self.send(status, answer)

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1:9200")
    ap.add_argument("--file", required=True)
    ap.add_argument("--period", type=float, default=1.0, help="seconds between reads of the file")
    ap.add_argument("--token-file")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--no-push", action="store_true", help="answer polls only")
    args = ap.parse_args()
    inventory = Inventory(args.file)
    threading.Thread(target=inventory.watch, args=(args.period,), daemon=True).start()
    host, _, port = args.listen.rpartition(":")
    server = ThreadingHTTPServer((host.strip("[]"), int(port)), handler(inventory, args.token_file, not args.no_push))
    server.daemon_threads = True
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(f"listening on {server.server_address[0]}:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
