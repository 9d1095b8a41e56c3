"""An LSP ``initialize`` round trip over stdio with a language server command (argv), by raw JSON-RPC framing:
initialize, initialized, shutdown, exit. Exits 0 when the server answers with its capabilities and exits 0."""

import json
import subprocess
import sys


def send(proc: subprocess.Popen, msg: dict) -> None:
    body = json.dumps(msg).encode()
    proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    proc.stdin.flush()


def receive(proc: subprocess.Popen) -> dict:
    length = 0
    while True:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("the server closed its output")
        if line in (b"\r\n", b"\n"):
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(proc.stdout.read(length))


def main() -> int:
    proc = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"processId": None, "rootUri": None, "capabilities": {}}})
    while True:  # skip notifications (log messages) until the answer
        msg = receive(proc)
        if msg.get("id") == 1:
            break
    caps = msg["result"]["capabilities"]
    send(proc, {"jsonrpc": "2.0", "method": "initialized", "params": {}})
    send(proc, {"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
    while receive(proc).get("id") != 2:
        pass
    send(proc, {"jsonrpc": "2.0", "method": "exit"})
    code = proc.wait(timeout=60)
    info = msg["result"].get("serverInfo", {})
    print(f"lsp initialize: {info.get('name')} {info.get('version')}, {len(caps)} capabilities, exit {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
