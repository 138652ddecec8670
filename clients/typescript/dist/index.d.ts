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
/**
 * The header every call concerning a session carries (its value the
 * session, percent-encoded), so that a proxy can route by it; the service
 * refuses one that disagrees with the request's body.
 */
export declare const SESSION_HEADER = "X-Aleph-Session";
/** The environment variable a TCP client takes its bearer token from when none is given. */
export declare const TOKEN_ENV = "ALEPH_SANDBOX_TOKEN";
/**
 * The header carrying the session incarnation a call expects (beside the
 * request's expectIncarnation): a server that does not hold it refuses the
 * call with SessionMovedError instead of making the session afresh.
 */
export declare const INCARNATION_HEADER = "X-Aleph-Incarnation";
/**
 * A session's header value: its UTF-8 bytes percent-encoded outside the
 * printable ASCII range (and '%'), so that any name is a valid header
 * value and a plain one ("s1") is itself. The service decodes it; the
 * Python client encodes alike.
 */
export declare function sessionHeaderValue(session: string): string;
/** The Connect status codes an error carries (https://connectrpc.com/docs/protocol#error-codes). */
export type Code = "canceled" | "unknown" | "invalid_argument" | "deadline_exceeded" | "not_found" | "already_exists" | "permission_denied" | "resource_exhausted" | "failed_precondition" | "aborted" | "out_of_range" | "unimplemented" | "internal" | "unavailable" | "data_loss" | "unauthenticated";
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
export declare class SandboxError extends Error implements ErrorDetail {
    readonly code: Code | string;
    readonly reasonCode: string;
    readonly rule: string;
    readonly field: string;
    readonly hook: string;
    readonly driver: string;
    constructor(message: string, code?: Code | string, detail?: Partial<ErrorDetail>, options?: {
        cause?: unknown;
    });
    toString(): string;
}
/**
 * The pipeline decided not to run the command (thrown by
 * `exec(argv, {check: true})`); `result` is the denial's Result.
 */
export declare class Denied extends SandboxError {
    readonly result: Result;
    constructor(result: Result);
}
/**
 * The session's server is gone, or the session was forgotten and made
 * again: the server that answered does not hold the incarnation this
 * client saw (reasonCode "session_moved"). Nothing ran. Its workspace,
 * processes and grants are not there: start a new session (another name),
 * or `forget()` this one to accept a fresh, empty one under the same name.
 */
export declare class SessionMovedError extends SandboxError {
    /** The session's name. */
    readonly session: string;
    constructor(message: string, code: Code | string, detail: Partial<ErrorDetail>, session: string);
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
export declare const SPAWN_REFUSED_HINT = "the command tried to start a subprocess and the sandbox refused it: run it with spawn: true";
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
export type Event = {
    kind: "stdout" | "stderr";
    data: Buffer;
} | {
    kind: "exit";
    result: Result;
};
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
/** $ALEPH_SANDBOX_HOST, else the socket `serve` listens on by default. */
export declare function defaultAddress(env?: NodeJS.ProcessEnv): string;
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
/** The data of one WriteFile request: a bigger file goes in parts of one
 * upload (atomic on the service), each well under its request bound. */
export declare const WRITE_CHUNK: number;
/**
 * `client.files`: read, write, list, stat and remove files of a session's
 * workspace (the directory its commands run in, made on first use). Paths
 * are relative to it; the service refuses absolute paths and `..`, links
 * leading out, writes to protected entries (`.git`, tool configs:
 * reasonCode "protected_entry", the entry in `rule`), FIFOs and devices,
 * and sizes over its `files_max_bytes` ("resource_exhausted", the limit in
 * `field`). Writes are atomic.
 */
export declare class Files {
    private readonly c;
    constructor(c: Client);
    /** The fields every file request starts with. */
    private base;
    /** Writes data (a string as UTF-8, bytes, or an iterable of chunks, sent
     * in parts) to path, replacing it atomically. */
    write(session: string, path: string, data: string | Uint8Array | AsyncIterable<Uint8Array> | Iterable<Uint8Array>, options?: WriteFileOptions): Promise<FileInfo>;
    /** The file's bytes in chunks as the service sends them (a large file is
     * never held whole). */
    readStream(session: string, path: string, options?: FileOptions): AsyncGenerator<Buffer, void, undefined>;
    /** The whole file. */
    read(session: string, path: string, options?: FileOptions): Promise<Buffer>;
    /** The entries of a directory (default: the workspace), sorted by name. */
    list(session: string, path?: string, options?: FileOptions): Promise<FileInfo[]>;
    stat(session: string, path: string, options?: FileOptions): Promise<FileInfo>;
    /** Removes a file, a link (never its target) or an empty directory;
     * recursive removes a directory with what it holds. */
    remove(session: string, path: string, options?: RemoveFileOptions): Promise<void>;
}
export declare class Client {
    /** The unix socket's path; "" for a TCP address. */
    readonly socketPath: string;
    /** "unix:PATH" or "tcp:HOST:PORT". */
    readonly address: string;
    readonly approver: Approver | undefined;
    /** Seconds a call other than a command's run may wait; null: no bound. */
    readonly timeout: number | null;
    private readonly target;
    /** Whether this client remembers and sends sessions' incarnations. */
    readonly trackSessions: boolean;
    private readonly incarnations;
    /** The files API of sessions' workspaces (see Files). */
    readonly files: Files;
    constructor(options?: ClientOptions);
    /** The incarnation of session this client saw first ("" for none, or with trackSessions false). */
    incarnation(session: string): string;
    private expect;
    private learn;
    private static request;
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
    stream(argv: readonly string[], options?: StreamOptions): Execution;
    /**
     * Runs argv and resolves with its Result. A denial is a Result with
     * `denied` set (`check: true` throws `Denied` instead); a failure of the
     * sandbox, a bad request or an unreachable service throws `SandboxError`.
     * It is `stream(argv, options).wait()`: to signal the command while it
     * runs, or to stream its stdin, use `stream`.
     */
    exec(argv: readonly string[], options?: ExecOptions): Promise<Result>;
    /**
     * Starts argv as a process that outlives this call, within its session
     * (forgetting the session, or the service stopping, kills it). It has no
     * timeout unless one is given (the service's maximum lifetime bounds it).
     * The hooks, approval and the driver's start happen in the background: a
     * refusal is the process's Result (`wait()`, or `read()` once it has
     * ended). Its approval requests go to this client's `approver` when it
     * has one, else to the clients on `approvals()`.
     */
    start(argv: readonly string[], options?: StartOptions): Promise<Process>;
    private serveApprovals;
    /** The processes of a session (every session's without one), oldest first. */
    processes(options?: CallOptions & {
        session?: string;
    }): Promise<ProcessInfo[]>;
    /**
     * Answers an approval request (from `approvals()` or a command's own).
     * `session`, the request's, is sent as the X-Aleph-Session header for
     * proxies that route by session.
     */
    approve(requestId: string, approved: boolean, options?: CallOptions & {
        session?: string;
    }): Promise<void>;
    /**
     * Approval requests of commands whose clients do not answer their own,
     * until the service stops or `signal` is aborted; answer each with
     * `approve()`.
     */
    approvals(options?: CallOptions): AsyncGenerator<ApprovalRequest, void, undefined>;
    /**
     * The sessions this service has run or been asked about, and those kept on
     * disk from before it started (`persistedOnly`).
     */
    sessions(options?: CallOptions): Promise<Session[]>;
    /** One session: workspace, baseline, grants, policy digest. */
    describe(name: string, options?: CallOptions): Promise<Session | undefined>;
    /** Forgets a session; the incarnation this client remembers of it goes too. */
    forget(name: string, options?: CallOptions): Promise<void>;
    /**
     * Deletes a session: its processes and commands end, its private HOME,
     * kept grants and the workspace the service made for it are removed (a
     * workspace you named stays). `forget()` keeps the workspace.
     */
    delete(name: string, options?: CallOptions): Promise<void>;
    /** What the layered session changed over its workspace, sorted by path. */
    changes(name: string, options?: CallOptions): Promise<Change[]>;
    /** A unified diff of the layered session's text changes, all or those at or below `paths`. */
    diff(name: string, paths?: string[], options?: CallOptions): Promise<string>;
    /**
     * Brings the layered session's changes (all, or those at or below
     * `paths`) to the host: what was applied, what was refused (each with
     * its reason) and what conflicted.
     */
    apply(name: string, paths?: string[], options?: CallOptions & {
        allowLarge?: boolean;
    }): Promise<ApplyResult>;
    /** Drops the layered session's layer; the host never saw it. */
    discard(name: string, options?: CallOptions): Promise<void>;
    grants(name: string, options?: CallOptions): Promise<Grants>;
    revoke(name: string, grantId: string, options?: CallOptions): Promise<Grants>;
    /** Grants host:port to a session, provided its policy digest is still expectedDigest. */
    applyNetworkGrant(name: string, host: string, port: number, expectedDigest: string, options?: CallOptions): Promise<Grants>;
    /** The driver's capability report, as `doctor` shows it, with the server's node id as `node_id`. */
    capabilities(options?: CallOptions): Promise<Record<string, unknown>>;
    /**
     * Makes the server drain (as on SIGTERM, without stopping): not ready,
     * new sessions refused (reasonCode "draining"), the sessions it holds
     * still served.
     */
    drain(options?: CallOptions): Promise<{
        nodeId: string;
        started: boolean;
        sessions: number;
        runningCommands: number;
        runningProcesses: number;
    }>;
    /** `policy check`: the command policy's verdict on a command string. */
    checkPolicy(command: string, options?: CallOptions & {
        stdin?: string | Uint8Array;
    }): Promise<PolicyVerdict>;
}
/**
 * A command run by `Client.stream`. Iterate it (`for await`) for its
 * events, or `wait()` for its Result; `signal()`, `write()` and
 * `closeStdin()` reach the command while it runs. Nothing is sent before
 * the iteration (or `wait`) begins; leaving the iteration early, or
 * `return()`, closes the call, which cancels the command.
 */
export declare class Execution implements AsyncGenerator<Event, void, undefined> {
    readonly client: Client;
    /** The key naming this command to Signal, WriteStdin and CloseStdin. */
    readonly signalKey: string;
    /** The command's session (sent with every call about it). */
    readonly session: string;
    /** The Result, once the "exit" event has come. */
    result: Result | undefined;
    private readonly stdinStream;
    private readonly events;
    private sent;
    private running;
    private ended;
    private closed;
    private failure;
    private stdoutChunks;
    private stderrChunks;
    private run;
    next(): Promise<IteratorResult<Event, void>>;
    /** Closes the call; a command still running is killed. */
    return(value?: void | PromiseLike<void>): Promise<IteratorResult<Event, void>>;
    throw(err: unknown): Promise<IteratorResult<Event, void>>;
    [Symbol.asyncIterator](): this;
    /**
     * Reads the rest of the stream and resolves with the Result (`check:
     * true` throws `Denied` for a denial); the output not yet iterated is in
     * the Result's stdout and stderr, within the output budget.
     */
    wait(options?: {
        check?: boolean;
    }): Promise<Result>;
    private call;
    /**
     * Sends the running command a signal: "TERM", "INT", "HUP", "QUIT",
     * "KILL", "USR1", "USR2", "WINCH" or "PIPE". The command decides what it
     * means (a shell trap runs; unhandled, TERM ends it with signal 15).
     * Before the command is handed to the sandbox (during its hooks or
     * approval), any signal but WINCH and PIPE stops it: nothing runs.
     * Rejects with reasonCode "not_running" once it has ended.
     */
    signal(name: SignalName, options?: CallOptions): Promise<void>;
    /**
     * Writes to the command's streamed stdin (`stdinStream: true`); resolves
     * with the bytes taken, fewer only when the command ended or closed its
     * stdin meanwhile. Waits while the service holds as much unread input as
     * it keeps (64 KiB): the command's pace bounds the writer's.
     */
    write(data: string | Uint8Array, options?: CallOptions): Promise<number>;
    /** Ends the streamed stdin: the command reads end-of-file after what was written. */
    closeStdin(options?: CallOptions): Promise<void>;
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
export declare class Process {
    readonly client: Client;
    readonly id: string;
    readonly session?: string | undefined;
    /** The output offset the next `read()` starts from. */
    offset: number;
    /** Bytes lost to the service's bound between reads. */
    dropped: number;
    /** Set once a read reached the end of a process that has ended, or `wait()` returned. */
    exited: boolean;
    /** How it ended, once `exited`. */
    result: Result | undefined;
    /**
     * A process of client's service by its id. session, when known, is sent
     * with every call about it (the X-Aleph-Session header, for proxies that
     * route by session); `start` sets it.
     */
    constructor(client: Client, id: string, session?: string | undefined);
    /** Writes to the process's stdin (waits while its pipe is full); resolves with the bytes taken. */
    write(data: string | Uint8Array, options?: CallOptions): Promise<number>;
    /** Ends the stdin: the process reads end-of-file after what was written. */
    closeStdin(options?: CallOptions): Promise<void>;
    /**
     * The output since the last read, waiting up to `timeout` seconds when
     * there is none yet; an empty Buffer when none came, or when the process
     * has ended (then `exited` and `result` are set).
     */
    read(options?: ReadOptions): Promise<Buffer>;
    /** Sets the window size of a process started with `tty: true`. */
    resize(rows: number, cols: number, options?: CallOptions): Promise<void>;
    /** Sends a signal: "TERM", "INT", "HUP", "QUIT", "KILL", "USR1", "USR2", "WINCH" or "PIPE". */
    signal(name: SignalName, options?: CallOptions): Promise<void>;
    /**
     * Waits for the end and resolves with the Result (its stdout and stderr
     * are the output the pipeline kept; `read()` gives the rest, before the
     * wait). The process is then gone from the service.
     */
    wait(options?: WaitOptions): Promise<Result>;
}
