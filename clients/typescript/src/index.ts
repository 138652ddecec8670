/**
 * TypeScript client of the aleph-sandbox host service (`aleph-sandbox serve`).
 *
 * Node's standard library only. It speaks the Connect protocol (JSON over
 * HTTP/1.1) to the service's unix socket, or over TLS to its TCP listener:
 *
 * ```ts
 * import { Client, Denied, SandboxError } from "aleph-sandbox";
 * const c = new Client();          // ALEPH_SANDBOX_HOST, else the default socket
 * const remote = new Client({ address: "tcp:sandbox.example:7443", token, ca }); // ca: PEM text
 * const r = await c.exec(["/bin/echo", "hi"], { session: "s1" });
 * console.log(r.stdout.toString(), r.exitCode);
 * ```
 *
 * docs/serve.md of the repository describes the service and the wire format.
 */

import { randomBytes } from "node:crypto";
import * as http from "node:http";
import * as https from "node:https";
import * as os from "node:os";
import * as path from "node:path";

const SERVICE = "aleph.host.v1.Service";

/**
 * The header every call concerning a session carries (its value the
 * session, percent-encoded), so that a proxy can route by it; the service
 * refuses one that disagrees with the request's body.
 */
export const SESSION_HEADER = "X-Aleph-Session";

/** The environment variable a TCP client takes its bearer token from when none is given. */
export const TOKEN_ENV = "ALEPH_SANDBOX_TOKEN";

/**
 * The header carrying the session incarnation a call expects (beside the
 * request's expectIncarnation): a server that does not hold it refuses the
 * call with SessionMovedError instead of making the session afresh.
 */
export const INCARNATION_HEADER = "X-Aleph-Incarnation";

// The calls whose body carries expectIncarnation.
const EXPECT_METHODS = new Set(["Execute", "StartProcess", "ReadFile", "WriteFile", "ListFiles", "StatFile", "RemoveFile"]);

/**
 * A session's header value: its UTF-8 bytes percent-encoded outside the
 * printable ASCII range (and '%'), so that any name is a valid header
 * value and a plain one ("s1") is itself. The service decodes it; the
 * Python client encodes alike.
 */
export function sessionHeaderValue(session: string): string {
  let out = "";
  for (const b of Buffer.from(session, "utf8")) {
    out += b > 0x20 && b < 0x7f && b !== 0x25 ? String.fromCharCode(b) : "%" + b.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

// Flags of a Connect streaming frame.
const END_STREAM = 0x02;
const COMPRESSED = 0x01;

/** The Connect status codes an error carries (https://connectrpc.com/docs/protocol#error-codes). */
export type Code =
  | "canceled"
  | "unknown"
  | "invalid_argument"
  | "deadline_exceeded"
  | "not_found"
  | "already_exists"
  | "permission_denied"
  | "resource_exhausted"
  | "failed_precondition"
  | "aborted"
  | "out_of_range"
  | "unimplemented"
  | "internal"
  | "unavailable"
  | "data_loss"
  | "unauthenticated";

/** The typed detail (aleph.host.v1.ErrorDetail) of an error: what to match on. */
export interface ErrorDetail {
  reasonCode: string;
  rule: string;
  field: string;
  hook: string;
  driver: string;
}

/**
 * The service could not run the command, refused the request, or could not
 * be reached. `code` is the Connect status code; `reasonCode`, `rule`,
 * `field`, `hook` and `driver` come from the typed error detail, so callers
 * match on them, never on the message.
 */
export class SandboxError extends Error implements ErrorDetail {
  readonly code: Code | string;
  readonly reasonCode: string;
  readonly rule: string;
  readonly field: string;
  readonly hook: string;
  readonly driver: string;

  constructor(message: string, code: Code | string = "unknown", detail: Partial<ErrorDetail> = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SandboxError";
    this.code = code;
    this.reasonCode = detail.reasonCode ?? "";
    this.rule = detail.rule ?? "";
    this.field = detail.field ?? "";
    this.hook = detail.hook ?? "";
    this.driver = detail.driver ?? "";
  }

  override toString(): string {
    return `${this.name}: ${this.code}: ${this.message}`;
  }
}

/**
 * The pipeline decided not to run the command (thrown by
 * `exec(argv, {check: true})`); `result` is the denial's Result.
 */
export class Denied extends SandboxError {
  readonly result: Result;

  constructor(result: Result) {
    super(result.reason, "permission_denied", { reasonCode: result.reasonCode, rule: result.rule });
    this.name = "Denied";
    this.result = result;
  }
}

/**
 * The session's server is gone, or the session was forgotten and made
 * again: the server that answered does not hold the incarnation this
 * client saw (reasonCode "session_moved"). Nothing ran. Its workspace,
 * processes and grants are not there: start a new session (another name),
 * or `forget()` this one to accept a fresh, empty one under the same name.
 */
export class SessionMovedError extends SandboxError {
  /** The session's name. */
  readonly session: string;

  constructor(message: string, code: Code | string, detail: Partial<ErrorDetail>, session: string) {
    super(message, code, detail);
    this.name = "SessionMovedError";
    this.session = session;
  }
}

/** err as a SessionMovedError of session when its reason is session_moved. */
function moved(err: SandboxError, session: string | undefined): SandboxError {
  if (err.reasonCode !== "session_moved" || err instanceof SessionMovedError) {
    return err;
  }
  return new SessionMovedError(err.message, err.code, err, session ?? "");
}

/** The session incarnation an answer names: its own, or its result's. */
function incarnationOf(m: JSONObject): string {
  const own = str(m.sessionIncarnation);
  if (own) {
    return own;
  }
  return isObject(m.result) ? str(m.result.sessionIncarnation) : "";
}

/** One hook's verdict on a command. */
export interface Verdict {
  action: string;
  rule: string;
  reason: string;
  hook: string;
}

/** How a command ended: the fields of `aleph-sandbox exec --json`. */
export interface Result {
  stdout: Buffer;
  stderr: Buffer;
  /** The command's exit status; null when it was denied (no process ran),
   * so that `r.exitCode === 0` never reads a denial as success. */
  exitCode: number | null;
  /** The signal that ended the command, 0 if none. */
  signal: number;
  timedOut: boolean;
  truncated: boolean;
  oomKilled: boolean;
  durationMs: number;
  denied: boolean;
  reason: string;
  rule: string;
  /** "allowed", "timeout", "hook_denied", "approval_denied", ... */
  reasonCode: string;
  commandId: string;
  backend: string;
  profileDigest: string;
  verdicts: Verdict[];
  /** How many times the sandbox refused the command a new process (it ran
   * without `spawn: true`); non-zero goes with reasonCode "spawn_refused"
   * and `hint`. */
  spawnRefused: number;
  /** One line saying how to get what was refused, in this client's terms
   * (for spawn_refused: `spawn: true`); "" when nothing was. */
  hint: string;
  /** What the command consumed (`usage.cpuMs`, `usage.maxRssKb`). */
  usage: Usage;
  /** The server that ran it (serve --node-id, else its hostname). */
  nodeId: string;
  /** The session's incarnation there (new when the session is made again). */
  sessionIncarnation: string;
  /** What the sandbox refused the command, at most the server's
   * `sandbox.max_violations`; `violationsDropped` counts the refusals past
   * that bound. */
  violations: Violation[];
  violationsDropped: number;
  /** The kinds the sandbox watched for this command: an empty `violations`
   * means nothing of these kinds was refused; of a kind not listed nothing
   * is known. */
  violationKinds: string[];
}

/**
 * One thing the sandbox refused a command: `kind` (`"spawn"`, `"syscall"`,
 * `"network"` or `"filesystem"`), `operation` (`"process_start"`,
 * `"syscall"`, `"connect"`, ...), `target` (a syscall's name, `host:port` or
 * a path) and how many times (`count`).
 */
export interface Violation {
  kind: string;
  operation: string;
  target: string;
  count: number;
}

/**
 * What a command consumed, as the sandbox measured it: CPU time (user plus
 * system, and each) in milliseconds and the peak resident set size of its
 * largest process in KiB. All 0 when it did not run.
 */
export interface Usage {
  cpuMs: number;
  maxRssKb: number;
  userMs: number;
  systemMs: number;
}

/** Result.hint of a command refused a subprocess, in this client's terms. */
export const SPAWN_REFUSED_HINT =
  "the command tried to start a subprocess and the sandbox refused it: run it with spawn: true";

/** What a command may do (aleph.host.v1.Capabilities). */
export interface Capabilities {
  fsRead: string[];
  fsWrite: string[];
  networkMode: string;
  networkHosts: string[];
  spawn: boolean;
  memoryMb: number;
  timeoutSeconds: number;
}

/** A command asks for more than its session's baseline and grants. */
export interface ApprovalRequest {
  id: string;
  session: string;
  commandId: string;
  argv: string[];
  summary: string;
  requested: Capabilities;
  baseline: Capabilities;
  policyDigest: string;
}

/** One event of `Client.stream`: output as it arrives, then the exit. */
export type Event = { kind: "stdout" | "stderr"; data: Buffer } | { kind: "exit"; result: Result };

/**
 * Answers an approval request: true (or a promise of true) approves. An
 * approver that throws or rejects does not approve.
 */
export type Approver = (request: ApprovalRequest) => boolean | Promise<boolean>;

/** A grant kept for a session. */
export interface Grant {
  id: string;
  capabilities?: Capabilities;
  networkHost: string;
}

/** A session as `Sessions` describes it. */
export interface Session {
  session: string;
  workspace: string;
  baseline: Capabilities;
  grants: Grant[];
  policyDigest: string;
  /** The session's incarnation on the server ("" when it holds none). */
  incarnation: string;
  /** The server's node id. */
  nodeId: string;
  /**
   * In a list: the session is not active on this server but kept on disk
   * (its workspace and the record naming it, or its grants) from an earlier
   * run or another process; its next command resumes it.
   */
  persistedOnly: boolean;
}

/** The grants of a session. */
export interface Grants {
  session: string;
  grants: Grant[];
  policyDigest: string;
}

/** The verdict of the command policy (`policy check`). */
export interface PolicyVerdict {
  verdict: "allow" | "warn" | "block" | string;
  rule: string;
  reason: string;
}

/** Options of a call other than a command's run. */
export interface CallOptions {
  /** Aborting it cancels the call (the promise rejects with code "canceled"). */
  signal?: AbortSignal;
}

/** The options a command request is built from (StreamOptions' own, and the call's signal). */
const REQUEST_OPTIONS: ReadonlySet<string> = new Set([
  "session", "workspace", "cwd", "read", "write", "net", "spawn", "memoryMb", "timeout", "maxOutput",
  "env", "stdin", "secrets", "signal", "layered",
]);

/** The options of `stream`; they mirror the flags of `aleph-sandbox exec`. */
export interface StreamOptions extends CallOptions {
  /** The session (default "default"): its workspace, grants and limits. */
  session?: string;
  /** A directory of yours as the workspace (made absolute). */
  workspace?: string;
  /** The working directory, relative to the workspace or absolute inside it. */
  cwd?: string;
  /** Paths granted for reading (made absolute). */
  read?: string[];
  /** Paths granted for writing (made absolute). */
  write?: string[];
  /** "none" (default), "all", or hosts. */
  net?: string | string[];
  /** May the command start subprocesses. */
  spawn?: boolean;
  memoryMb?: number;
  /**
   * The command's time limit in seconds; then it is killed and `timedOut`
   * is set. 0, or leaving it out, is the service's default
   * (`sandbox.default_timeout_seconds`; a process or a streamed stdin has
   * none, only the maximum lifetime).
   */
  timeout?: number;
  /** At most this many bytes of each of stdout and stderr are kept. */
  maxOutput?: number;
  env?: Record<string, string>;
  stdin?: string | Uint8Array;
  /** Secrets held by the host; the command sees placeholders. */
  secrets?: Record<string, string>;
  /**
   * Run over the session's layer: the workspace is an overlay, and the
   * host's directory changes only on `apply`. The session's first command
   * fixes whether it is layered.
   */
  layered?: boolean;
  /**
   * Cancelling the command: aborting the signal closes the call, and the
   * service kills the command's process tree.
   */
  signal?: AbortSignal;
  /**
   * (`stream` only) The command's stdin is a stream fed by
   * `Execution.write` and ended by `Execution.closeStdin`, not `stdin`.
   * Such a command has no default timeout, only the service's maximum
   * lifetime of processes.
   */
  stdinStream?: boolean;
}

/** The options of `exec`. */
export interface ExecOptions extends Omit<StreamOptions, "stdinStream"> {
  /** Throw `Denied` instead of returning a denial. */
  check?: boolean;
}

/**
 * The options of `start`: those of `stream` but stdin (a process's stdin
 * comes from `Process.write`), and a terminal on request. `signal` cancels
 * the start call only: the process outlives it.
 */
export interface StartOptions extends Omit<StreamOptions, "stdin" | "stdinStream"> {
  /** A pseudo-terminal of rows × cols as stdin, stdout and stderr (one output stream). */
  tty?: boolean;
  /** The terminal's rows (default 24). */
  rows?: number;
  /** The terminal's columns (default 80). */
  cols?: number;
}

/** The options of `Process.read`. */
export interface ReadOptions extends CallOptions {
  /** Seconds to wait for output when there is none yet (default 1, at most 60 on the service). */
  timeout?: number;
}

/** The options of `Process.wait`. */
export interface WaitOptions extends CallOptions {
  /** Seconds to wait for the end (0 or leaving it out: no bound); then the call fails with "deadline_exceeded" and the process runs on. */
  timeout?: number;
}

/** A process as `processes()` lists it. */
export interface ProcessInfo {
  id: string;
  session: string;
  program: string;
  /** When it started, in milliseconds since the epoch. */
  startedUnixMs: number;
  exited: boolean;
  exitCode: number;
}

/** The signals `Process.signal` sends. */
export type SignalName = "TERM" | "INT" | "HUP" | "QUIT" | "KILL" | "USR1" | "USR2" | "WINCH" | "PIPE";

/** PEM text (a string or a Buffer), as Node's `tls` takes it: read a file with `fs.readFileSync(path)`. */
export type PEM = string | Buffer;

/** The options of `new Client`. */
export interface ClientOptions {
  /**
   * "unix:PATH" (or a path) or "tcp:HOST:PORT"; default: $ALEPH_SANDBOX_HOST,
   * else the socket `serve` listens on by default.
   */
  address?: string;
  /** The same as `address` (its older name); give one of them. */
  socket?: string;
  /**
   * (TCP) The bearer token for a server with a `tokens_file`; default:
   * $ALEPH_SANDBOX_TOKEN. Sent only over TLS.
   */
  token?: string;
  /** (TCP) The CA certificates the server's certificate is checked against (default: Node's trusted CAs). */
  ca?: PEM;
  /** (TCP) This client's certificate, for a server that asks for one (mutual TLS); with `key`. */
  cert?: PEM;
  /** (TCP) The key of `cert`. */
  key?: PEM;
  /**
   * Answers this client's own approval requests. Without one, the service's
   * policy applies (denied unless it runs with --yes or another client
   * answers on `approvals()`).
   */
  approver?: Approver;
  /**
   * Seconds a call other than a command's run may wait for the service:
   * default 30, and so is 0 (as for every timeout of this client and the
   * service's requests, 0 means "not given"); `null`: no bound. A
   * command's own stream is bounded by its `timeout` plus 30 s of slack,
   * and not at all without one.
   */
  timeout?: number | null;
  /**
   * Default true: the client remembers the incarnation of each session from
   * its first answer and sends it with every later call of that session, so
   * that a session whose server went away (behind a router) throws
   * SessionMovedError instead of running in a fresh, empty workspace;
   * `forget()` and `delete()` drop what it remembers. false turns it off.
   */
  trackSessions?: boolean;
}

/** Where a Client's calls go. */
type Target =
  | { kind: "unix"; path: string }
  | { kind: "tcp"; host: string; port: number; tls: https.RequestOptions; token: string | undefined };

function pem(name: string, v: unknown): PEM | undefined {
  if (v === undefined) {
    return undefined;
  }
  if (Buffer.isBuffer(v) || (typeof v === "string" && v.includes("-----BEGIN "))) {
    return v;
  }
  throw new TypeError(`${name} is PEM text (a string or a Buffer holding "-----BEGIN ..."), not a file name: pass fs.readFileSync(${typeof v === "string" ? JSON.stringify(v) : "path"})`);
}

// The bearer token: given, else $ALEPH_SANDBOX_TOKEN, else none.
function bearerToken(given: unknown, env: NodeJS.ProcessEnv): string | undefined {
  let token = given;
  let source = "token";
  if (token === undefined) {
    token = env[TOKEN_ENV] || undefined;
    source = "$" + TOKEN_ENV;
    if (token === undefined) {
      return undefined;
    }
  }
  if (typeof token !== "string") {
    throw new TypeError(`token is a string, got ${typeof token}`);
  }
  const t = token.trim();
  // A token with a line break would write headers of its own.
  if (!/^[\x21-\x7e]+$/.test(t)) {
    throw new TypeError(`${source} is not a bearer token: printable ASCII without spaces, as in the server's tokens_file`);
  }
  return t;
}

function target(address: string, o: ClientOptions): Target {
  const tlsGiven = o.token !== undefined || o.ca !== undefined || o.cert !== undefined || o.key !== undefined;
  if (address.startsWith("tcp:")) {
    const rest = address.slice("tcp:".length);
    const i = rest.lastIndexOf(":");
    let host = i < 0 ? "" : rest.slice(0, i);
    const port = i < 0 ? "" : rest.slice(i + 1);
    if (host.startsWith("[") && host.endsWith("]")) {
      host = host.slice(1, -1); // [::1]:7443
    }
    if (host === "" || !/^[0-9]+$/.test(port) || Number(port) < 1 || Number(port) > 65535) {
      throw new TypeError(`want tcp:HOST:PORT (e.g. tcp:sandbox.example:7443, tcp:[::1]:7443), got ${JSON.stringify(address)}`);
    }
    const ca = pem("ca", o.ca);
    const cert = pem("cert", o.cert);
    const key = pem("key", o.key);
    if ((cert === undefined) !== (key === undefined)) {
      throw new TypeError("cert and key go together: give both for a client certificate, or neither");
    }
    // Node asks for no ALPN protocol: the service then speaks HTTP/1.1,
    // which Connect takes (gRPC is HTTP/2).
    const tls: https.RequestOptions = { minVersion: "TLSv1.2" };
    if (ca !== undefined) {
      tls.ca = ca;
    }
    if (cert !== undefined) {
      tls.cert = cert;
      tls.key = key;
    }
    return { kind: "tcp", host, port: Number(port), tls, token: bearerToken(o.token, process.env) };
  }
  let p = address;
  if (p.startsWith("unix:")) {
    p = p.slice("unix:".length);
  } else if (p.split("/")[0]!.includes(":")) {
    throw new TypeError(`an address is unix:PATH or tcp:HOST:PORT, got ${JSON.stringify(address)}`);
  }
  if (p === "") {
    throw new TypeError("the socket address has no path");
  }
  if (tlsGiven) {
    throw new TypeError("token, ca, cert and key are for tcp: addresses; a unix socket's server authenticates its peers by uid");
  }
  return { kind: "unix", path: p };
}

function describeTarget(t: Target): string {
  return t.kind === "unix" ? "unix:" + t.path : `tcp:${t.host.includes(":") ? `[${t.host}]` : t.host}:${t.port}`;
}

// Node's names for a TLS failure: the server's certificate did not verify,
// or the server refused this client's (an alert).
function isTLSError(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code ?? "";
  return /^ERR_SSL_|^ERR_TLS_|CERT|SIGNATURE|ISSUER|^EPROTO$/.test(code);
}

/** $ALEPH_SANDBOX_HOST, else the socket `serve` listens on by default. */
export function defaultAddress(env: NodeJS.ProcessEnv = process.env): string {
  const host = env.ALEPH_SANDBOX_HOST;
  if (host) {
    return host;
  }
  const run = env.XDG_RUNTIME_DIR;
  if (run && path.isAbsolute(run)) {
    return "unix:" + path.join(run, "aleph-sandbox", "aleph.sock");
  }
  return "unix:" + path.join(os.homedir(), ".local", "state", "aleph-sandbox", "aleph.sock");
}

// Connect's mapping of HTTP statuses to codes, for answers without a body.
const HTTP_CODES: Record<number, Code> = {
  400: "invalid_argument",
  401: "unauthenticated",
  403: "permission_denied",
  404: "unimplemented",
  408: "deadline_exceeded",
  409: "aborted",
  429: "unavailable",
  502: "unavailable",
  503: "unavailable",
  504: "unavailable",
};

type JSONObject = Record<string, unknown>;

function isObject(v: unknown): v is JSONObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function str(v: unknown): string {
  return typeof v === "string" ? v : v === undefined || v === null ? "" : String(v);
}

// 64-bit integers arrive as strings in protobuf JSON.
function num(v: unknown): number {
  const n = typeof v === "number" ? v : typeof v === "string" && v !== "" ? Number(v) : 0;
  return Number.isFinite(n) ? n : 0;
}

function strings(v: unknown): string[] {
  return Array.isArray(v) ? v.map(str) : [];
}

function bytes(v: unknown): Buffer {
  return typeof v === "string" && v !== "" ? Buffer.from(v, "base64") : Buffer.alloc(0);
}

function capabilities(v: unknown): Capabilities {
  const m = isObject(v) ? v : {};
  return {
    fsRead: strings(m.fsRead),
    fsWrite: strings(m.fsWrite),
    networkMode: str(m.networkMode),
    networkHosts: strings(m.networkHosts),
    spawn: m.spawn === true,
    memoryMb: num(m.memoryMb),
    timeoutSeconds: num(m.timeoutSeconds),
  };
}

function violation(v: unknown): Violation {
  const m = isObject(v) ? v : {};
  return { kind: str(m.kind), operation: str(m.operation), target: str(m.target), count: num(m.count) };
}

function usage(v: unknown): Usage {
  const m = isObject(v) ? v : {};
  return { cpuMs: num(m.cpuMs), maxRssKb: num(m.maxRssKb), userMs: num(m.userMs), systemMs: num(m.systemMs) };
}

function result(v: unknown): Result {
  const m = isObject(v) ? v : {};
  return {
    usage: usage(m.usage),
    violations: Array.isArray(m.violations) ? m.violations.map(violation) : [],
    violationsDropped: num(m.violationsDropped),
    violationKinds: strings(m.violationKinds),
    stdout: bytes(m.stdout),
    stderr: bytes(m.stderr),
    exitCode: m.denied === true ? null : num(m.exitCode),
    signal: num(m.signal),
    timedOut: m.timedOut === true,
    truncated: m.truncated === true,
    oomKilled: m.oomKilled === true,
    durationMs: num(m.durationMs),
    denied: m.denied === true,
    reason: str(m.reason),
    rule: str(m.rule),
    reasonCode: str(m.reasonCode),
    commandId: str(m.commandId),
    backend: str(m.backend),
    profileDigest: str(m.profileDigest),
    verdicts: (Array.isArray(m.verdicts) ? m.verdicts : []).map((x: unknown) => {
      const o = isObject(x) ? x : {};
      return { action: str(o.action), rule: str(o.rule), reason: str(o.reason), hook: str(o.hook) };
    }),
    // int64 arrives as a JSON string (the protobuf JSON mapping).
    spawnRefused: num(m.spawnRefused),
    hint: str(m.reasonCode) === "spawn_refused" ? SPAWN_REFUSED_HINT : str(m.hint),
    nodeId: str(m.nodeId),
    sessionIncarnation: str(m.sessionIncarnation),
  };
}

function approvalRequest(v: unknown): ApprovalRequest {
  const m = isObject(v) ? v : {};
  return {
    id: str(m.id),
    session: str(m.session),
    commandId: str(m.commandId),
    argv: strings(m.argv),
    summary: str(m.summary),
    requested: capabilities(m.requested),
    baseline: capabilities(m.baseline),
    policyDigest: str(m.policyDigest),
  };
}

function grant(v: unknown): Grant {
  const m = isObject(v) ? v : {};
  const g: Grant = { id: str(m.id), networkHost: str(m.networkHost) };
  if (m.capabilities !== undefined) {
    g.capabilities = capabilities(m.capabilities);
  }
  return g;
}

function session(v: unknown): Session {
  const m = isObject(v) ? v : {};
  return {
    session: str(m.session),
    workspace: str(m.workspace),
    baseline: capabilities(m.baseline),
    grants: (Array.isArray(m.grants) ? m.grants : []).map(grant),
    policyDigest: str(m.policyDigest),
    incarnation: str(m.incarnation),
    nodeId: str(m.nodeId),
    persistedOnly: m.persistedOnly === true,
  };
}

function grants(v: unknown): Grants {
  const m = isObject(v) ? v : {};
  return {
    session: str(m.session),
    grants: (Array.isArray(m.grants) ? m.grants : []).map(grant),
    policyDigest: str(m.policyDigest),
  };
}

// The service's bound on timeout_seconds; beyond it a request is refused.
const MAX_TIMEOUT = 365 * 24 * 3600;
// The longest delay Node's timers take.
const MAX_TIMER_MS = 2 ** 31 - 1;

// A boolean option: true or false, nothing merely truthy.
function flag(name: string, v: unknown): boolean {
  if (v === undefined) {
    return false;
  }
  if (typeof v !== "boolean") {
    throw new TypeError(`${name} is true or false, got ${JSON.stringify(v)}`);
  }
  return v;
}

// A positive, finite number of seconds. omit says what leaving the option
// out gives instead: on the wire 0 means "not given".
function seconds(name: string, v: unknown, omit: string, max = MAX_TIMEOUT): number {
  if (typeof v !== "number" || !(v > 0 && v <= max)) {
    throw new TypeError(`${name} must be a positive number of seconds of at most ${max}, got ${String(v)}; ${omit}`);
  }
  return v;
}

// A positive whole number (of unit): 0 means "not given" on the wire.
function count(name: string, v: unknown, unit: string, omit: string): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v <= 0) {
    throw new TypeError(`${name} must be a positive whole number of ${unit} (at most ${Number.MAX_SAFE_INTEGER}), got ${String(v)}; ${omit}`);
  }
  return v;
}

function terminalSize(rows: unknown, cols: unknown): [number, number] {
  if (!Number.isInteger(rows) || !Number.isInteger(cols) || (rows as number) < 1 || (cols as number) < 1 || (rows as number) > 65535 || (cols as number) > 65535) {
    throw new TypeError(`rows and cols are integers between 1 and 65535, got ${String(rows)} × ${String(cols)}`);
  }
  return [rows as number, cols as number];
}

// A list of paths, made absolute; a lone string is refused (it would not be
// a list of paths, and a character-by-character reading would grant "/").
function paths(name: string, v: unknown): string[] {
  if (v === undefined) {
    return [];
  }
  if (!Array.isArray(v) || v.some((p) => typeof p !== "string")) {
    throw new TypeError(`${name} is an array of paths, e.g. [${JSON.stringify(typeof v === "string" ? v : "/data")}], got ${JSON.stringify(v)}`);
  }
  return v.map((p: string) => path.resolve(p));
}

// A record of strings (env, secrets): a number or null from plain
// JavaScript would reach the service as JSON it refuses.
function strMap(name: string, v: unknown): Record<string, string> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    throw new TypeError(`${name} is an object of names to strings, e.g. { LANG: "C.UTF-8" }, got ${JSON.stringify(v)}`);
  }
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) {
    if (k === "") {
      throw new TypeError(`${name}: a name is a non-empty string`);
    }
    if (typeof val !== "string") {
      throw new TypeError(`${name}[${JSON.stringify(k)}] is a string, got ${val === null ? "null" : typeof val} ${JSON.stringify(val)}; convert it with String() if that is what you mean`);
    }
    out[k] = val;
  }
  return out;
}

function varint(b: Uint8Array, i: number): [number, number] {
  let n = 0;
  let mul = 1;
  for (;;) {
    if (i >= b.length) {
      throw new RangeError("truncated varint");
    }
    const c = b[i++]!;
    n += (c & 0x7f) * mul;
    mul *= 128;
    if (!(c & 0x80)) {
      return [n, i];
    }
  }
}

// Decodes an aleph.host.v1.ErrorDetail from its protobuf bytes (all its
// fields are strings), so that no protobuf library is needed.
function errorDetail(value: Uint8Array): Partial<ErrorDetail> {
  const names: Record<number, keyof ErrorDetail> = { 1: "reasonCode", 2: "rule", 3: "field", 4: "hook", 5: "driver" };
  const out: Partial<ErrorDetail> = {};
  let i = 0;
  try {
    while (i < value.length) {
      let key: number;
      let n: number;
      [key, i] = varint(value, i);
      if ((key & 7) !== 2) {
        break;
      }
      [n, i] = varint(value, i);
      const name = names[Math.floor(key / 8)];
      if (name) {
        out[name] = Buffer.from(value.subarray(i, i + n)).toString("utf8");
      }
      i += n;
    }
  } catch {
    // A truncated detail: what was read so far stands.
  }
  return out;
}

function errorFrom(obj: unknown, fallbackCode: Code | string = "unknown"): SandboxError {
  const m = isObject(obj) ? obj : {};
  const code = str(m.code) || fallbackCode;
  let detail: Partial<ErrorDetail> = {};
  for (const d of Array.isArray(m.details) ? m.details : []) {
    if (isObject(d) && d.type === "aleph.host.v1.ErrorDetail") {
      detail = errorDetail(bytes(d.value));
      break;
    }
  }
  return new SandboxError(str(m.message), code, detail);
}

function parseError(data: Buffer, status: number): SandboxError {
  let obj: unknown;
  try {
    obj = JSON.parse(data.toString("utf8"));
  } catch {
    obj = { message: data.toString("utf8") || `HTTP status ${status}` };
  }
  return errorFrom(obj, HTTP_CODES[status] ?? "unknown");
}

async function readAll(res: http.IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of res) {
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks);
}

/** What ended a call early, when the client ended it. */
type Ending = { kind: "abort"; reason: unknown } | { kind: "timeout"; seconds: number };

/**
 * One call on its own connection, closed with its answer: a stream holds
 * its connection for as long as the command runs, and closing it is how a
 * command is cancelled.
 */
class Call {
  readonly req: http.ClientRequest;
  private ending: Ending | undefined;
  private answered = false; // the answer's head came
  private readonly onAbort: () => void;

  constructor(
    readonly target: Target,
    method: string,
    contentType: string,
    private readonly signal: AbortSignal | undefined,
    idleSeconds: number,
    session: string | undefined,
    incarnation = "",
  ) {
    const headers: http.OutgoingHttpHeaders = { "Content-Type": contentType, "Connect-Protocol-Version": "1", Connection: "close" };
    if (session) {
      headers[SESSION_HEADER] = sessionHeaderValue(session);
    }
    if (incarnation) {
      headers[INCARNATION_HEADER] = incarnation;
    }
    const common = { path: `/${SERVICE}/${method}`, method: "POST", agent: false as const, headers };
    if (target.kind === "tcp") {
      if (target.token !== undefined) {
        headers.Authorization = "Bearer " + target.token;
      }
      this.req = https.request({ ...common, ...target.tls, host: target.host, port: target.port });
    } else {
      this.req = http.request({ ...common, socketPath: target.path });
    }
    // Errors surface through send() and the response's stream; this
    // listener only keeps a late one (after the answer began) from being
    // an unhandled 'error' event.
    this.req.on("error", () => {});
    this.onAbort = () => this.end({ kind: "abort", reason: signal?.reason });
    signal?.addEventListener("abort", this.onAbort, { once: true });
    // Node's timers take at most 2^31-1 ms (24.8 days): a longer bound
    // would be cut to that with a TimeoutOverflowWarning on the host
    // program's stderr. It is no bound instead.
    if (idleSeconds > 0 && idleSeconds * 1000 <= MAX_TIMER_MS) {
      this.req.setTimeout(idleSeconds * 1000, () => this.end({ kind: "timeout", seconds: idleSeconds }));
    }
  }

  private end(e: Ending): void {
    this.ending ??= e;
    this.req.destroy();
  }

  /** Sends the body; resolves with the response's head. */
  send(body: Buffer): Promise<http.IncomingMessage> {
    if (this.signal?.aborted) {
      this.close();
      return Promise.reject(this.failure(undefined));
    }
    return new Promise((resolve, reject) => {
      this.req.once("response", (res: http.IncomingMessage) => {
        this.answered = true;
        res.on("error", () => {}); // as for req: reported by reading res
        resolve(res);
      });
      this.req.once("error", (err) => reject(this.failure(err)));
      this.req.end(body);
    });
  }

  /** The error to report for err, given how the call ended. */
  failure(err: unknown): SandboxError {
    // How the client ended the call comes first: the error it caused
    // (a reset connection) is only its consequence.
    const e = this.ending ?? (this.signal?.aborted ? { kind: "abort", reason: this.signal.reason } : undefined);
    if (e?.kind === "abort") {
      return new SandboxError("the call was cancelled", "canceled", {}, { cause: e.reason });
    }
    if (e?.kind === "timeout") {
      return new SandboxError(`no answer from the service within ${e.seconds}s`, "deadline_exceeded", {}, { cause: err });
    }
    if (err instanceof SandboxError) {
      return err;
    }
    const msg = err instanceof Error ? err.message : String(err);
    const where = describeTarget(this.target);
    const code = (err as NodeJS.ErrnoException | undefined)?.code ?? "";
    if (this.target.kind === "tcp" && !this.answered && (code === "ECONNRESET" || code === "EPIPE")) {
      // With TLS 1.3 the client's side of the handshake ends before the
      // server has checked the client's certificate: a server that refuses
      // it sends an alert and closes, and a client already writing its
      // request may see only the reset, the alert lost.
      return new SandboxError(`${where}: the server closed the TLS connection before answering (${code}): if it asks for a client certificate (mutual TLS), pass cert and key signed by its client_ca`,
        "unavailable", { reasonCode: "tls" }, { cause: err });
    }
    if (this.target.kind === "tcp" && isTLSError(err)) {
      const code = (err as NodeJS.ErrnoException).code ?? "";
      const hint = /ALERT|EPROTO/.test(code)
        ? "the TLS handshake failed: if the server asks for a client certificate (mutual TLS), pass cert and key signed by its client_ca"
        : "the server's certificate did not verify: pass the CA that signed it as ca";
      return new SandboxError(`${where}: ${hint} (${code}: ${msg})`, "unavailable", { reasonCode: "tls" }, { cause: err });
    }
    return new SandboxError(`cannot reach the service at ${where}: ${msg}`, "unavailable", {}, { cause: err });
  }

  close(): void {
    this.signal?.removeEventListener("abort", this.onAbort);
    this.req.destroy();
  }
}

/** A connection to `aleph-sandbox serve`. */
/** One change of a layered session: kind is "added", "modified", "deleted" or "type_changed". */
export interface Change {
  path: string;
  kind: string;
  type: string;
  oldType: string;
  mode: number;
  oldMode: number;
  size: number;
  target: string;
}

function change(v: unknown): Change {
  const o = isObject(v) ? v : {};
  return {
    path: str(o.path), kind: str(o.kind), type: str(o.type), oldType: str(o.oldType),
    mode: num(o.mode), oldMode: num(o.oldMode), size: num(o.size), target: str(o.target),
  };
}

/** Something apply did not bring to the host, with a stable reason code. */
export interface Refusal {
  path: string;
  reason: string;
  detail: string;
}

/** What one apply did; `git` is the git import's result when it ran. */
export interface ApplyResult {
  applied: string[];
  refused: Refusal[];
  conflicts: string[];
  git?: unknown;
}

/** One entry of a session's workspace, not followed when it is a link. */
export interface FileInfo {
  name: string;
  /** "file", "dir", "link" or "other" (a FIFO, device or socket). */
  kind: "file" | "dir" | "link" | "other";
  size: number;
  /** Permission bits (0o7777). */
  mode: number;
  /** Modification time, milliseconds since the epoch. */
  mtimeMs: number;
  /** A link's target, as stored ("" otherwise). */
  target: string;
}

/** The options of every files call. */
export interface FileOptions extends CallOptions {
  /**
   * A workspace the caller names (an absolute path), as `exec`'s `workspace`
   * names one, checked as exec checks it; left out: the session's own. A
   * write to a live workspace is searched for a planted git repository as a
   * command's writes are (a HEAD git would accept is renamed
   * HEAD.aleph-quarantined, and the audit record says so). On a layered
   * session only its layer's workspace is accepted.
   */
  workspace?: string;
}

export interface WriteFileOptions extends FileOptions {
  /** Permission bits; left out: keep an existing file's, or 0o644. */
  mode?: number;
  /** Create missing directories (default true). */
  parents?: boolean;
}

export interface RemoveFileOptions extends FileOptions {
  /** Remove a directory with what it holds (default: only an empty one). */
  recursive?: boolean;
}

function fileInfo(v: unknown): FileInfo {
  const m = isObject(v) ? v : {};
  const kind = str(m.kind);
  return {
    name: str(m.name),
    kind: kind === "file" || kind === "dir" || kind === "link" ? kind : "other",
    size: num(m.size),
    mode: num(m.mode),
    mtimeMs: num(m.mtimeUnixMs),
    target: str(m.target),
  };
}

/** The data of one WriteFile request: a bigger file goes in parts of one
 * upload (atomic on the service), each well under its request bound. */
export const WRITE_CHUNK = 1 << 20;

function fileSession(session: unknown): string {
  if (typeof session !== "string" || session === "") {
    throw new TypeError("session must be a non-empty string");
  }
  return session;
}

function filePath(path: unknown): string {
  if (typeof path !== "string") {
    throw new TypeError(`path must be a string relative to the session's workspace, got ${typeof path}`);
  }
  return path;
}

function fileMode(mode: unknown): number {
  if (mode === undefined) {
    return 0;
  }
  if (typeof mode !== "number" || !Number.isInteger(mode) || mode <= 0 || mode > 0o7777) {
    throw new TypeError(`mode must be permission bits between 0o1 and 0o7777 (left out: keep an existing file's, or 0o644), got ${String(mode)}`);
  }
  return mode;
}

async function* fileChunks(data: string | Uint8Array | AsyncIterable<Uint8Array> | Iterable<Uint8Array>): AsyncGenerator<Buffer> {
  if (typeof data === "string" || data instanceof Uint8Array) {
    const b = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    yield b.subarray(0, WRITE_CHUNK);
    for (let i = WRITE_CHUNK; i < b.length; i += WRITE_CHUNK) {
      yield b.subarray(i, i + WRITE_CHUNK);
    }
    return;
  }
  // A stream: its chunks regrouped into parts of WRITE_CHUNK.
  let pending: Buffer[] = [];
  let size = 0;
  let any = false;
  for await (const c of data as AsyncIterable<Uint8Array>) {
    const b = Buffer.from(c.buffer, c.byteOffset, c.byteLength);
    pending.push(b);
    size += b.length;
    while (size >= WRITE_CHUNK) {
      const all = Buffer.concat(pending);
      yield all.subarray(0, WRITE_CHUNK);
      any = true;
      pending = [all.subarray(WRITE_CHUNK)];
      size = pending[0].length;
    }
  }
  if (size > 0 || !any) {
    yield Buffer.concat(pending);
  }
}

/**
 * `client.files`: read, write, list, stat and remove files of a session's
 * workspace (the directory its commands run in, made on first use). Paths
 * are relative to it; the service refuses absolute paths and `..`, links
 * leading out, writes to protected entries (`.git`, tool configs:
 * reasonCode "protected_entry", the entry in `rule`), FIFOs and devices,
 * and sizes over its `files_max_bytes` ("resource_exhausted", the limit in
 * `field`). Writes are atomic.
 */
export class Files {
  constructor(private readonly c: Client) {}

  /** The fields every file request starts with. */
  private base(session: string, path: string, options: FileOptions): JSONObject {
    const b: JSONObject = { session: fileSession(session), path: filePath(path) };
    if (options.workspace !== undefined) {
      if (typeof options.workspace !== "string" || options.workspace === "") {
        throw new TypeError(`workspace is an absolute path, got ${JSON.stringify(options.workspace)}`);
      }
      b.workspace = options.workspace;
    }
    return b;
  }

  /** Writes data (a string as UTF-8, bytes, or an iterable of chunks, sent
   * in parts) to path, replacing it atomically. */
  async write(session: string, path: string, data: string | Uint8Array | AsyncIterable<Uint8Array> | Iterable<Uint8Array>, options: WriteFileOptions = {}): Promise<FileInfo> {
    const base: JSONObject = { ...this.base(session, path, options), mode: fileMode(options.mode), parents: options.parents ?? true };
    const it = fileChunks(data);
    let cur = (await it.next()).value as Buffer;
    let next = await it.next();
    if (next.done) {
      const r = await this.c.unary("WriteFile", { ...base, data: cur.toString("base64") }, options, this.c.idleSeconds, session);
      return fileInfo(r.info);
    }
    const uploadId = randomBytes(16).toString("hex");
    let offset = 0;
    for (;;) {
      const more = !next.done;
      const r = await this.c.unary("WriteFile", { ...base, data: cur.toString("base64"), uploadId, offset: String(offset), more }, options, this.c.idleSeconds, session);
      offset += cur.length;
      if (!more) {
        return fileInfo(r.info);
      }
      cur = next.value as Buffer;
      next = await it.next();
    }
  }

  /** The file's bytes in chunks as the service sends them (a large file is
   * never held whole). */
  async *readStream(session: string, path: string, options: FileOptions = {}): AsyncGenerator<Buffer, void, undefined> {
    for await (const m of this.c.serverStream("ReadFile", this.base(session, path, options), options.signal, this.c.idleSeconds, session)) {
      if (typeof m.data === "string" && m.data !== "") {
        yield Buffer.from(m.data, "base64");
      }
    }
  }

  /** The whole file. */
  async read(session: string, path: string, options: FileOptions = {}): Promise<Buffer> {
    const parts: Buffer[] = [];
    for await (const c of this.readStream(session, path, options)) {
      parts.push(c);
    }
    return Buffer.concat(parts);
  }

  /** The entries of a directory (default: the workspace), sorted by name. */
  async list(session: string, path = ".", options: FileOptions = {}): Promise<FileInfo[]> {
    const r = await this.c.unary("ListFiles", this.base(session, path, options), options, this.c.idleSeconds, session);
    return (Array.isArray(r.entries) ? r.entries : []).map(fileInfo);
  }

  async stat(session: string, path: string, options: FileOptions = {}): Promise<FileInfo> {
    const r = await this.c.unary("StatFile", this.base(session, path, options), options, this.c.idleSeconds, session);
    return fileInfo(r.info);
  }

  /** Removes a file, a link (never its target) or an empty directory;
   * recursive removes a directory with what it holds. */
  async remove(session: string, path: string, options: RemoveFileOptions = {}): Promise<void> {
    await this.c.unary("RemoveFile", { ...this.base(session, path, options), recursive: options.recursive ?? false }, options, this.c.idleSeconds, session);
  }
}

export class Client {
  /** The unix socket's path; "" for a TCP address. */
  readonly socketPath: string;
  /** "unix:PATH" or "tcp:HOST:PORT". */
  readonly address: string;
  readonly approver: Approver | undefined;
  /** Seconds a call other than a command's run may wait; null: no bound. */
  readonly timeout: number | null;
  /** @internal The same, 0 for no bound (as Call takes it). */
  readonly idleSeconds: number;
  private readonly target: Target;
  /** Whether this client remembers and sends sessions' incarnations. */
  readonly trackSessions: boolean;
  private readonly incarnations = new Map<string, string>();
  /** The files API of sessions' workspaces (see Files). */
  readonly files: Files = new Files(this);

  constructor(options: ClientOptions = {}) {
    if (options.address !== undefined && options.socket !== undefined && options.address !== options.socket) {
      throw new TypeError("give address or socket (its older name), not both");
    }
    this.target = target(options.address || options.socket || defaultAddress(), options);
    this.socketPath = this.target.kind === "unix" ? this.target.path : "";
    this.address = describeTarget(this.target);
    this.approver = options.approver;
    const t = options.timeout;
    // 0 is "not given", as on the wire and in the Python client: the
    // default. No bound is said with null, never with a 0.
    this.timeout = t === null ? null : t === undefined || t === 0 ? 30 : t;
    if (this.timeout !== null && (typeof this.timeout !== "number" || !(this.timeout > 0 && this.timeout < Infinity))) {
      throw new TypeError(`timeout is a finite number of seconds > 0 (0 or leaving it out: 30; null: no bound), got ${String(t)}`);
    }
    this.idleSeconds = this.timeout ?? 0;
    if (options.trackSessions !== undefined && typeof options.trackSessions !== "boolean") {
      throw new TypeError(`trackSessions is true or false, got ${String(options.trackSessions)}`);
    }
    this.trackSessions = options.trackSessions ?? true;
  }

  // ---- session incarnations ----

  /** The incarnation of session this client saw first ("" for none, or with trackSessions false). */
  incarnation(session: string): string {
    return this.trackSessions ? (this.incarnations.get(session) ?? "") : "";
  }

  private expect(method: string, msg: JSONObject, session: string | undefined): JSONObject {
    const inc = session && EXPECT_METHODS.has(method) ? this.incarnation(session) : "";
    return inc && !msg.expectIncarnation ? { ...msg, expectIncarnation: inc } : msg;
  }

  private learn(session: string | undefined, m: JSONObject): void {
    if (!session || !this.trackSessions || this.incarnations.has(session)) {
      return;
    }
    const inc = incarnationOf(m);
    if (inc) {
      this.incarnations.set(session, inc);
    }
  }

  // ---- transport ----

  /** @internal A unary call; idleSeconds replaces the client's timeout. */
  async unary(method: string, msg: JSONObject, options: CallOptions = {}, idleSeconds = this.idleSeconds, session?: string): Promise<JSONObject> {
    const call = new Call(this.target, method, "application/json", options.signal, idleSeconds, session, session ? this.incarnation(session) : "");
    try {
      const res = await call.send(Buffer.from(JSON.stringify(this.expect(method, msg, session))));
      let data: Buffer;
      try {
        data = await readAll(res);
      } catch (err) {
        throw call.failure(err);
      }
      if (res.statusCode !== 200) {
        throw moved(parseError(data, res.statusCode ?? 0), session);
      }
      if (data.length === 0) {
        return {};
      }
      const obj: unknown = JSON.parse(data.toString("utf8"));
      const out = isObject(obj) ? obj : {};
      this.learn(session, out);
      return out;
    } finally {
      call.close();
    }
  }

  /** @internal A server-streaming call. */
  async *serverStream(method: string, msg: JSONObject, signal: AbortSignal | undefined, idleSeconds: number, session?: string): AsyncGenerator<JSONObject> {
    const body = Buffer.from(JSON.stringify(this.expect(method, msg, session)));
    const head = Buffer.alloc(5);
    head.writeUInt32BE(body.length, 1);
    const call = new Call(this.target, method, "application/connect+json", signal, idleSeconds, session, session ? this.incarnation(session) : "");
    try {
      const res = await call.send(Buffer.concat([head, body]));
      if (res.statusCode !== 200) {
        let data: Buffer;
        try {
          data = await readAll(res);
        } catch (err) {
          throw call.failure(err);
        }
        throw moved(parseError(data, res.statusCode ?? 0), session);
      }
      let buf: Buffer = Buffer.alloc(0);
      try {
        for await (const chunk of res) {
          buf = buf.length === 0 ? (chunk as Buffer) : Buffer.concat([buf, chunk as Buffer]);
          while (buf.length >= 5) {
            const flags = buf[0]!;
            const n = buf.readUInt32BE(1);
            if (buf.length < 5 + n) {
              break;
            }
            const payload = buf.subarray(5, 5 + n);
            buf = buf.subarray(5 + n);
            if (flags & COMPRESSED) {
              throw new SandboxError("compressed frame, though none was asked for", "internal");
            }
            const obj: unknown = n > 0 ? JSON.parse(payload.toString("utf8")) : {};
            const m = isObject(obj) ? obj : {};
            if (flags & END_STREAM) {
              if (m.error !== undefined) {
                throw moved(errorFrom(m.error), session);
              }
              return;
            }
            this.learn(session, m);
            yield m;
          }
        }
      } catch (err) {
        throw call.failure(err);
      }
      throw call.failure(new SandboxError("the service closed the stream without its end", "unavailable"));
    } finally {
      // Also when the caller stops iterating early: closing the connection
      // is what cancels the command on the service's side.
      call.close();
    }
  }

  // ---- commands ----

  private static request(argv: readonly string[], o: StreamOptions): JSONObject {
    if (!Array.isArray(argv) || argv.some((a) => typeof a !== "string")) {
      throw new TypeError('argv is an array of strings, e.g. ["/bin/sh", "-c", "echo hi"]');
    }
    // A misspelt option (memoryMbb, timeoutSecs) would otherwise be
    // dropped and the command run without the limit it meant to set.
    for (const key of Object.keys(o)) {
      if (!REQUEST_OPTIONS.has(key)) {
        throw new TypeError(`unknown option ${JSON.stringify(key)} (known: ${[...REQUEST_OPTIONS].sort().join(", ")})`);
      }
    }
    const req: JSONObject = {
      session: o.session ?? "default",
      argv: [...argv],
      spawn: flag("spawn", o.spawn),
      read: paths("read", o.read),
      write: paths("write", o.write),
      ...netFields(o.net),
    };
    if (o.workspace) {
      req.workspace = path.resolve(o.workspace);
    }
    if (flag("layered", o.layered)) {
      req.layered = true;
    }
    if (o.cwd) {
      req.cwd = o.cwd;
    }
    // On the wire 0 is "not given". memoryMb and maxOutput of 0 are
    // refused: "no memory" or "no output" cannot be what was meant. A
    // timeout of 0 is the service's default, as leaving it out is (and as
    // every timeout of this client): one meaning in both clients.
    if (o.memoryMb !== undefined) {
      req.memoryMb = String(count("memoryMb", o.memoryMb, "MiB", "leave memoryMb out for no memory limit of the command's own"));
    }
    if (o.timeout !== undefined && o.timeout !== 0) {
      req.timeoutSeconds = seconds("timeout", o.timeout, "0 or leaving timeout out is the service's default (sandbox.default_timeout_seconds; there is no unlimited timeout)");
    }
    if (o.maxOutput !== undefined) {
      req.maxOutput = String(count("maxOutput", o.maxOutput, "bytes", "leave maxOutput out for the configured budget (sandbox.max_output_bytes)"));
    }
    if (o.env !== undefined) {
      req.env = strMap("env", o.env);
    }
    if (o.secrets !== undefined) {
      req.secrets = strMap("secrets", o.secrets);
    }
    if (o.stdin !== undefined) {
      req.stdin = (typeof o.stdin === "string" ? Buffer.from(o.stdin, "utf8") : Buffer.from(o.stdin)).toString("base64");
    }
    return req;
  }

  /** @internal Answers one of this client's own approval requests. */
  async answer(approver: Approver, req: ApprovalRequest): Promise<void> {
    let ok = false;
    try {
      ok = (await approver(req)) === true;
    } catch {
      // An approver that fails does not approve.
    }
    try {
      await this.unary("Approve", { id: req.id, approved: ok }, {}, this.idleSeconds, req.session);
    } catch {
      // Timed out or answered elsewhere meanwhile: the command's result says so.
    }
  }

  /**
   * Runs argv and returns its `Execution`: iterating it (`for await`)
   * yields the output as it arrives (events of kind "stdout" and "stderr":
   * each stream's bytes in the order the command wrote them, with no order
   * between the two, which are separate pipes) and then one event of kind
   * "exit" with the Result. While it runs, `Execution.signal` sends it a
   * signal; with `stdinStream: true`, `Execution.write` and `closeStdin`
   * feed its stdin. Nothing is sent before the iteration begins. Stopping
   * the iteration early (break, or aborting `signal`) cancels the command.
   * Bad options throw a `TypeError` here.
   */
  stream(argv: readonly string[], options: StreamOptions = {}): Execution {
    const { stdinStream, ...rest } = options;
    if (flag("stdinStream", stdinStream) && rest.stdin !== undefined) {
      throw new TypeError("stdin is either one buffer up front (stdin) or a stream (stdinStream: true), not both");
    }
    const req = Client.request(argv, rest);
    // Always set, as `exec --host` does: the key only reaches this
    // command, and only while it runs.
    req.signalKey = "sig-" + randomBytes(16).toString("hex");
    if (stdinStream) {
      req.stdinStream = true;
    }
    if (this.approver) {
      req.answerApprovals = true;
    }
    // The command's own limit bounds the wait, plus slack for set-up.
    const idle = typeof req.timeoutSeconds === "number" ? req.timeoutSeconds + 30 : 0;
    return new Execution(this, req, options.signal, idle);
  }

  /**
   * Runs argv and resolves with its Result. A denial is a Result with
   * `denied` set (`check: true` throws `Denied` instead); a failure of the
   * sandbox, a bad request or an unreachable service throws `SandboxError`.
   * It is `stream(argv, options).wait()`: to signal the command while it
   * runs, or to stream its stdin, use `stream`.
   */
  async exec(argv: readonly string[], options: ExecOptions = {}): Promise<Result> {
    const { check, ...rest } = options;
    flag("check", check);
    if ((rest as StreamOptions).stdinStream !== undefined) {
      throw new TypeError("exec resolves at the end, so nothing could write to a streamed stdin: use stream(argv, { stdinStream: true })");
    }
    return this.stream(argv, rest).wait({ check: check === true });
  }

  // ---- processes ----

  /**
   * Starts argv as a process that outlives this call, within its session
   * (forgetting the session, or the service stopping, kills it). It has no
   * timeout unless one is given (the service's maximum lifetime bounds it).
   * The hooks, approval and the driver's start happen in the background: a
   * refusal is the process's Result (`wait()`, or `read()` once it has
   * ended). Its approval requests go to this client's `approver` when it
   * has one, else to the clients on `approvals()`.
   */
  async start(argv: readonly string[], options: StartOptions = {}): Promise<Process> {
    const { tty, rows, cols, signal, ...rest } = options;
    if ((rest as StreamOptions).stdin !== undefined) {
      throw new TypeError("a process's stdin comes from Process.write");
    }
    const req: JSONObject = { command: Client.request(argv, rest) };
    if (flag("tty", tty)) {
      [req.rows, req.cols] = terminalSize(rows ?? 24, cols ?? 80);
      req.tty = true;
    } else if (rows !== undefined || cols !== undefined) {
      throw new TypeError("rows and cols are a terminal's size: pass tty: true with them");
    }
    const name = str((req.command as JSONObject).session);
    if (this.approver) {
      // The process asks after this call has returned (it starts in the
      // background): its requests go to this client's approver through an
      // Approvals stream of its own key, which the service ends once the
      // process is past its approval.
      const key = "apr-" + randomBytes(16).toString("hex");
      req.approvalKey = key;
      void this.serveApprovals(this.approver, key, name);
    }
    const r = await this.unary("StartProcess", req, signal ? { signal } : {}, this.idleSeconds, name);
    return new Process(this, str(r.id), name);
  }

  private async serveApprovals(approver: Approver, key: string, session: string): Promise<void> {
    try {
      // With the process's session in the header: a proxy that routes by
      // session sends the stream to the server that runs the process.
      for await (const msg of this.serverStream("Approvals", { key }, undefined, 0, session)) {
        await this.answer(approver, approvalRequest(msg));
      }
    } catch {
      // The service went away: the process is denied, and its result says so.
    }
  }

  /** The processes of a session (every session's without one), oldest first. */
  async processes(options: CallOptions & { session?: string } = {}): Promise<ProcessInfo[]> {
    const r = await this.unary("ListProcesses", { session: options.session ?? "" }, options, this.idleSeconds, options.session);
    return (Array.isArray(r.processes) ? r.processes : []).map((v: unknown) => {
      const m = isObject(v) ? v : {};
      return {
        id: str(m.id),
        session: str(m.session),
        program: str(m.program),
        startedUnixMs: num(m.startedUnixMs),
        exited: m.exited === true,
        exitCode: num(m.exitCode),
      };
    });
  }

  // ---- approvals, sessions, grants ----

  /**
   * Answers an approval request (from `approvals()` or a command's own).
   * `session`, the request's, is sent as the X-Aleph-Session header for
   * proxies that route by session.
   */
  async approve(requestId: string, approved: boolean, options: CallOptions & { session?: string } = {}): Promise<void> {
    await this.unary("Approve", { id: requestId, approved: approved === true }, options, this.idleSeconds, options.session);
  }

  /**
   * Approval requests of commands whose clients do not answer their own,
   * until the service stops or `signal` is aborted; answer each with
   * `approve()`.
   */
  async *approvals(options: CallOptions = {}): AsyncGenerator<ApprovalRequest, void, undefined> {
    for await (const msg of this.serverStream("Approvals", {}, options.signal, 0)) {
      yield approvalRequest(msg);
    }
  }

  /**
   * The sessions this service has run or been asked about, and those kept on
   * disk from before it started (`persistedOnly`).
   */
  async sessions(options: CallOptions = {}): Promise<Session[]> {
    const r = await this.unary("Sessions", { list: {} }, options);
    return (Array.isArray(r.sessions) ? r.sessions : []).map(session);
  }

  /** One session: workspace, baseline, grants, policy digest. */
  async describe(name: string, options: CallOptions = {}): Promise<Session | undefined> {
    const r = await this.unary("Sessions", { describe: { session: name } }, options, this.idleSeconds, name);
    const s = Array.isArray(r.sessions) ? r.sessions : [];
    return s.length > 0 ? session(s[0]) : undefined;
  }

  /** Forgets a session; the incarnation this client remembers of it goes too. */
  async forget(name: string, options: CallOptions = {}): Promise<void> {
    this.incarnations.delete(name);
    await this.unary("Sessions", { forget: { session: name } }, options, this.idleSeconds, name);
  }

  /**
   * Deletes a session: its processes and commands end, its private HOME,
   * kept grants and the workspace the service made for it are removed (a
   * workspace you named stays). `forget()` keeps the workspace.
   */
  async delete(name: string, options: CallOptions = {}): Promise<void> {
    this.incarnations.delete(name);
    await this.unary("Sessions", { delete: { session: name } }, options, this.idleSeconds, name);
  }

  /** What the layered session changed over its workspace, sorted by path. */
  async changes(name: string, options: CallOptions = {}): Promise<Change[]> {
    const r = await this.unary("Changes", { session: name }, options, this.idleSeconds, name);
    return (Array.isArray(r.changes) ? r.changes : []).map(change);
  }

  /** A unified diff of the layered session's text changes, all or those at or below `paths`. */
  async diff(name: string, paths?: string[], options: CallOptions = {}): Promise<string> {
    const msg: JSONObject = { session: name };
    if (paths !== undefined) {
      msg.paths = strings(paths);
    }
    return str((await this.unary("Diff", msg, options, this.idleSeconds, name)).diff);
  }

  /**
   * Brings the layered session's changes (all, or those at or below
   * `paths`) to the host: what was applied, what was refused (each with
   * its reason) and what conflicted.
   */
  async apply(name: string, paths?: string[], options: CallOptions & { allowLarge?: boolean } = {}): Promise<ApplyResult> {
    const msg: JSONObject = { session: name };
    if (paths !== undefined) {
      msg.paths = strings(paths);
    }
    if (options.allowLarge) {
      msg.allowLarge = true;
    }
    const { allowLarge: _a, ...call } = options;
    const r = await this.unary("Apply", msg, call, this.idleSeconds, name);
    return {
      applied: strings(r.applied),
      refused: (Array.isArray(r.refused) ? r.refused : []).map((x) => {
        const o = isObject(x) ? x : {};
        return { path: str(o.path), reason: str(o.reason), detail: str(o.detail) };
      }),
      conflicts: strings(r.conflicts),
      git: typeof r.gitJson === "string" && r.gitJson !== "" ? JSON.parse(r.gitJson) : undefined,
    };
  }

  /** Drops the layered session's layer; the host never saw it. */
  async discard(name: string, options: CallOptions = {}): Promise<void> {
    await this.unary("Discard", { session: name }, options, this.idleSeconds, name);
  }

  async grants(name: string, options: CallOptions = {}): Promise<Grants> {
    return grants(await this.unary("Grants", { list: { session: name } }, options, this.idleSeconds, name));
  }

  async revoke(name: string, grantId: string, options: CallOptions = {}): Promise<Grants> {
    return grants(await this.unary("Grants", { revoke: { session: name, grantId } }, options, this.idleSeconds, name));
  }

  /** Grants host:port to a session, provided its policy digest is still expectedDigest. */
  async applyNetworkGrant(name: string, host: string, port: number, expectedDigest: string, options: CallOptions = {}): Promise<Grants> {
    return grants(await this.unary("Grants", { applyNetwork: { session: name, host, port: Math.trunc(port), expectedDigest } }, options, this.idleSeconds, name));
  }

  /** The driver's capability report, as `doctor` shows it, with the server's node id as `node_id`. */
  async capabilities(options: CallOptions = {}): Promise<Record<string, unknown>> {
    const r = await this.unary("Capabilities", {}, options);
    const obj: unknown = JSON.parse(str(r.reportJson) || "{}");
    return { ...(isObject(obj) ? obj : {}), node_id: str(r.nodeId) };
  }

  /**
   * Makes the server drain (as on SIGTERM, without stopping): not ready,
   * new sessions refused (reasonCode "draining"), the sessions it holds
   * still served.
   */
  async drain(options: CallOptions = {}): Promise<{ nodeId: string; started: boolean; sessions: number; runningCommands: number; runningProcesses: number }> {
    const r = await this.unary("Drain", {}, options);
    return { nodeId: str(r.nodeId), started: r.started === true, sessions: num(r.sessions), runningCommands: num(r.runningCommands), runningProcesses: num(r.runningProcesses) };
  }

  /** `policy check`: the command policy's verdict on a command string. */
  async checkPolicy(command: string, options: CallOptions & { stdin?: string | Uint8Array } = {}): Promise<PolicyVerdict> {
    const msg: JSONObject = { command };
    if (options.stdin !== undefined) {
      msg.stdin = (typeof options.stdin === "string" ? Buffer.from(options.stdin, "utf8") : Buffer.from(options.stdin)).toString("base64");
    }
    const r = await this.unary("CheckPolicy", msg, options);
    return { verdict: str(r.verdict), rule: str(r.rule), reason: str(r.reason) };
  }
}

const SIGNALS: readonly string[] = ["TERM", "INT", "HUP", "QUIT", "KILL", "USR1", "USR2", "WINCH", "PIPE"];

// A signal's name as the service takes it ("SIGTERM" and "term" are TERM).
function signalName(name: unknown): string {
  const n = typeof name === "string" ? name.trim().toUpperCase().replace(/^SIG/, "") : "";
  if (!SIGNALS.includes(n)) {
    throw new TypeError(`signal is one of ${SIGNALS.join(", ")}, got ${JSON.stringify(name)}`);
  }
  return n;
}

// The most one WriteStdin carries (the service's limit).
const STDIN_CHUNK = 1 << 20;

function notRunning(message: string): SandboxError {
  return new SandboxError(message, "not_found", { reasonCode: "not_running", field: "signal_key" });
}

// Waits ms, or rejects with "canceled" when signal is aborted first.
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const cancelled = () => new SandboxError("the call was cancelled", "canceled", {}, { cause: signal?.reason });
    if (signal?.aborted) {
      reject(cancelled());
      return;
    }
    const onAbort = () => {
      clearTimeout(t);
      reject(cancelled());
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * A command run by `Client.stream`. Iterate it (`for await`) for its
 * events, or `wait()` for its Result; `signal()`, `write()` and
 * `closeStdin()` reach the command while it runs. Nothing is sent before
 * the iteration (or `wait`) begins; leaving the iteration early, or
 * `return()`, closes the call, which cancels the command.
 */
export class Execution implements AsyncGenerator<Event, void, undefined> {
  /** The key naming this command to Signal, WriteStdin and CloseStdin. */
  readonly signalKey: string;
  /** The command's session (sent with every call about it). */
  readonly session: string;
  /** The Result, once the "exit" event has come. */
  result: Result | undefined;
  private readonly stdinStream: boolean;
  private readonly events: AsyncGenerator<Event, void, undefined>;
  private sent = false; // the request is on its way
  private running = false; // a message came: the service has the call
  private ended = false; // the stream is over
  private closed = false; // closed by the client before the result
  private failure: unknown = undefined;
  // The output as it came: the service sends each byte once, as a chunk,
  // and its result carries only what it could not stream.
  private stdoutChunks: Buffer[] = [];
  private stderrChunks: Buffer[] = [];

  /** @internal Made by `Client.stream`. */
  constructor(
    readonly client: Client,
    req: JSONObject,
    signal: AbortSignal | undefined,
    idleSeconds: number,
  ) {
    this.signalKey = str(req.signalKey);
    this.session = str(req.session);
    this.stdinStream = req.stdinStream === true;
    this.events = this.run(req, signal, idleSeconds);
  }

  private async *run(req: JSONObject, signal: AbortSignal | undefined, idleSeconds: number): AsyncGenerator<Event, void, undefined> {
    this.sent = true;
    const approver = this.client.approver;
    try {
      for await (const msg of this.client.serverStream("Execute", req, signal, idleSeconds, this.session)) {
        // Any message means the service has the call: its key is
        // registered before the command's first output.
        this.running = true;
        if (isObject(msg.output)) {
          const out = msg.output;
          const data = bytes(out.data);
          const kind = out.stream === "STREAM_STDERR" ? "stderr" : "stdout";
          (kind === "stderr" ? this.stderrChunks : this.stdoutChunks).push(data);
          yield { kind, data };
        } else if (isObject(msg.approvalRequest)) {
          if (approver) {
            // Not awaited: the stream must keep being read meanwhile.
            void this.client.answer(approver, approvalRequest(msg.approvalRequest));
          }
        } else if (isObject(msg.result)) {
          this.result = result(msg.result);
          if (msg.result.outputStreamed === true) {
            // The Result's output is the whole of it: the chunks, then the
            // rest the service could not stream (normally none). A service
            // that predates outputStreamed repeated it all in the result.
            this.result.stdout = Buffer.concat([...this.stdoutChunks, this.result.stdout]);
            this.result.stderr = Buffer.concat([...this.stderrChunks, this.result.stderr]);
          }
          this.stdoutChunks = [];
          this.stderrChunks = [];
          yield { kind: "exit", result: this.result };
        }
      }
    } catch (err) {
      this.failure = err;
      throw err;
    } finally {
      this.ended = true;
    }
  }

  next(): Promise<IteratorResult<Event, void>> {
    return this.events.next();
  }

  /** Closes the call; a command still running is killed. */
  return(value?: void | PromiseLike<void>): Promise<IteratorResult<Event, void>> {
    if (this.sent && this.result === undefined) {
      this.closed = true;
    }
    return this.events.return(value);
  }

  throw(err: unknown): Promise<IteratorResult<Event, void>> {
    return this.events.throw(err);
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /**
   * Reads the rest of the stream and resolves with the Result (`check:
   * true` throws `Denied` for a denial); the output not yet iterated is in
   * the Result's stdout and stderr, within the output budget.
   */
  async wait(options: { check?: boolean } = {}): Promise<Result> {
    flag("check", options.check);
    while (!(await this.next()).done) {
      // The events are in the Result.
    }
    if (this.result === undefined) {
      if (this.failure !== undefined) {
        throw this.failure;
      }
      if (this.closed) {
        throw new SandboxError("the call was closed before the command ended", "canceled");
      }
      throw new SandboxError("the service ended the stream without a result", "internal");
    }
    if (options.check === true && this.result.denied) {
      throw new Denied(this.result);
    }
    return this.result;
  }

  // A call naming this command by its key. Until the first message the
  // service may not have the call yet: NotFound is tried again (for at most
  // the client's timeout), as `exec --host` does; after it, NotFound means
  // the command has ended.
  private async call(method: string, msg: JSONObject, options: CallOptions, idleSeconds?: number): Promise<JSONObject> {
    if (!this.sent) {
      throw notRunning("the command has not been sent yet: iterate the stream (or call wait) first");
    }
    const deadline = this.client.idleSeconds > 0 ? Date.now() + this.client.idleSeconds * 1000 : Infinity;
    let ms = 5;
    for (;;) {
      if (this.ended) {
        throw notRunning("the command has ended");
      }
      const running = this.running;
      try {
        return await this.client.unary(method, msg, options, idleSeconds ?? this.client.idleSeconds, this.session);
      } catch (err) {
        if (!(err instanceof SandboxError) || err.code !== "not_found" || running || Date.now() > deadline) {
          throw err;
        }
      }
      await pause(ms, options.signal);
      ms = Math.min(2 * ms, 100);
    }
  }

  /**
   * Sends the running command a signal: "TERM", "INT", "HUP", "QUIT",
   * "KILL", "USR1", "USR2", "WINCH" or "PIPE". The command decides what it
   * means (a shell trap runs; unhandled, TERM ends it with signal 15).
   * Before the command is handed to the sandbox (during its hooks or
   * approval), any signal but WINCH and PIPE stops it: nothing runs.
   * Rejects with reasonCode "not_running" once it has ended.
   */
  async signal(name: SignalName, options: CallOptions = {}): Promise<void> {
    await this.call("Signal", { signalKey: this.signalKey, signal: signalName(name) }, options);
  }

  /**
   * Writes to the command's streamed stdin (`stdinStream: true`); resolves
   * with the bytes taken, fewer only when the command ended or closed its
   * stdin meanwhile. Waits while the service holds as much unread input as
   * it keeps (64 KiB): the command's pace bounds the writer's.
   */
  async write(data: string | Uint8Array, options: CallOptions = {}): Promise<number> {
    if (!this.stdinStream) {
      throw new TypeError("this command's stdin is not a stream: pass stdinStream: true to stream()");
    }
    if (typeof data !== "string" && !(data instanceof Uint8Array)) {
      throw new TypeError(`data is a string or bytes, got ${typeof data}`);
    }
    const b = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    let written = 0;
    for (let i = 0; i < b.length; i += STDIN_CHUNK) {
      const piece = b.subarray(i, i + STDIN_CHUNK);
      // Backpressure may hold the call as long as the command does not read.
      const r = await this.call("WriteStdin", { signalKey: this.signalKey, data: piece.toString("base64") }, options, 0);
      const n = num(r.written);
      written += n;
      if (n < piece.length) {
        break;
      }
    }
    return written;
  }

  /** Ends the streamed stdin: the command reads end-of-file after what was written. */
  async closeStdin(options: CallOptions = {}): Promise<void> {
    if (!this.stdinStream) {
      throw new TypeError("this command's stdin is not a stream: pass stdinStream: true to stream()");
    }
    await this.call("CloseStdin", { signalKey: this.signalKey }, options);
  }
}

/**
 * A process started by `Client.start` (or attached to by its id). `read()`
 * follows its output (stdout and stderr merged as the service reads them:
 * each stream's bytes in order, no order between the two, which are
 * separate pipes; one stream on a terminal) from where the last read
 * ended; the service keeps the last 1 MiB of it, and `dropped` counts what
 * a slow reader lost. Errors are
 * `SandboxError`s: reasonCode "process_unknown" (never started, waited for
 * already, or its session forgotten), "process_ended", "stdin_closed".
 */
export class Process {
  /** The output offset the next `read()` starts from. */
  offset = 0;
  /** Bytes lost to the service's bound between reads. */
  dropped = 0;
  /** Set once a read reached the end of a process that has ended, or `wait()` returned. */
  exited = false;
  /** How it ended, once `exited`. */
  result: Result | undefined;

  /**
   * A process of client's service by its id. session, when known, is sent
   * with every call about it (the X-Aleph-Session header, for proxies that
   * route by session); `start` sets it.
   */
  constructor(
    readonly client: Client,
    readonly id: string,
    readonly session?: string,
  ) {
    if (typeof id !== "string" || id === "") {
      throw new TypeError("a process id is a non-empty string");
    }
  }

  /** Writes to the process's stdin (waits while its pipe is full); resolves with the bytes taken. */
  async write(data: string | Uint8Array, options: CallOptions = {}): Promise<number> {
    const b = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    // Backpressure may hold the call as long as the process does not read.
    const r = await this.client.unary("WriteProcess", { id: this.id, data: b.toString("base64") }, options, 0, this.session);
    return num(r.written);
  }

  /** Ends the stdin: the process reads end-of-file after what was written. */
  async closeStdin(options: CallOptions = {}): Promise<void> {
    await this.client.unary("CloseProcessStdin", { id: this.id }, options, this.client.idleSeconds, this.session);
  }

  /**
   * The output since the last read, waiting up to `timeout` seconds when
   * there is none yet; an empty Buffer when none came, or when the process
   * has ended (then `exited` and `result` are set).
   */
  async read(options: ReadOptions = {}): Promise<Buffer> {
    const wait = options.timeout ?? 1;
    // Infinity would reach the service as null, that is 0: no wait at all.
    if (typeof wait !== "number" || !(wait >= 0 && wait < Infinity)) {
      throw new TypeError(`timeout is a finite number of seconds >= 0 (the service waits at most 60), got ${String(options.timeout)}`);
    }
    const r = await this.client.unary("ReadProcess", { id: this.id, offset: String(this.offset), waitSeconds: wait }, options, Math.min(wait, 60) + 30, this.session);
    this.offset = num(r.nextOffset) || this.offset;
    this.dropped += num(r.dropped);
    if (r.exited === true) {
      this.exited = true;
      if (r.result !== undefined) {
        this.result = result(r.result);
      }
    }
    return bytes(r.data);
  }

  /** Sets the window size of a process started with `tty: true`. */
  async resize(rows: number, cols: number, options: CallOptions = {}): Promise<void> {
    terminalSize(rows, cols);
    await this.client.unary("ResizeProcess", { id: this.id, rows, cols }, options, this.client.idleSeconds, this.session);
  }

  /** Sends a signal: "TERM", "INT", "HUP", "QUIT", "KILL", "USR1", "USR2", "WINCH" or "PIPE". */
  async signal(name: SignalName, options: CallOptions = {}): Promise<void> {
    await this.client.unary("SignalProcess", { id: this.id, signal: signalName(name) }, options, this.client.idleSeconds, this.session);
  }

  /**
   * Waits for the end and resolves with the Result (its stdout and stderr
   * are the output the pipeline kept; `read()` gives the rest, before the
   * wait). The process is then gone from the service.
   */
  async wait(options: WaitOptions = {}): Promise<Result> {
    const t = options.timeout ?? 0;
    if (typeof t !== "number" || !(t >= 0 && t < Infinity)) {
      throw new TypeError(`timeout is a finite number of seconds >= 0 (0 or leaving it out: no bound), got ${String(options.timeout)}`);
    }
    const r = await this.client.unary("WaitProcess", { id: this.id }, options, t, this.session);
    this.exited = true;
    this.result = result(r.result);
    return this.result;
  }
}

/**
 * The request's network: a string is the CLI's syntax ("none", "all", or
 * hosts joined by commas), sent as `net` for the service to read; an array
 * of hosts travels as it is, one host an entry (`netHosts`), instead of
 * being joined into that syntax to be split again.
 */
function netFields(net: string | string[] | undefined): JSONObject {
  if (net === undefined) {
    return { net: "none" };
  }
  if (typeof net === "string") {
    return { net };
  }
  if (!Array.isArray(net) || !net.every((h) => typeof h === "string")) {
    throw new TypeError(`net is "none", "all" or hosts: a string ("a.example,b.example") or an array of strings, got ${JSON.stringify(net)}`);
  }
  const hosts = net.map((h) => h.trim()).filter((h) => h !== "");
  if (hosts.length === 0) {
    return { net: "none" };
  }
  if (hosts.length === 1 && ["none", "all"].includes(hosts[0].toLowerCase())) {
    return { net: hosts[0] };
  }
  return { netHosts: hosts };
}
