"""The fleet test's client: the Python client over TCP, with a token and
the router's CA, through HAProxy. Each subcommand prints one JSON object.

    fleet_client.py affinity N        N sessions, a file written then read
    fleet_client.py run SESSION ARGV_JSON
    fleet_client.py load SESSIONS COMMANDS CONCURRENCY [PREFIX]
    fleet_client.py restart SESSION   one call, a line on stdin, the same call
                                      again from the same client

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
    else:
        raise SystemExit("unknown subcommand %r" % cmd)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
