"""The fleet test's client: the Python client over TCP, with a token and
the router's CA, through HAProxy. Each subcommand prints one JSON object.

    fleet_client.py affinity N        N sessions, a file written then read
    fleet_client.py run SESSION ARGV_JSON
    fleet_client.py load SESSIONS COMMANDS CONCURRENCY [PREFIX]
    fleet_client.py restart SESSION   one call, a line on stdin, the same call
                                      again from the same client
    fleet_client.py rolling WORKERS   commands without pause until a line on
                                      stdin, through pods restarted one by one

The address, CA and token come from ALEPH_FLEET_ADDR, ALEPH_FLEET_CA and
ALEPH_SANDBOX_TOKEN.
"""

import json
import os
import secrets
import sys
import threading
import time

import aleph_sandbox


def client():
    return aleph_sandbox.Client(os.environ["ALEPH_FLEET_ADDR"], ca_file=os.environ["ALEPH_FLEET_CA"], timeout=60)


def result(r):
    out = {"stdout": r.stdout.decode(errors="replace"), "stderr": r.stderr.decode(errors="replace"),
           "exit_code": r.exit_code, "denied": r.denied, "reason": r.reason,
           "node_id": r.node_id, "session_incarnation": r.session_incarnation}
    return out


def error(e):
    return {"error": type(e).__name__, "code": getattr(e, "code", ""), "reason_code": getattr(e, "reason_code", ""),
            "session_moved": isinstance(e, aleph_sandbox.SessionMoved), "message": str(e)}


def affinity(n):
    c = client()
    out = {}
    for i in range(n):
        s = "aff-%d-%s" % (i, secrets.token_hex(4))
        token = secrets.token_hex(8)
        # Shell builtins and a final exec: the sandbox gives no new process
        # without spawn (and spawn's approval is not what this tests).
        w = c.exec(["sh", "-c", "echo %s > state; exec hostname" % token], session=s)
        r = c.exec(["sh", "-c", "read v < state; echo $v; exec hostname"], session=s)
        out[s] = {"token": token, "write": result(w), "read": result(r)}
    return out


def run(session, argv):
    try:
        return result(client().exec(argv, session=session))
    except aleph_sandbox.SandboxError as e:
        return error(e)


def restart(session):
    """The same client calls the session before and after its pod restarts:
    a client that keeps the session's incarnation must get SessionMoved."""
    c = client()
    argv = ["sh", "-c", "read v < state; echo $v; exec hostname"]
    json.dump({"first": result(c.exec(argv, session=session))}, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
    sys.stdin.readline()
    try:
        return {"second": result(c.exec(argv, session=session))}
    except aleph_sandbox.SandboxError as e:
        return {"second": error(e)}


def load(sessions, commands, concurrency, prefix):
    errors = []
    done = [0]
    lock = threading.Lock()
    # A fixed prefix reuses the same sessions from one measurement to the
    # next, so a pod holds only as many as one run uses.
    names = ["%s-%d" % (prefix, i) for i in range(sessions)]
    work = [(names[i % sessions]) for i in range(commands)]

    def worker(k):
        c = client()
        for j in range(k, len(work), concurrency):
            try:
                r = c.exec(["true"], session=work[j])
                ok = r.exit_code == 0
            except aleph_sandbox.SandboxError as e:
                ok = False
                with lock:
                    errors.append(str(e))
            if ok:
                with lock:
                    done[0] += 1

    start = time.monotonic()
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return {"ok": done[0], "seconds": time.monotonic() - start, "errors": errors[:5], "failed": len(errors)}


def rolling(workers):
    """The workload of a rolling restart: each worker keeps one session and
    runs commands in it without pause until a line arrives on stdin. A
    command counts as ok only with its real result: the session's counter,
    kept in its workspace, one more than the last call's (the same session,
    on the same pod, with its state), and the node that ran it named both
    by the command (hostname) and by the result (node_id).

    A refusal before the command ran is the documented handling of a fleet
    (docs/fleet.md, "Rolling restart"): "draining" (a new session reached a
    pod that drains before the router saw it) and SessionMoved (the
    session's pod is gone or was replaced) are answered by a new session,
    on a new name, and the same command again. Anything else is a failed
    command: a reset or a router's 5xx while it ran, another error, a wrong
    result. Each command's outcome is recorded with its time and node, so
    the caller can tell which pods served before and after each restart.
    A session left is not forgotten: it idles out on its pod, as an
    agent's does."""
    lock = threading.Lock()
    stop = threading.Event()
    out = {"ok": 0, "draining": 0, "moved": 0, "failed": 0, "sessions": 0, "errors": [], "records": []}

    def record(kind, node="", detail=""):
        with lock:
            out[kind] += 1
            out["records"].append([time.time(), node, kind])
            if detail and len(out["errors"]) < 20:
                out["errors"].append(detail)

    def worker(k):
        c = client()
        gen = 0
        while not stop.is_set():
            gen += 1
            session = "roll-%d-%d-%s" % (k, gen, secrets.token_hex(4))
            with lock:
                out["sessions"] += 1
            n = 0
            # Sessions come and go, as agents' do: a session ends after a
            # few commands, so new ones keep arriving and reach a pod that
            # was replaced (the router places a new session by its hash).
            while not stop.is_set() and n < 12:
                nonce = secrets.token_hex(6)
                # Builtins and a final exec: no new process without spawn.
                argv = ["sh", "-c", "n=0; read n < count; n=$((n+1)); echo $n > count; echo $n %s; exec hostname" % nonce]
                try:
                    r = c.exec(argv, session=session)
                except aleph_sandbox.SessionMoved:
                    record("moved")
                    break
                except aleph_sandbox.SandboxError as e:
                    if e.reason_code == "draining":
                        record("draining")
                        break
                    record("failed", detail="%s %s %s" % (session, type(e).__name__, e))
                    break
                except Exception as e:  # a reset, a closed connection
                    record("failed", detail="%s %s %s" % (session, type(e).__name__, e))
                    break
                lines = r.stdout.decode(errors="replace").split()
                want = [str(n + 1), nonce, r.node_id]
                if r.exit_code != 0 or lines != want:
                    record("failed", r.node_id, "%s: exit %s, stdout %r, want %r, stderr %r" % (
                        session, r.exit_code, lines, want, r.stderr.decode(errors="replace")[-200:]))
                    break
                n += 1
                record("ok", r.node_id)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(workers)]
    for t in ts:
        t.start()
    sys.stdin.readline()
    stop.set()
    for t in ts:
        t.join()
    return out


def main():
    cmd = sys.argv[1]
    if cmd == "affinity":
        out = affinity(int(sys.argv[2]))
    elif cmd == "run":
        out = run(sys.argv[2], json.loads(sys.argv[3]))
    elif cmd == "load":
        prefix = sys.argv[5] if len(sys.argv) > 5 else "load-" + secrets.token_hex(4)
        out = load(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), prefix)
    elif cmd == "restart":
        out = restart(sys.argv[2])
    elif cmd == "rolling":
        out = rolling(int(sys.argv[2]))
    else:
        raise SystemExit("unknown subcommand %r" % cmd)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
