"""PyTorch and Python application rules (the Python side of catalog/pytorch.toml).

Facts used (docs/domain.md §2.2-§2.4, §3.1): a Python traceback ends with `<type>: <message>`; the types that
torch.distributed, torchelastic and launchers raise (DistBackendError, ChildFailedError, SignalException,
CalledProcessError ...) report a failure elsewhere, as do the transport errors a process meets when its peer
died (ConnectionResetError, BrokenPipeError, TimeoutError); RuntimeError and OSError are the wrapper types
of C++/CUDA/NCCL and of errno failures, and jaxlib's XlaRuntimeError of an XLA status, which the catalog reads by
their message and errno instead.
"""

from __future__ import annotations

import importlib.resources
import re
import tomllib
from collections.abc import Callable
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from functools import lru_cache

from firstfault.engine.model import Event, EventType, Evidence, SubDomain, TerminalState, recorded_state
from firstfault.engine.rules_api import Expect, Phase, RuleCase, filter_rule, refiner
from firstfault.engine.workspace import EmitSpec, Workspace, WorkSymptom
from firstfault.rules.election import (
    exception_message,
    exited_zero_unrecorded,
    printed_before,
    quiet_between_lines,
    workload_completed,
)
from firstfault.rules.scheduler import RAY_CHECK, WORKLOAD_ENDERS, aborted_for_the_gcs

GENERIC_EXCEPTION_RULE = "PythonUserException"
_KERNEL_MESSAGE = re.compile(r"\skernel: ")

# Exception types that do not say the program failed: wrappers of a failure elsewhere, transport errors of a
# dead peer, and the generic wrapper types whose meaning is in the message (read by other rules).
NOT_THE_PROGRAMS_FAULT = frozenset({
    # torch.distributed / torchelastic / launchers: a failure of another process or rank
    "DistBackendError", "DistError", "DistNetworkError", "DistStoreError", "ChildFailedError", "SignalException",
    "CalledProcessError", "RendezvousClosedError", "RendezvousTimeoutError", "RendezvousConnectionError",
    # Lightning's report that the process received SIGTERM (its signal connector raises it to stop the loop): the
    # process was told to stop from outside - a scheduler, a cancel, a pod deleted - which is the cause to find
    "SIGTERMException",
    # torch.distributed.checkpoint: the ranks' own save or load errors gathered on the coordinator ('CheckpointException
    # ranks:dict_keys([8, 9])'); each rank prints its own
    "CheckpointException",
    # torch.multiprocessing.spawn: a child process exited with a non-zero code or a signal, or raised an exception
    # the parent re-raises as ProcessRaisedException after '-- Process N terminated with the following error:' and
    # the child's own traceback (whose last line other rules read)
    "ProcessExitedException", "ProcessRaisedException",
    # Ray: an actor, worker, node or object owner died elsewhere (ray.exceptions); a remote task's exception wrapped
    # for its caller (RayTaskError; ray.get's RayGetError before Ray 0.7); Ray Train's run-level error after a
    # worker failed ("Please inspect the previous error messages"), and Train v2's WorkerGroupError ('Training failed
    # due to worker errors:', each worker's exception after it)
    "RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError", "RayTaskError",
    "RayGetError",
    "LocalRayletDiedError", "ObjectLostError", "OwnerDiedError", "RaySystemError", "TrainingFailedError",
    "WorkerGroupError",
    # Monarch (PyTorch's actor runtime): a remote actor's failure as its caller sees it ('A remote actor call has
    # failed: <actor> failed: <why>'); the actor's own lines say why
    "ActorError",
    # vLLM: the API server's report that its engine core process died ('EngineCore encountered an issue'; before V1,
    # AsyncEngineDeadError's 'Background loop has errored already'); why it died is in the engine's or worker's lines
    "EngineDeadError", "AsyncEngineDeadError",
    # TensorFlow's status errors (tf.errors) that carry no verdict of their own: an unknown or internal status,
    # an aborted, cancelled, unavailable or timed-out operation - Horovod and collective ops raise them when
    # another rank failed. (InvalidArgument, NotFound and ResourceExhausted do say what went wrong.)
    "UnknownError", "InternalError", "AbortedError", "CancelledError", "UnavailableError", "DeadlineExceededError",
    # OSError's connection family and timeouts: what a process sees when its peer is gone
    "ConnectionError", "ConnectionResetError", "ConnectionRefusedError", "ConnectionAbortedError",
    "BrokenPipeError", "TimeoutError",
    # wrapper types read by their message or errno (CUDA, NCCL, storage, memory rules); JAX/XLA's runtime error
    # carries a status (DEADLINE_EXCEEDED, UNAVAILABLE, INTERNAL ...) the way RuntimeError carries a C++ message
    "RuntimeError", "OSError", "IOError", "EnvironmentError", "SystemError", "MemoryError", "OutOfMemoryError",
    "AcceleratorError", "CudaError", "XlaRuntimeError", "JaxRuntimeError",
    # PaddlePaddle's wrapper of an external library's failure (CUDA, NCCL, cuDNN), read by its message
    "ExternalError",
    # cuDF's Java wrappers of a CUDA error (Spark RAPIDS), read by its message; Spark's job-level wrapper of the
    # failure of a task or of the context ('Job aborted due to stage failure: ... most recent failure: <the task's>')
    "CudaException", "CudaFatalException", "SparkException",
    # Spark's task killed by its driver (another task failed, the stage was cancelled), and py4j's wrapper of the Java
    # exception a PySpark call raised (the Java exception's own lines follow it)
    "TaskKilledException", "Py4JJavaError",
    # the SageMaker training toolkit's report that the user's entry point exited non-zero ('ExecuteUserScriptError:',
    # then 'ExitCode N' and the script's own stderr): why it exited is in the script's lines
    "ExecuteUserScriptError",
    # an HTTP client whose server closed the connection before its response ended: aiohttp's ClientPayloadError
    # ('Response payload is not completed') and ServerDisconnectedError, httpx's and h11's RemoteProtocolError ('peer
    # closed connection without sending complete message body'), requests' ChunkedEncodingError, http.client's
    # IncompleteRead and RemoteDisconnected - a benchmark or router seeing its server die; the server's lines say why;
    # and one that could not connect to its server at all (aiohttp's ClientConnectorError 'Cannot connect to host ...',
    # httpx's ConnectError): the server was down or not yet up
    "ClientPayloadError", "ServerDisconnectedError", "RemoteProtocolError", "ChunkedEncodingError", "IncompleteRead",
    "RemoteDisconnected", "ClientConnectorError", "ConnectError",
    # UCX's bindings carry a UCX status as an exception (JUCX's UcxException in Spark's UCX shuffle, UCX-Py's UCXError:
    # 'Out of memory', 'Destination is unreachable'): the transport's failure, which UCX's own log lines and the status
    # say more of; not the program's bug
    "UcxException", "UCXError",
    # Ray Tune's summary after its trials ended ('TuneError: ('Trials did not complete', [...])'): each trial's own
    # error, or the node it lost, is why
    "TuneError",
})
# An exception type named for the failure of something (ChildFailedError, TrainingFailedError, WorkerFailure...)
# says that it failed, not why, and so does one named for a transport that gave up or a connection the other end
# closed (a KV cache's KVTransferError, a library's ...TimeoutError or ...ConnectionError, Dask's CommClosedError,
# Spark's RpcTimeoutException, gRPC's RpcError for a call that ended with a non-OK status - grpc.RpcError,
# _InactiveRpcError, grpc.aio's AioRpcError: the peer or the path is where the cause is; a transfer library's error
# for a backend that failed under it or a peer that went away, NIXL's nixlBackendError and nixlRemoteDisconnectError);
# and a message that sends the reader to another error (an earlier one, another rank's) is a report of that error.
# None is the program's own fault.
_FAILED_SUFFIXES = ("FailedError", "FailureError", "FailedException", "FailureException", "TransferError", "TimeoutError",
                    "TimeoutException", "ConnectionError", "DisconnectedError", "ClosedError", "CommunicationError",
                    "NetworkError", "RpcError", "BackendError", "DisconnectError")
# ... and one that names failed things inside it (a workflow engine's FailedJobsException, a pool's FailedTasksError);
# TensorFlow's FailedPreconditionError is the program's own (an op run in a state it cannot run in).
_NAMES_A_FAILURE = re.compile(r"Fail(?:ed|ure)(?!Precondition)[A-Z]\w*(?:Error|Exception)$")
# A Go program's log line (klog's 'E0417 13:24:00.514090 1893 pod_workers.go:1298]', logrus's 'file.go:NN'): a
# CamelCase error name in it (RunContainerError) is Go's, not a Python traceback's.
_GO_SOURCE = re.compile(r"\b[\w-]+\.go:\d+\]")
# The kernel's own log lines (syslog's 'kernel:' tag): a register decode such as libata's 'ataN: SError: { ... }' reads
# like an exception's name, but no Python traceback is printed by the kernel.
_KERNEL_LINE = re.compile(r"(?:^|\s)kernel: ")
# A status record's reason field (kubectl describe 'Reason:   StartError', JSON/YAML "reason": "CreateContainerError"):
# a container runtime's or Kubernetes' word for a state, not a Python traceback's last line.
_REASON_FIELD = re.compile(r"(?i)\breason\"?\s*[:=]\s*\"?[\w.]*(?:Error|Exception)\"?,?\s*$")
_POINTS_ELSEWHERE = re.compile(
    r"(?i)previous error|error messages? above|(?:see|inspect|check) (?:the )?(?:\w+ )?(?:log|errors?|exceptions?|output|"
    r"stack ?trace|traceback)s?(?: \w+)? \(?(?:above|before|earlier)\)?|caused by an? (?:exception|error|failure) "
    r"(?:on|in|of) (?:one of the|another|"
    r"other|a remote) (?:ranks?|process(?:es)?|workers?)|(?:another|other|a remote) (?:rank|process|worker)s? "
    r"(?:has |have )?(?:failed|exited|crashed|died)|other ranks (?:that )?did(?:n't| not) finish")

# A program's check on a library call's return code ('AssertionError: register memory failed, error code: -1', 'failed
# with return code 3'): the library printed why on lines of its own; the exception reports only that it failed.
_RETURN_CODE_CHECK = re.compile(r"(?i)\bfailed(?:,| with)? (?:error |return |exit )?(?:code|status|ret|rc)\s*[:=]?\s*-?\d+\b")

# A warning-level log line that names an exception and a retry ('[WARNING] ... retry 1: S3Exception: ...', 'WARNING -
# ... Retrying (attempt 2) after ConnectionError'): the code caught the exception and tries the operation again.
_RETRIED = re.compile(r"\bWARN(?:ING)?\b[^\n]{0,200}?\b(?:[Rr]etry|[Rr]etrying|[Rr]etried)\b")

# An HTTP client's exception for a server's 5xx reply (the OpenAI client's 'Error code: 500 - {...}', requests'
# '500 Server Error: Internal Server Error for url', httpx's "Server error '503 Service Unavailable' for url", a
# benchmark client's message ending in the reply's reason phrase, RFC 9110's for 500, 502, 503 and 504): the server
# failed, which its own log says why.
_SERVER_FAILED = re.compile(r"Error code: 5\d\d\b|\b5\d\d Server Error\b|"
                            r": (?:Internal Server Error|Bad Gateway|Service Unavailable|Gateway Timeout)\b"
                            r"|\bServer error \x275\d\d ")

# A message saying that a peer could not be reached (gRPC's 'failed to connect to all addresses', a refused
# connection, libp2p's daemon that reached none of its bootstrap peers) or dropped the connection (ECONNRESET's
# 'Connection reset by peer', as Java's IOException carries it too; aiohttp's 'Server disconnected' and http.client's
# 'Remote end closed connection without response', quoted in a client's own exception): the process it called is gone or not listening,
# or the address it was given is wrong, which is where the cause is.
_PEER_UNREACHABLE = re.compile(r"failed to connect to all addresses|Failed to connect to remote host|Connection refused|"
                               r"failed to connect to bootstrap peers|Connection reset by peer|"
                               r"\bServer disconnected\b|Remote end closed connection without response")

# A message saying a collective operation failed ('Allreduce failed', XGBoost's rabit when a worker of the ring is
# gone): what every surviving participant sees of the one that left, not where it began.
_COLLECTIVE_FAILED = re.compile(r"(?i)\b(?:all-?reduce|all-?gather|broadcast|reduce-?scatter|all-?to-?all|barrier) "
                                r"failed\b")


# A logging framework's warning-level record (NeMo's '[NeMo W <time>', Python logging's 'WARNING', a UserWarning) that
# names an ImportError reports an import the program caught and went on without (an optional backend); CPython raises
# 'ImportError: sys.meta_path is None, Python is likely shutting down' for an import run while the interpreter exits.
_CAUGHT_IMPORT = re.compile(r"\[NeMo W \d|(?:^|[\s\]|:])WARNING(?:[:\s\]|]|$)|\bUserWarning:")
_SHUTDOWN_IMPORT = re.compile(r"sys\.meta_path is None, Python is likely shutting down")


def _import_that_did_not_fail(text: str) -> str | None:
    """Why an ImportError on this line did not fail the program (caught on a warning record, or raised while the
    interpreter was already exiting); None when it may have."""
    if _SHUTDOWN_IMPORT.search(text):
        return "an import while the interpreter shuts down, after whatever ended it"
    if _CAUGHT_IMPORT.search(text):
        return "logged as a warning: the program caught the import and went on"
    return None


# OSError and its aliases carry an errno. Most errnos are read by the rules of what they mean (ENOSPC, EIO, ESTALE,
# EMFILE ... by the storage and host rules; ECONNRESET, EPIPE ... are a dead peer), but the ones that say the program
# asked for something that cannot be (a bad address or descriptor, an invalid argument, a path that is missing, exists
# or is of the wrong kind) are the program's own fault, as Python's own subclasses for them (FileNotFoundError,
# FileExistsError, IsADirectoryError ...) are.
_ERRNO_WRAPPERS = frozenset({"OSError", "IOError", "EnvironmentError"})
_PROGRAM_ERRNOS = {2: "No such file or directory", 9: "Bad file descriptor", 14: "Bad address", 17: "File exists",
                   18: "Invalid cross-device link", 20: "Not a directory", 21: "Is a directory", 22: "Invalid argument",
                   36: "File name too long", 39: "Directory not empty"}
_ERRNO = re.compile(r"\[Errno (\d{1,3})\] ([^:\n']+)")


# transformers' OSError for a model or checkpoint directory without the file it names (utils/hub.py): ENOENT in the
# library's own words, the path the program was given.
_LIBRARY_MISSING_FILE = re.compile(r"does not appear to have a file named \S+")


def _program_errno(text: str) -> bool:
    match = _ERRNO.search(text)
    return match is not None and _PROGRAM_ERRNOS.get(int(match.group(1))) == match.group(2).strip()


# Extractors whose events another rule consumes and replaces with its reading (the CUDA error code's meaning).
_REREAD_EXTRACTORS = frozenset({"CudaErrorCode"})


# Python prints an exception whose message starts with a newline as its type and an empty first line; dmlc-core's
# fatal log (XGBoost, MXNet) puts its '[hh:mm:ss] <file>:<line>: ' prefix before such a message
_MESSAGE_ON_NEXT_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception):\s*(?:\[\d\d:\d\d:\d\d\] \S+:\d+:\s*)?$")
MESSAGE_LINES = 3  # an exception printed with an empty first line carries its message on this many lines after it


def _read_by_others(ws: Workspace, rule: str, types: tuple[str, ...],
                    ignored: frozenset[str] = frozenset()) -> Callable[[Event], bool]:
    """Whether an extractor other than `rule` (and the `ignored` ones) made an event of `types` from an event's line: a
    line with a reading.
    Matching lines close in time are coalesced into one event that keeps its first line only, so a line of the same
    file that a coalesced event's extractor matches was read by it too. An exception printed with an empty first line
    ('AssertionError: ') carries its message on the lines after it: a reading of one of the next MESSAGE_LINES lines
    is a reading of it."""
    lines: set[tuple[str, int | None]] = set()
    coalesced: dict[str, set[str]] = {}  # origin -> extractors whose events there stand for several lines
    for e in ws.events:
        if e.rule != rule and e.rule not in ignored and e.type in types:
            origin = e.evidence.provenance.origin
            lines.add((origin, e.evidence.provenance.line))
            if e.count > 1:
                coalesced.setdefault(origin, set()).add(e.rule)
    extractors = {x.name: x for x in ws.catalog.extractors}

    # extractors whose events a filter rule replaced with its own reading (CudaErrorCodeMeaning): only their matching
    # of the line says that they read it
    replaced = [x for x in ws.catalog.extractors if x.name in _REREAD_EXTRACTORS and x.name != rule]

    def read(event: Event) -> bool:
        origin = event.evidence.provenance.origin
        text = event.evidence.text
        line = event.evidence.provenance.line
        continued = line is not None and _MESSAGE_ON_NEXT_LINE.search(text) is not None
        return (origin, line) in lines or (continued and any(
            (origin, (line or 0) + k) in lines for k in range(1, MESSAGE_LINES + 1))) or any(
            name in extractors and extractors[name].regex.search(text) is not None
            for name in sorted(coalesced.get(origin, ()))) or any(x.regex.search(text) for x in replaced)
    return read


def _reports_elsewhere(title: str, line: str) -> RuleCase:
    """A case of an exception that reports a failure elsewhere: it is dropped and nothing is left to blame."""
    return RuleCase(title=title, evidence={"n1/applog": [line]}, expect=Expect(fired=True, sub_domain="unknown"))


EXIT_HANDLER_LINES = 30  # how far after the atexit banner its traceback's lines can reach


@filter_rule("ExitHandlerErrors", phase=Phase.FILTER_EARLY, doc=f"""
CPython prints an exception an atexit handler raised under 'Error in atexit._run_exitfuncs:' and otherwise ignores it:
the program had finished, and its exit status is unchanged. The failures read from the lines that follow the banner
in the same stream (its traceback, up to {EXIT_HANDLER_LINES} lines: an OSError's errno, an exception type) are
exit-time noise and are dropped.
""", cases=[
    # https://github.com/mlcommons/training_results_v2.0/blob/main/H3C/results/2R5500G5-Intelx8A100-SXM-80GB/rnnt/result_9.txt
    RuleCase(title="a stale NFS handle in an exit handler after the run finished", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z :::MLLOG {\"namespace\": \"\", \"time_ms\": 1735690200000, \"event_type\": "
        "\"INTERVAL_END\", \"key\": \"run_stop\", \"value\": null, \"metadata\": {\"status\": \"success\"}}",
        "2025-01-01T00:10:01Z Error in atexit._run_exitfuncs:",
        "2025-01-01T00:10:01Z OSError: [Errno 116] Stale file handle"]},
        context={"scheduler": "slurm", "scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED")),
    RuleCase(title="the same error in the program's own run", evidence={"n1/applog": [
        "2025-01-01T00:10:01Z OSError: [Errno 116] Stale file handle"]},
        context={"scheduler": "slurm", "scheduler_state": "FAILED", "exit_code": "1:0"},
        expect=Expect(fired=False, sub_domain="storage")),
])
def exit_handler_errors(ws: Workspace) -> None:
    banners = [(e.evidence.provenance.origin, e.evidence.provenance.line) for e in ws.events
               if e.symptom == "Exception in an exit handler" and e.evidence.provenance.line is not None]
    if not banners:
        return
    for event in ws.events_of(EventType.NODE_BAD):
        origin, line = event.evidence.provenance.origin, event.evidence.provenance.line
        if line is not None and any(o == origin and b < line <= b + EXIT_HANDLER_LINES for o, b in banners):
            ws.drop(event, "raised by an exit handler after the program finished ('Error in atexit._run_exitfuncs')")


@filter_rule("IgnoredExceptions", phase=Phase.FILTER_EARLY, after=("RelayedOutput",), doc=f"""
CPython prints an exception it cannot raise - in a destructor, a weakref callback, a garbage-collection hook - under
'Exception ignored in: <object>' (sys.unraisablehook) and goes on; multiprocessing's resource tracker prints the error of
a message it could not apply (its main loop's frame, '.../multiprocessing/resource_tracker.py", line N, in main') and
goes on too, as the Ray driver does with its log monitor's error ('The log monitor on node N failed with the following
error:'): the exception that ends the traceback after the banner or the frame (the first Python exception within
{EXIT_HANDLER_LINES} lines of it in the same stream) did not end the program, and its exception reading is dropped.
Other readings of the block's lines (a CUDA error the destructor met) stay evidence.
""", cases=[
    # https://github.com/vllm-project/vllm/issues/4114 (the communicator's destructor after its NCCL init failed)
    RuleCase(title="a destructor's AttributeError ahead of the error that stopped the worker", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z (RayWorkerVllm pid=14289) Exception ignored in: <function NCCLCommunicator.__del__ at "
        "0x7f4d8c3212d0>",
        "2025-01-01T00:10:00Z (RayWorkerVllm pid=14289) Traceback (most recent call last):",
        "2025-01-01T00:10:00Z (RayWorkerVllm pid=14289) AttributeError: 'NCCLCommunicator' object has no attribute "
        "'comm'",
        "2025-01-01T00:10:01Z (RayWorkerVllm pid=14289) RuntimeError: NCCL error: unhandled system error (run with "
        "NCCL_DEBUG=INFO for details)",
        "2025-01-01T00:10:02Z (RayWorkerVllm pid=23074, ip=10.0.0.3) AttributeError: 'NCCLCommunicator' object has no "
        "attribute 'comm' [repeated 6x across cluster]"]},
        expect=Expect(fired=True, absent=["Python exception"])),
    # https://github.com/vllm-project/vllm/issues/5468 (a shared-memory segment unregistered twice at shutdown)
    RuleCase(title="the resource tracker's KeyError after a server exited 0", evidence={"n1/applog": [
        f"2025-01-01T00:10:00Z {line}" for line in (
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3.10/multiprocessing/resource_tracker.py", line 201, in main',
            "    cache[rtype].remove(name)", "KeyError: '/psm_2ec8dce9'")]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, absent=["Python exception"], sub_domain="none")),
    RuleCase(title="the same AttributeError raised by the program", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z Traceback (most recent call last):",
        "2025-01-01T00:10:00Z AttributeError: 'NCCLCommunicator' object has no attribute 'comm'"]},
        expect=Expect(fired=False, sub_domain="application", root_symptom="Python exception")),
])
def ignored_exceptions(ws: Workspace) -> None:
    banners = [(e.evidence.provenance.origin, e.evidence.provenance.line) for e in ws.events
               if e.symptom == "Exception ignored by the interpreter" and e.evidence.provenance.line is not None]
    for origin, banner in banners:
        raised = [e for e in ws.events_of(EventType.NODE_BAD) if e.rule == GENERIC_EXCEPTION_RULE
                  and e.evidence.provenance.origin == origin and e.evidence.provenance.line is not None
                  and banner < e.evidence.provenance.line <= banner + EXIT_HANDLER_LINES]
        if not raised:
            continue
        ignored = min(raised, key=lambda e: e.evidence.provenance.line or 0)
        message = exception_message(ignored.evidence.text)
        for event in [ignored] + [e for e in ws.events_of(EventType.NODE_BAD) if e.rule == GENERIC_EXCEPTION_RULE
                                  and e is not ignored and e.evidence.provenance.origin == origin
                                  and "[repeated " in e.evidence.text and exception_message(e.evidence.text) == message]:
            ws.drop(event, "printed under 'Exception ignored in' (or Ray's repeat of that line): the interpreter could "
                           "not raise it, and the program went on")


# How far above the harness's exit-code message its assertion's first line can be: torch's assertEqual prints the
# exception line, a blank, and its expected/got and difference lines before the message.
_HARNESS_MESSAGE_LINES = 10


@filter_rule("HarnessReportsAChildsSignal", phase=Phase.FILTER_EARLY, doc=f"""
PyTorch's distributed test harness (MultiProcessTestCase) runs each rank in a child process and, when one exits
non-zero, fails the test with an assertion on its exit code: 'AssertionError: Scalars are not equal!' followed by
'Expected zero exit code but got -9 for pid: P'. A negative exit code of a multiprocessing child is the signal that
ended it, read as 'Worker killed by signal'. The assertion (the Python exception within {_HARNESS_MESSAGE_LINES} lines
above that message, in the same stream) is the harness reporting the child's death, not a failure of the test's own
code, and its exception reading is dropped.
""", cases=[
    # https://github.com/intel/torch-xpu-ops/issues/1663 (title: 'Expected zero exit code but got -9'); the lines are
    # common_utils.assertEqual's report of _check_return_codes in torch/testing/_internal/common_distributed.py
    RuleCase(title="the harness's assertion on a child killed by SIGKILL", evidence={"n1/applog": [
        "AssertionError: Scalars are not equal!", "", "Expected 0 but got -9.", "Absolute difference: 9",
        "Relative difference: inf", "Expected zero exit code but got -9 for pid: 328475"]},
        context={"scheduler": "none", "scheduler_state": ""},
        expect=Expect(fired=True, absent=["Python exception"], root_symptom="Worker killed by signal")),
    RuleCase(title="a test's own assertion on a value", evidence={"n1/applog": [
        "AssertionError: Scalars are not equal!", "", "Expected 0 but got 3.", "Absolute difference: 3",
        "Relative difference: inf"]},
        context={"scheduler": "none", "scheduler_state": ""},
        expect=Expect(fired=False, root_symptom="Python exception", sub_domain="application")),
])
def harness_reports_a_childs_signal(ws: Workspace) -> None:
    messages = [(e.evidence.provenance.origin, e.evidence.provenance.line) for e in ws.events_of(EventType.NODE_BAD)
                if e.symptom == "Worker killed by signal" and e.attributes.get("test_signal")
                and e.evidence.provenance.line is not None]
    for event in ws.events_of(EventType.NODE_BAD):
        origin, line = event.evidence.provenance.origin, event.evidence.provenance.line
        if event.rule == GENERIC_EXCEPTION_RULE and line is not None and any(
                o == origin and m - _HARNESS_MESSAGE_LINES <= line < m for o, m in messages):
            ws.drop(event, "the test harness's assertion on a child's exit code: it reports the signal that ended the "
                           "child")


# How far below its 'Exception in thread ...' header a thread's traceback can end: its frames, two lines each.
_THREAD_TRACEBACK_LINES = 80
_THREAD_ENDED = "Thread ended by an exception"


@filter_rule("ThreadExceptionInACompletedRun", phase=Phase.FILTER_EARLY, doc=f"""
Python prints an exception that ended a thread other than the main one under 'Exception in thread <name>:'
(threading.excepthook) and the process goes on without that thread. In a run the scheduler recorded COMPLETED, such
an exception (the generic Python exception read within {_THREAD_TRACEBACK_LINES} lines below its header, in the same
stream) is not a failure the record hides: it is dropped, and so is not taken as the program raising. In a run that
failed or hung, a dead thread may be why, and it stays.
""", cases=[
    # https://github.com/ray-project/ray/issues/48441 (a Ray Train worker's thread at shutdown, after the last
    # checkpoint; the job completed)
    RuleCase(title="a worker thread's EOFError after a completed run", evidence={"n1/applog": [
        "2025-01-01T00:58:00Z Training result: Result(metrics={'epoch': 9, 'train_loss': 0.8921})",
        "2025-01-01T00:58:01Z (RayTrainWorker pid=249147, ip=10.0.0.2) Exception in thread Thread-7:",
        "2025-01-01T00:58:01Z (RayTrainWorker pid=249147, ip=10.0.0.2) Traceback (most recent call last):",
        "2025-01-01T00:58:01Z (RayTrainWorker pid=249147, ip=10.0.0.2)   File \"/opt/conda/lib/python3.10/"
        "multiprocessing/connection.py\", line 383, in _recv",
        "2025-01-01T00:58:01Z (RayTrainWorker pid=249147, ip=10.0.0.2) EOFError"]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="none", terminal_state="COMPLETED")),
    RuleCase(title="near miss: a thread's exception in a failed run stays", evidence={"n1/applog": [
        "2025-01-01T00:58:01Z Exception in thread Thread-2:",
        "2025-01-01T00:58:01Z Traceback (most recent call last):",
        "2025-01-01T00:58:01Z KeyError: 'shard_7'"]},
        context={"scheduler_state": "FAILED", "exit_code": "1:0"},
        expect=Expect(fired=False, active=["Python exception"])),
])
def thread_exception_in_a_completed_run(ws: Workspace) -> None:
    if recorded_state(ws.context) != TerminalState.COMPLETED:
        return
    headers: dict[str, list[int]] = {}
    for header in ws.events_of(EventType.NODE_INTERESTING):
        if header.symptom == _THREAD_ENDED and header.evidence.provenance.line is not None:
            headers.setdefault(header.evidence.provenance.origin, []).append(header.evidence.provenance.line)
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.rule == GENERIC_EXCEPTION_RULE]:
        line = event.evidence.provenance.line
        if line is not None and any(0 < line - header <= _THREAD_TRACEBACK_LINES
                                    for header in headers.get(event.evidence.provenance.origin, [])):
            ws.drop(event, "it ended a thread ('Exception in thread ...'), not the process, of a run recorded COMPLETED")


# A logging record's level ahead of its message, at WARNING: loguru's '| WARNING  |', the standard library's
# 'WARNING:<logger>:' and '<time> - <name> - WARNING - ', vLLM's 'WARNING 12-07 20:30:45 [file.py:12]', '[WARNING]'.
_WARNING_RECORD = re.compile(r"\|\s*WARNING\s*\||\bWARNING:[\w.]*:|\s-\s+WARNING\s+-\s|\bWARNING \d\d-\d\d \d\d:\d\d:\d\d|"
                             r"\[WARNING\]")


_MALFORMED_UCX_ADDRESS = "UCX received a malformed worker address"
# UCX's check of a peer's worker address header (ucp/wireup/address.c, ucp_address_unpack_header)
_UCX_ADDRESS_VERSION = re.compile(r"address\.c:\d+\s+Assertion `\*addr_version == UCP_OBJECT_VERSION_V2' failed")


@filter_rule("MalformedUcxAddress", phase=Phase.FILTER, doc=f"""
UCX's assertion on the version field of a worker address a peer sent ('address.c:1052 Assertion `*addr_version ==
UCP_OBJECT_VERSION_V2' failed: addr version 9') says the bytes received as an address were not one: damaged in the
exchange, packed by a different UCX, or not an address. Unlike a library's check of how the program calls it
(`Library assertion failed`, the program's), it reports the exchange between nodes and does not say which side: the
event is read as `{_MALFORMED_UCX_ADDRESS}` (unknown, no node blamed).
""", cases=[
    # https://github.com/NOAA-EMC/global-workflow/issues/2134 (intermittent on Orion; a rerun succeeded)
    RuleCase(title="UCX's check of a peer's address header", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z  9: [Orion-12-21:51616:0:51616]     address.c:1052 Assertion `*addr_version == "
        "UCP_OBJECT_VERSION_V2' failed: addr version 9"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[], absent=["Library assertion failed"])),
    RuleCase(title="another UCX assertion stays the library's", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [gpu-c102:1886795:0:1886972] proto_select.c:549  Assertion `khret == "
        "UCS_KH_PUT_BUCKET_EMPTY' failed"]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False, sub_domain="application")),
])
def malformed_ucx_address(ws: Workspace) -> None:
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == "Library assertion failed"]:
        if _UCX_ADDRESS_VERSION.search(event.evidence.text):
            ws.reread(event, _MALFORMED_UCX_ADDRESS, "UCX could not parse a peer's worker address: the exchange, not "
                                                     "the program's call")


# A log4j record's header, as Spark and other JVM programs print it: '<LEVEL> [<thread>] <logger>: '
_LOGGER_RECORD = re.compile(r"\b(?:ERROR|WARN|INFO)\s+(?:[\w.$-]+\s+)?[A-Za-z_$][\w.$]*:\s")


def _named_after(event: Event, header: re.Pattern[str]) -> bool:
    """Whether the event's exception is named inside a record whose header `header` reads, after that header."""
    text = event.evidence.text
    found = header.search(text)
    exception = str(event.attributes.get("exception", ""))
    return found is not None and bool(exception) and text.find(exception, found.end()) >= 0


def _logged_in_a_record(event: Event) -> bool:
    """Whether the event's exception is named inside a logger's record, after its header."""
    return _named_after(event, _LOGGER_RECORD) or _named_after(event, _WARNING_RECORD)


@filter_rule("ProgramRaised", phase=Phase.FILTER, doc="""
Before the generic Python exceptions are sorted (PythonExceptionFamily keeps only those that say the program failed), keep
the fact that a process of the workload ended in an uncaught exception: its node's first one becomes the context fact
`program_raised`. Whatever the exception reports, a process that raised it exited with an error (TerminalStateFromEvidence
reads the workload as FAILED from it when nothing else says how it ended). An exception named inside a log4j record,
after its '<LEVEL> [<thread>] <logger>: ' header (Spark's driver: 'WARN TaskSetManager: Lost task 6.0 in stage 6.0
(...): java.lang.OutOfMemoryError: Java heap space'), or inside a Python logging record at WARNING level, is one the
program caught and logged, and went on: no process ended in it. A process that dies of an exception prints it itself
(the interpreter's traceback ending in its type, the
JVM's 'Exception in thread "main" ...').
""", cases=[
    RuleCase(title="a wrapper of a failure elsewhere, with no scheduler state", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [rank0]: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "]},
        context={"scheduler": "none", "scheduler_state": ""},
        expect=Expect(fired=True, sub_domain="unknown", terminal_state="FAILED")),
    RuleCase(title="an NCCL warning, no exception, no scheduler state", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z n1:41:41 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0>"]},
        context={"scheduler": "none", "scheduler_state": ""},
        expect=Expect(fired=False, sub_domain="unknown", terminal_state="UNKNOWN")),
    # https://github.com/TileDB-Inc/TileDB-Spark/pull/81 (a Spark driver's record of a task lost to the executor's heap)
    RuleCase(title="near miss: an exception a Spark driver logged in its own record", evidence={"n1/applog": [
        "21/06/24 13:07:47 WARN TaskSetManager: Lost task 6.0 in stage 6.0 (TID 29, localhost, executor driver): "
        "java.lang.OutOfMemoryError: Java heap space"]},
        context={"scheduler": "none", "scheduler_state": ""}, expect=Expect(fired=False)),
    # https://github.com/apache/celeborn/pull/3090 (the same record with the logging thread's name before the logger)
    RuleCase(title="near miss: the record with its thread's name", evidence={"n1/applog": [
        "25/04/29 21:42:07 WARN task-result-getter-3 TaskSetManager: Lost task 1434.0 in stage 23.0 (TID 26608, "
        "zw06-data-hdp-dn29550.mt, executor 5432): java.lang.OutOfMemoryError: GC overhead limit exceeded"]},
        context={"scheduler": "none", "scheduler_state": ""}, expect=Expect(fired=False)),
    # a Lustre client's error during a target's failover, in the kernel's own words
    RuleCase(title="the kernel's LustreError is no process's exception", evidence={"n1/syslog": [
        "Apr 25 01:06:52 n1 kernel: [698674.952247] LustreError: 11-0: hs1-OST0016-osc-ffff8817e1b3d000: operation "
        "ost_read to node 172.20.3.12@o2ib failed: rc = -107"]},
        context={"scheduler": "none", "scheduler_state": ""}, expect=Expect(fired=False)),
])
def program_raised(ws: Workspace) -> None:
    first: dict[str | None, Event] = {}
    for event in ws.events_of(EventType.NODE_BAD):
        # the kernel names its own errors the same way ('LustreError: 11-0: ...'); no process raised those
        if (event.rule == GENERIC_EXCEPTION_RULE and not _KERNEL_MESSAGE.search(event.evidence.text)
                and not _logged_in_a_record(event)):
            first.setdefault(event.node, event)
    for node, event in first.items():
        exception = str(event.attributes.get("exception", "")) or "an exception"
        ws.emit(EmitSpec(type=f"{EventType.CONTEXT}.program_raised", node=node, symptom=None, evidence=event.evidence,
                         time=event.time, attributes={"exception": exception}))
        ws.note("fact", f"a process raised {exception}", node=node)


# A program that meets an error it can live without says so in the same line: huggingface_hub's 'Could not cache
# non-existence of file. Will ignore error and continue. Error: [Errno 30] Read-only file system: ...' (a warning, the
# download goes on).
_GONE_ON_FROM = re.compile(r"\b[Ww]ill ignore (?:the |this )?error and continue\b|\b[Ii]gnoring (?:the |this )?error and continuing\b")


@filter_rule("ErrorTheProgramSaysItIgnores", phase=Phase.FILTER, doc="""
A line that reports an error and says, in the same line, that the program ignores it and goes on ('Will ignore error
and continue', 'Ignoring the error and continuing') is not a failure of the program: its reading as an error is
dropped, whatever the error (an errno, an exception).
""", cases=[
    # https://github.com/huggingface/huggingface_hub/blob/main/src/huggingface_hub/file_download.py (its warning when the
    # cache cannot record a missing file: a read-only cache mounted into a container)
    RuleCase(title="a read-only cache the download goes on without", evidence={"n1/applog": [
        "2025-01-01T00:05:00Z Could not cache non-existence of file. Will ignore error and continue. Error: [Errno 30] "
        "Read-only file system: '/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-1.5B-Instruct/.no_exist/989aa79/"
        "model.safetensors.index.json'"]},
        expect=Expect(fired=True, sub_domain="unknown", absent=["I/O error"])),
    RuleCase(title="the same error without the note: the write failed", evidence={"n1/applog": [
        "2025-01-01T00:05:00Z OSError: [Errno 30] Read-only file system: '/root/.cache/huggingface/hub/tmp8x1'"]},
        expect=Expect(fired=False, sub_domain="storage")),
])
def error_the_program_says_it_ignores(ws: Workspace) -> None:
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if _GONE_ON_FROM.search(e.evidence.text)]:
        ws.drop(event, "the line says the program ignores the error and goes on")


@filter_rule("PythonExceptionFamily", phase=Phase.FILTER, after=("ContainerHookReason", "ProgramRaised"), doc="""
Keep a generic Python exception (PythonUserException, any type) only when it says the program failed: drop the
types that report a failure elsewhere or wrap a message other rules read (NOT_THE_PROGRAMS_FAULT, and any type named
for a failure or for a transport that gave up: ...FailedError, ...FailureError, ...TransferError, ...TimeoutError,
...ConnectionError), an exception whose message points to another error (an earlier one,
another rank's), a Go program's error name in its log line (kubelet's klog 'file.go:NN]'), a kernel log line (libata's
'ata5: SError: { ... }' register decode), a status record's reason
field ('Reason:   StartError' in kubectl describe, "reason": "CreateContainerError"), a message saying a peer could
not be reached or reset the connection (gRPC's 'failed to connect to all addresses', a refused connection, 'Connection
reset by peer') or that a collective failed ('Allreduce failed'), a check of a library call's return code ('register
memory failed, error code: -1'), an HTTP client's exception for a server's 5xx reply ('Error code: 500', '500 Server Error', 'Error: Internal Server Error',
httpx's "Server error '503 Service Unavailable'"),
an exception a warning-level line says is being retried
('[WARNING] put_object retry 1: S3Exception: ...': the code caught it and tries again) or that a record logged at
WARNING names after its level (loguru's '| WARNING  | ... - trial 7 exception TimeoutError: ...', the standard
library's 'WARNING:root:...', vLLM's 'WARNING 12-07 20:30:45 [file.py:1] ...': caught, logged, and gone on from), an
ImportError on a
warning-level record (an optional import the program went on without), CPython's ImportError at interpreter shutdown
('sys.meta_path is None'), and an exception whose
line another extractor already explains (a CUDA error, an errno, a missing
module), so that line keeps its specific meaning. An OSError whose errno says the program's own call was wrong (a bad
address or descriptor, an invalid argument, a missing or existing path: _PROGRAM_ERRNOS), or transformers' OSError
for a directory without the file it names ('does not appear to have a file named config.json'), is kept as the
program's.
""", cases=[
    # libata's decode of a SATA link's error register (drivers/ata/libata-eh.c, ata_eh_link_report)
    RuleCase(title="libata's SError register decode in the kernel log", evidence={"n1/syslog": [
        "Nov  5 02:41:17 n1 kernel: [477485.304800] ata5: SError: { RecovComm PHYRdyChg CommWake DevExch }"]},
        expect=Expect(fired=True, absent=["Python exception"])),
    RuleCase(title="an unusual type raised by the program", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [rank8]: FileExistsError: [Errno 17] File exists: '/shared/ckpt/step_297/optim'"]},
        expect=Expect(sub_domain="application", culprits=[], root_symptom="Python exception")),
    _reports_elsewhere("a wrapper of a failure elsewhere",
        "2025-01-01T00:10:00Z [rank0]: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "),
    RuleCase(title="a line another rule explains", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [rank0]: ModuleNotFoundError: No module named 'flash_attn'"]},
        expect=Expect(fired=True, sub_domain="configuration")),
    RuleCase(title="a line another rule read, coalesced with the same reading of an earlier line", evidence={
        "n1/applog": [
            "2025-01-01T00:10:00Z distributed.worker - WARNING - NCCL failure :remote process exited or there was a "
            "network error",
            "2025-01-01T00:10:02Z PlatformError: Training failed with error: XGBoostError: NCCL failure :remote "
            "process exited or there was a network error"]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[])),
    # https://github.com/lukedhlee/OpenThoughts-Agent (a SkyRL generator logging each trial's harness timeout at WARNING
    # and going on to the next trial)
    _reports_elsewhere("an exception a loguru record names at WARNING",
        "2025-01-01T00:10:00Z 2026-08-03 11:00:35.091 | WARNING  | skyrl_train.generators.terminal_bench_generator:"
        "_run_trial:1231 - trial r2egym-v1-02231__g06s0 exception NonZeroAgentExitCodeError: Command timed out after "
        "600s (treatment=passthrough, reward=0)"),
    RuleCase(title="the same record at ERROR level", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z 2026-08-03 11:00:35.091 | ERROR    | skyrl_train.trainer:train:201 - step 7 "
        "exception KeyError: 'advantages'"]},
        expect=Expect(sub_domain="application", root_symptom="Python exception")),
    _reports_elsewhere("an exception logged as a warning while the operation is retried",
        "2025-01-01T00:10:00Z [WARNING] 2025-01-01T00:10:00.000000 put_object retry 1: S3Exception: Client error: "
        "Failed to construct request: Invalid configuration: endpoint resolution failed"),
    _reports_elsewhere("a spawned child that died by a signal",
        "2025-01-01T00:10:00Z torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal "
        "SIGABRT"),
    _reports_elsewhere("a type named for a failure",
        "2025-01-01T00:10:00Z lightning_fabric.utilities.exceptions.WorkerGroupFailedError: worker group failed"),
    _reports_elsewhere("a type that names failed jobs",
        "[2021-04-24T14:36:31+0000] toil.leader.FailedJobsException: The job store 'aws:us-west-2:dv' contains 1 failed "
        "jobs: 'call_variants' kind-call_variants/instance-1w8r v3"),
    RuleCase(title="TensorFlow's failed precondition is the program's", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z tensorflow.python.framework.errors_impl.FailedPreconditionError: Could not find variable "
        "dense/kernel. This could mean that the variable has been deleted."]},
        expect=Expect(fired=False, sub_domain="application")),
    _reports_elsewhere("a type named for a transport that gave up",
        "2026-07-21T08:04:43Z [TP0 EP0] Prefill transfer failed for request rank=0 with exception KVTransferError: "
        "remote agent not registered"),
    # https://github.com/ray-project/ray/issues/31261 (Ray's dashboard agent publishing to a raylet that had died)
    _reports_elsewhere("gRPC's report of a call that ended with a non-OK status",
        "2022-12-20T14:02:12Z grpc.aio._call.AioRpcError: <AioRpcError of RPC that terminated with:"),
    _reports_elsewhere("a message that points to an earlier error",
        "2023-04-19 16:22:26 ray.train.base_trainer.TrainingRunError: The Ray Train run failed. Please inspect the "
        "previous error messages for a cause."),
    # https://github.com/sgl-project/sglang/issues/5602 (a TP rank whose peers never finished loading the weights)
    _reports_elsewhere("a message about the other ranks",
        "2025-05-01T10:00:00Z ValueError: TP rank 1 could finish the model loading, but there are other ranks that didn't "
        "finish loading. It is likely due to unexpected failures (e.g. OOM) or a slow node."),
    _reports_elsewhere("a message that sends the reader to the stack trace above",
        "2025-11-03T17:03:58Z vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
        "trace (above) for the root cause."),
    RuleCase(title="a Go component's error name", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kubelet[1893]: E0101 00:10:00.514090    1893 pod_workers.go:1298] \"Error syncing pod, "
        "skipping\" err=\"failed to \\\"StartContainer\\\" with RunContainerError: \\\"context deadline exceeded\\\"\""]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[])),
    RuleCase(title="a container state's reason in a controller's log of a pod", evidence={"n1/applog": [
        "      Reason:       StartError"]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[])),
    # https://github.com/HEISENYAN/openvla-oft/blob/4257e4f497a0c81a68064614dbf4575f1552ef1c/slurm.out (a policy server
    # started on a checkpoint directory without its config)
    RuleCase(title="transformers' OSError for a directory without the file it needs", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z OSError: /home/user/ws/aloha_adjust_bottle_100000 does not appear to have a file named "
        "config.json. Checkout 'https://huggingface.co//home/user/ws/aloha_adjust_bottle_100000/tree/None' for "
        "available files."]},
        expect=Expect(sub_domain="application", culprits=[], root_symptom="Python exception")),
    RuleCase(title="an OSError whose errno says the program's call was wrong", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z OSError: [Errno 14] Bad address"]},
        expect=Expect(fired=False, sub_domain="application", root_symptom="Python exception")),
    # https://github.com/meta-pytorch/torchforge/issues/493 (Monarch's caller of an RDMA manager actor that failed)
    _reports_elsewhere("a remote actor's failure as its caller sees it",
        "2025-01-01T00:10:00Z monarch._src.actor.actor_mesh.ActorError: A remote actor call has failed: rdma_manager[0] "
        "failed: could not create loopback QP for device rdmap79s0"),
    # gRPC core's wording when no resolved address accepted the connection (a Ray worker calling a head that is gone)
    _reports_elsewhere("a call to a peer that is not listening",
        "2025-01-01T00:10:00Z ray.exceptions.RpcError: failed to connect to all addresses; last error: UNKNOWN: "
        "ipv4:10.64.3.17:8265: Failed to connect to remote host: Connection refused"),
    # Spark's network layer when the fetching side went away; Java's IOException carries ECONNRESET's strerror
    # (written for this case)
    _reports_elsewhere("Java's report of a connection its peer reset",
        "2025-05-08T14:31:40Z ERROR TransportRequestHandler: Error sending result to /10.70.0.12:51022; closing "
        "connection java.io.IOException: Connection reset by peer"),
    # https://github.com/learning-at-home/hivemind/issues/628 (the libp2p daemon given a peer's loopback address)
    _reports_elsewhere("a daemon that reached none of its bootstrap peers",
        "2024-10-09T16:36:41Z hivemind.p2p.p2p_daemon_bindings.utils.P2PDaemonError: Daemon failed to start: 2024/10/09 "
        "16:36:41 failed to connect to bootstrap peers"),
    # https://github.com/ray-project/ray/issues/18132 (XGBoost-Ray after one worker node died)
    _reports_elsewhere("a collective that failed",
        "2025-01-01T00:10:00Z xgboost.core.XGBoostError: [14:13:22] ../rabit/include/rabit/internal/utils.h:90: "
        "Allreduce failed"),
    # PyTorch 1.x's _check_driver raises AssertionError with a message that starts on the next line
    # (https://github.com/pytorch/pytorch/blob/v1.5.0/torch/cuda/__init__.py)
    RuleCase(title="an exception whose message, on the next line, another rule reads", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z AssertionError: ",
        "2025-01-01T00:10:00Z Found no NVIDIA driver on your system. Please check that you"]},
        expect=Expect(fired=True, root_symptom="GPU could not be initialised")),
    # https://github.com/NVIDIA/spark-xgboost-examples/issues/11 (XGBoost4J's error through dmlc-core's fatal log)
    RuleCase(title="a dmlc fatal log whose message, on the next line, another rule reads", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z ml.dmlc.xgboost4j.java.XGBoostError: [12:56:19] /home/jenkinslc/workspace/llc-xgb-deploy-"
        "dev/src/tree/updater_gpu_hist.cu:1490: ",
        "2025-01-01T00:10:00Z Exception in gpu_hist: NCCL failure :unhandled cuda error /home/jenkinslc/workspace/llc-"
        "xgb-deploy-dev/src/tree/../common/device_helpers.cuh(1061)"]},
        expect=Expect(fired=True, absent=["Python exception"])),
    RuleCase(title="an exception whose next line nothing reads", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z AssertionError: ",
        "2025-01-01T00:10:00Z expected the tokenizer to return 4096 tokens"]},
        expect=Expect(fired=False, sub_domain="application", root_symptom="Python exception")),
    _reports_elsewhere("an OSError whose errno is a dead peer's",
        "2025-01-01T00:10:00Z OSError: [Errno 104] Connection reset by peer"),
    RuleCase(title="a message about the program's own data", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [rank3]: ValueError: expected 4096 tokens per sample, got 4095 (see the data loader "
        "docs)"]},
        expect=Expect(sub_domain="application", root_symptom="Python exception")),
    # the OpenAI client's APIStatusError message, 'Error code: <status> - <body>' (https://github.com/openai/openai-python),
    # from a benchmark client of a vLLM server whose engine died
    _reports_elsewhere("an HTTP client's report of the server's 500",
        "2025-01-01T00:10:00Z openai.InternalServerError: Error code: 500 - {'error': {'message': 'EngineCore "
        "encountered an issue.', 'type': 'InternalServerError', 'code': 500}}"),
    # https://github.com/THUDM/slime/issues/1391 (an RL rollout manager's router answering 503 after long training)
    _reports_elsewhere("httpx's report of the server's 503",
        "2025-01-01T00:10:00Z httpx.HTTPStatusError: Server error '503 Service Unavailable' for url "
        "'http://10.104.43.34:3938/generate'"),
    # https://github.com/sgl-project/sglang/issues/3815 (bench_serving's stream from a server whose TP process died)
    _reports_elsewhere("an HTTP client's stream cut off by its server",
        "2025-01-01T00:10:00Z aiohttp.client_exceptions.ClientPayloadError: Response payload is not completed: "
        "<TransferEncodingError: 400, message='Not enough data for satisfy transfer length header.'>"),
    # aiohttp's ClientConnectorError in its own format (aiohttp/client_exceptions.py: 'Cannot connect to host
    # {host}:{port} ssl:{ssl} [{os_error}]'): a client calling a service that was down
    _reports_elsewhere("an HTTP client that could not reach its server",
        "2025-01-01T00:10:00Z aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host "
        "tgi-svc.chatqna.svc.cluster.local:80 ssl:default [Connect call failed ('10.96.41.7', 80)]"),
    # https://github.com/MoonshotAI/checkpoint-engine/issues/34 (the transfer engine's registration refused just before)
    _reports_elsewhere("a program's assertion on a library call's return code",
        "2025-01-01T00:10:00Z [rank0]: AssertionError: register memory failed, error code: -1"),
    # https://github.com/kvcache-ai/Mooncake/issues/383 (SGLang's bench_serving whose first request the server failed)
    # a load generator's summary whose message ends in the reason phrase of the server's replies (written for this case)
    _reports_elsewhere("a benchmark client's count of requests the server failed",
        "2025-01-01T00:10:00Z ValueError: Unable to complete 189 requests: Internal Server Error"),
    # aiohttp's ServerDisconnectedError message (aiohttp/client_exceptions.py: 'Server disconnected' when the server
    # closed the connection before its reply), as SGLang's bench_serving quotes it when its prefill server crashed
    # (https://github.com/sgl-project/sglang/issues/6694)
    _reports_elsewhere("a benchmark client quoting its server's disconnect",
        "2025-01-01T00:10:00Z ValueError: Initial test run failed - Please make sure benchmark arguments are correctly "
        "specified. Error: Server disconnected"),
    _reports_elsewhere("a benchmark client's report of the server's 500 by its reason phrase",
        "2025-01-01T00:10:00Z ValueError: Initial test run failed - Please make sure benchmark arguments are correctly "
        "specified. Error: Internal Server Error"),
    # https://github.com/pytorch/pytorch/issues/173679 (Inductor re-raising the OSError of a cache on NFS)
    _reports_elsewhere("a wrapper whose message is the exception it wraps",
        "2025-01-01T00:10:00Z [rank19]: torch._inductor.exc.InductorError: OSError: [Errno 16] Device or resource busy: "
        "'/root/.triton/cache/XU5DT2AO'"),
])
def python_exception_family(ws: Workspace) -> None:
    generic = [e for e in ws.events_of(EventType.NODE_BAD) if e.rule == GENERIC_EXCEPTION_RULE]
    if not generic:
        return
    explained = _read_by_others(ws, GENERIC_EXCEPTION_RULE, (EventType.NODE_BAD, EventType.NODE_INTERESTING))
    for event in generic:
        name = _innermost_exception(event.evidence.text, str(event.attributes.get("exception", "")))
        if explained(event):
            ws.drop(event, f"{name}: another rule explains this line")
        elif name in _ERRNO_WRAPPERS and (_program_errno(event.evidence.text)
                                          or _LIBRARY_MISSING_FILE.search(event.evidence.text)):
            continue
        elif name in NOT_THE_PROGRAMS_FAULT or name.endswith(_FAILED_SUFFIXES) or _NAMES_A_FAILURE.search(name):
            ws.drop(event, f"{name} reports a failure elsewhere or wraps a message other rules read")
        elif _POINTS_ELSEWHERE.search(event.evidence.text):
            ws.drop(event, f"{name}: its message points to another error")
        elif _RETURN_CODE_CHECK.search(event.evidence.text):
            ws.drop(event, f"{name}: the program's check of a call's return code; the library said why")
        elif _PEER_UNREACHABLE.search(event.evidence.text):
            ws.drop(event, f"{name}: its message says a peer could not be reached")
        elif _COLLECTIVE_FAILED.search(event.evidence.text):
            ws.drop(event, f"{name}: its message says a collective operation failed, as every participant sees a peer "
                           "that left")
        elif _RETRIED.search(event.evidence.text):
            ws.drop(event, f"{name}: logged as a warning while the operation is retried: the code caught it")
        elif _named_after(event, _WARNING_RECORD):
            ws.drop(event, f"{name}: named in a record logged at WARNING: the program caught it and went on")
        elif _SERVER_FAILED.search(event.evidence.text):
            ws.drop(event, f"{name}: a server's failure reply (HTTP 5xx), which the server's log explains")
        elif _GO_SOURCE.search(event.evidence.text):
            ws.drop(event, f"{name}: a Go program's log line, not a Python exception")
        elif _KERNEL_LINE.search(event.evidence.text):
            ws.drop(event, f"{name}: a kernel log line, not a Python exception")
        elif _REASON_FIELD.search(event.evidence.text):
            ws.drop(event, f"{name}: a status record's reason field, not a Python exception")
        elif name in ("ImportError", "ModuleNotFoundError") and (why := _import_that_did_not_fail(event.evidence.text)):
            ws.drop(event, f"{name}: {why}")


@filter_rule("ImportFailureReadByItsCause", phase=Phase.FILTER, doc="""
An ImportError or PermissionError (`Python environment error`) whose line another extractor also reads - a storage
error in its message ('cannot read file data: Stale file handle'), a library the loader could not find, a CUDA
mismatch - says which import failed; the other reading says why, and stands alone: the environment reading of that
line is dropped. So is one on a warning-level log record (NeMo's '[NeMo W', 'WARNING', a UserWarning: the program
caught the import and went on without it), and CPython's 'sys.meta_path is None, Python is likely shutting down' (an
import run while the interpreter exits, after whatever ended it).
""", cases=[
    # https://github.com/ROCm/MAD/blob/main/.claude/skills/mad-slurm-multinode/references/gotchas.md (NeMo logging a
    # checkpoint strategy it could not import, beside the real failure)
    RuleCase(title="an optional import a framework logs as a warning", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [rank0]: [NeMo W 2025-01-01 00:10:00 nemo_logging:405] Could not import megatron "
        "checkpoint strategy: ImportError: cannot import name 'tensorstore' from 'megatron.core'"]},
        expect=Expect(fired=True, sub_domain="unknown", absent=["Python environment error"])),
    # https://github.com/NVIDIA-NeMo/RL/issues/1624 (Ray workers' imports as the run tore down after its failure)
    RuleCase(title="an import at interpreter shutdown", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z ImportError: sys.meta_path is None, Python is likely shutting down"]},
        expect=Expect(fired=True, sub_domain="unknown", absent=["Python environment error"])),
    # https://github.com/pytorch/pytorch/issues/173679 (a Triton cache on NFS)
    RuleCase(title="an import from a cache on a filesystem that lost its file handle", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [rank9]: torch._inductor.exc.InductorError: ImportError: /root/.triton/cache/XU5D/"
        "cuda_utils.cpython-310-x86_64-linux-gnu.so: cannot read file data: Stale file handle"]},
        expect=Expect(fired=True, sub_domain="storage", demoted=[])),
    RuleCase(title="a module that is not installed", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [rank0]: ModuleNotFoundError: No module named 'flash_attn'"]},
        expect=Expect(fired=False, sub_domain="configuration")),
])
def import_failure_read_by_its_cause(ws: Workspace) -> None:
    _drop_where_read_elsewhere(ws, "PythonEnvironmentError", "another rule reads why the import failed")
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.rule == "PythonEnvironmentError"]:
        if why := _import_that_did_not_fail(event.evidence.text):
            ws.drop(event, why)


def _drop_where_read_elsewhere(ws: Workspace, rule: str, reason: str, generic: frozenset[str] = frozenset()) -> None:
    """Drop `rule`'s bad-node events whose line another extractor reads (the generic exception rule, and the `generic`
    ones, read lines whatever they say: their reading says nothing more)."""
    events = [e for e in ws.events_of(EventType.NODE_BAD) if e.rule == rule]
    if not events:
        return
    explained = _read_by_others(ws, rule, (EventType.NODE_BAD,), frozenset({GENERIC_EXCEPTION_RULE}) | generic)
    for event in events:
        if explained(event):
            ws.drop(event, reason)


@filter_rule("BurnInitReadByItsCause", phase=Phase.FILTER, after=("InitFailedOnEveryNode",), doc="""
gpu-burn's 'Couldn't init a GPU test: Error in <step>: <CUDA error string>' says the test could not start on a GPU, and
its CUDA error says why. When another extractor reads that error from the same line (an image built for another GPU
architecture, PTX the driver cannot compile, the fabric not ready), that reading is the cause and the generic
`GPU could not be initialised` is dropped; an error nothing else reads (cuBLAS not initialised, an unknown error) stays
the GPU's. A test that could not start on every node is read first as their shared setup (InitFailedOnEveryNode).
""", cases=[
    # https://github.com/wilicc/gpu-burn/issues/101 (gpu-burn built for a newer compute capability than a Kepler GPU's)
    RuleCase(title="the PTX gpu-burn loads cannot be compiled for the node's GPU", evidence={"n1/applog": [
        "2024-02-25T16:10:05Z n1: Couldn't init a GPU test: Error in load module (gpu_burn-drv.cpp:238): a PTX JIT "
        "compilation failed"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom="CUDA environment mismatch")),
    # https://github.com/wilicc/gpu-burn/issues/14 (cuBLAS could not start on one GPU of the node)
    RuleCase(title="cuBLAS could not start on a GPU", evidence={"n1/applog": [
        "2024-02-25T16:10:05Z 3: Couldn't init a GPU test: Error in \"init\": CUBLAS_STATUS_NOT_INITIALIZED"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def burn_init_read_by_its_cause(ws: Workspace) -> None:
    _drop_where_read_elsewhere(ws, "GpuBurnInitFailed", "gpu-burn's CUDA error is read by another rule: that is why "
                                                         "its test could not start")


@filter_rule("InternalAssertReadElsewhere", phase=Phase.FILTER, doc="""
PyTorch's internal assertions are the framework's checks; some of them have a meaning another extractor reads from the
same line (a device index beyond the GPUs CUDA counts: 'device >= 0 && device < num_gpus INTERNAL ASSERT FAILED').
The generic reading as a PyTorch bug is dropped where another rule reads the line; elsewhere it stays.
""", cases=[
    RuleCase(title="a device index the process cannot see", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z RuntimeError: device >= 0 && device < num_gpus INTERNAL ASSERT FAILED at "
        "\"../aten/src/ATen/cuda/CUDAContext.cpp\":49, please report a bug to PyTorch. device=1, num_gpus="]},
        expect=Expect(fired=True, sub_domain="configuration", absent=["PyTorch internal assertion failed"])),
    # https://github.com/pytorch/pytorch/issues/105287 (the flight recorder's own check)
    RuleCase(title="a check only the framework explains", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [E ProcessGroupNCCL.cpp:915] [Rank 1] NCCL watchdog thread terminated with exception: "
        "traceMap[thisSeq][myRank].second == kEventStart INTERNAL ASSERT FAILED at \"/opt/pytorch/pytorch/torch/csrc/"
        "distributed/c10d/TraceUtils.h\":237, please report a bug to PyTorch. "]},
        expect=Expect(fired=False, sub_domain="application")),
])
def internal_assert_read_elsewhere(ws: Workspace) -> None:
    _drop_where_read_elsewhere(ws, "TorchInternalAssert", "another rule reads what the failed check means")


@filter_rule("NoSpaceReadByItsTarget", phase=Phase.FILTER, doc="""
ENOSPC says only that a write found no room; what ran out is in the line. Where another extractor reads the same
line by what it names (a cgroup cpuset with no CPUs or memory nodes, a container image store, /dev/shm), that reading
stands alone and the generic `No space left on device` reading of the line is dropped; elsewhere it stays.
""", cases=[
    # https://github.com/Azure/cyclecloud-slurm/issues/388 (a dynamic node's cpuset cgroup)
    RuleCase(title="a cgroup write refused with ENOSPC", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z slurmstepd: error: common_file_write_uints: write value '40112' to '/sys/fs/cgroup/cpuset/"
        "slurm/uid_20118/job_21873/step_batch/cgroup.procs' failed: No space left on device"]},
        expect=Expect(fired=True, sub_domain="configuration", absent=["No space left on device"])),
    RuleCase(title="a full checkpoint filesystem", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z OSError: [Errno 28] No space left on device: '/ckpt/step_100.pt'"]},
        expect=Expect(fired=False, sub_domain="storage")),
])
def no_space_read_by_its_target(ws: Workspace) -> None:
    # srun's launch failure quotes whatever reason slurmd gave: its reading says no more than the errno
    _drop_where_read_elsewhere(ws, "ErrnoNoSpace", "another rule reads what ran out of space",
                               frozenset({"SlurmTaskLaunchFailure"}))


# An exception type at the start of another exception's message ('InductorError: OSError: [Errno 16] ...'): a wrapper
# re-raising what it caught with the caught exception's own line as its message.
_WRAPPED_TYPE = re.compile(r"(?:[A-Za-z_]\w*\.)*([A-Z]\w*(?:Error|Exception))(?::\s|$)")


def _innermost_exception(text: str, outer: str) -> str:
    """The class name of the exception a line reports: its own type's, or the type its message starts with when it
    only wraps another exception (followed through wrappers of wrappers)."""
    name = outer.rsplit(".", 1)[-1]
    at = text.find(f"{outer}: ") if outer else -1
    while at >= 0:
        at += len(outer) + 2
        inner = _WRAPPED_TYPE.match(text, at)
        if inner is None:
            break
        outer, name = inner.group(0).rstrip(": \t"), inner.group(1)
        at = text.find(f"{outer}: ", at)
    return name


CUDA_ERROR_CODE_RULE = "CudaErrorCode"


@lru_cache(maxsize=1)
def cuda_error_meanings() -> dict[str, str]:
    """The catalog symptom each CUDA error means, keyed by its number, runtime name and driver name."""
    blob = (importlib.resources.files("firstfault.rules") / "data" / "cuda_errors.toml").read_bytes()
    meanings = {}
    for row in tomllib.loads(blob.decode())["code"]:
        for key in (str(row["code"]), row["runtime"], row.get("driver"), row["message"].lower()):
            if key:
                meanings[key] = row["symptom"]
    return meanings


def _cuda_error_key(event: Event) -> str:
    for attribute in ("runtime", "driver", "code", "returned", "curesult", "hip", "relion", "geryon"):
        if value := event.attributes.get(attribute):
            return str(value)
    return str(event.attributes.get("message") or event.attributes.get("thc") or event.attributes.get("ggml")
               or "").lower()


def _read_as(title: str, line: str, sub_domain: str, symptom: str) -> RuleCase:
    """A case of one applog line (stamped 00:10) that the rule reads as `symptom`."""
    return RuleCase(title=title, evidence={"n1/applog": [f"2025-01-01T00:10:00Z {line}"]},
                    expect=Expect(fired=True, sub_domain=sub_domain, root_symptom=symptom))


# A CUDA call the program did not make: NCCL's own (its CUDACHECK's 'Cuda failure [N] '<text>'', in its allocator, proxy
# and transports; aws-ofi-nccl prints the same) and
# the driver's virtual-memory calls a library makes to map memory between GPUs or nodes (cuMemCreate, cuMemMap,
# cuMemSetAccess, cuMemExportToShareableHandle ...). Their arguments are the library's; refused, they say that this
# driver, container or fabric does not support the mapping, not that the program passed a bad value. Its proxy and
# transport threads call CUDA after the process's CUDA is running, so an 'initialization error' there does not say
# that the GPU never started either.
_LIBRARY_OWN_CALL = re.compile(r"\bCuda failure (?:\d+ )?'|\bcuMem(?:Create|Map|SetAccess|AddressReserve|ExportToShareableHandle|"
                               r"ImportFromShareableHandle|Unmap|Release)\s*\(")
_REJECTED_ARGUMENTS = "CUDA call rejected by its arguments"


@filter_rule("CudaErrorCodeMeaning", phase=Phase.FILTER_EARLY, after=("RelayedOutput",), doc="""
A CUDA error given by its number, enum name or, in NCCL's older 'Cuda failure '<text>'', only its error string
(CudaErrorCode) becomes the catalog symptom the code means (rules/data/cuda_errors.toml, from the CUDA Runtime and
Driver API enums): 700 or cudaErrorIllegalAddress is an illegal memory access, 'CUDA driver is a stub library' (34)
a CUDA environment mismatch, CUDA_ERROR_INVALID_VALUE a call rejected by its arguments, 999 an unknown error. A line that
another extractor already reads by its message keeps that reading; a code left out of the table stays context. An
argument refused in a call the program did not make (NCCL's own, a driver virtual-memory call a library makes) is not
read as the program's, nor an 'initialization error' in one as a GPU that never started (the library calls CUDA after
the process's CUDA is running): it is `CUDA call refused inside a library`, a failure whose cause the line does not say.
""", cases=[
    _read_as("a C++ code's checkCudaErrors line",
             "[3] CUDA error at solver.cu:211 code=1(cudaErrorInvalidValue) \"cudaMemcpy(d, h, n, "
             "cudaMemcpyHostToDevice)\"", "application", "CUDA call rejected by its arguments"),
    _read_as("a driver API name",
             "jax: Failed to retrieve branch_index value on stream 0x1: CUDA_ERROR_ILLEGAL_INSTRUCTION: an illegal "
             "instruction was encountered", "application", "CUDA illegal memory access"),
    # https://github.com/NVIDIA/nvbandwidth/issues/39 (nvbandwidth's CU_ASSERT; the issue cut the line short)
    _read_as("a multinode allocation the container's device access does not permit",
             "[CUDA_ERROR_NOT_PERMITTED] operation not permitted in expression cuMemCreate(&handle, "
             "roundedUpAllocationSize, &prop, 0 ) on tensorflow-benchmarks-worker-0, rank = 0 in "
             "MultinodeMemoryAllocationUn", "configuration", "CUDA feature not supported here"),
    _read_as("a line read by its message",
             "RuntimeError: CUDA error: an illegal memory access was encountered (cudaErrorIllegalAddress)",
             "application", "CUDA illegal memory access"),
    # https://github.com/deepseek-ai/DeepGEMM/issues/301 (a JIT cache entry another process had not finished writing)
    _read_as("a module file the driver could not find",
             "RuntimeError: CUDA driver error: 301 (CUDA_ERROR_FILE_NOT_FOUND, file not found)", "application",
             "CUDA call rejected by its arguments"),
    # https://github.com/horovod/horovod/issues/3831 (libcuda resolved to the toolkit's stub in a Spack build)
    _read_as("NCCL's error string without its number",
             "chifflot-7:11200:11262 [0] init.cc:255 NCCL WARN Cuda failure 'CUDA driver is a stub library'",
             "configuration", "CUDA environment mismatch"),
    # PyTorch 0.4's THC check (https://stackoverflow.com/questions/51691563 is titled by it): its number is CUDA
    # 10.0's, so it is read by its text
    _read_as("PyTorch's THC check, read by its text",
             "RuntimeError: cuda runtime error (59) : device-side assert triggered at /opt/conda/conda-bld/"
             "pytorch_1524580978845/work/aten/src/THC/generic/THCStorage.c:36", "application",
             "CUDA device-side assert"),
    # https://github.com/NVIDIA/nccl/issues/1283 (NCCL's allocator under a Ray actor; no cause found)
    RuleCase(title="NCCL's own call refused an argument", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z n1:2657296:2658232 [0] include/alloc.h:102 NCCL WARN Cuda failure 1 'invalid argument'"]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[])),
    # https://github.com/NVIDIA/nccl/issues/1029 (one rank's proxy thread on Kubernetes with RDMA; no cause found)
    RuleCase(title="NCCL's proxy thread met an initialization error", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z worker-1:3914:4530 [3] proxy.cc:1382 NCCL WARN Cuda failure 'initialization error'"]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[])),
    RuleCase(title="a code whose meaning depends on the site", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z Return value 46 from 'cudaStreamCreate(&kernel_stream)'.  Exiting."]},
        expect=Expect(fired=False, sub_domain="unknown", culprits=[])),
])
def cuda_error_code_meaning(ws: Workspace) -> None:
    coded = [e for e in ws.events_of(EventType.NODE_INTERESTING) if e.rule == CUDA_ERROR_CODE_RULE]
    if not coded:
        return
    explained = _read_by_others(ws, CUDA_ERROR_CODE_RULE, (EventType.NODE_BAD,), frozenset({GENERIC_EXCEPTION_RULE}))
    meanings = cuda_error_meanings()
    for event in coded:
        key = _cuda_error_key(event)
        symptom = meanings.get(key)
        if symptom is None:
            continue
        if symptom in (_REJECTED_ARGUMENTS, _NO_START) and _LIBRARY_OWN_CALL.search(event.evidence.text):
            symptom = "CUDA call refused inside a library"
        if explained(event):
            ws.drop(event, f"CUDA error {key} read as {symptom}")
        else:
            ws.reread(event, symptom, f"CUDA error {key} read as {symptom}", {**event.attributes, "cuda_error": key})


# The rule that sets aside a GPU fault raised on several nodes (rules/history.py reads its demotions).
ONE_NODE_FAULT_RULE = "CudaDeviceErrorOnOneNode"


@refiner(ONE_NODE_FAULT_RULE, phase=Phase.REFINE_EARLY, after=("AfterTheEnd",), doc="""
cudaErrorUnknown (999) and a CUDA that cannot initialise or find a GPU are the driver's or device's own failure, so
raised on one node while the others only wait on it, they are a GPU suspect on that node. Raised on several nodes
they follow something shared (a fabric event, a driver update, the image, the workload itself): not one GPU's
fault, so they are demoted there.
""", cases=[
    RuleCase(title="one rank's GPU", evidence={
        "n2/applog": ["2025-01-01T00:10:00Z [rank6]: RuntimeError: CUDA error: unknown error"],
        "n1/applog": ["2025-01-01T00:20:00Z [rank0]:[E0101 00:20:00.000000000 ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out."]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n2"], root_symptom="CUDA unknown error")),
    RuleCase(title="on two nodes at once", evidence={
        "n1/applog": ["2025-01-01T00:10:00Z [rank0]: RuntimeError: CUDA error: unknown error"],
        "n2/applog": ["2025-01-01T00:10:01Z [rank8]: RuntimeError: CUDA error: unknown error"]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[], demoted=["CUDA unknown error"])),
])
def cuda_device_error_on_one_node(ws: Workspace) -> None:
    for name in ("CUDA unknown error", "GPU could not be initialised"):
        raised = ws.active(prefix=name)
        nodes = sorted({s.node or "" for s in raised})
        if len(nodes) < 2:
            continue
        for s in raised:
            ws.demote(s, f"{name} on {len(nodes)} nodes ({', '.join(nodes)}): not one GPU's fault")



@refiner("CudaAbsentExplainsUcx", phase=Phase.REFINE_EARLY, doc="""
UCX loads its CUDA transports only where CUDA starts: on a node where CUDA could not be initialised, UCX's (and
NIXL's) 'UCX CUDA support was not found' follows from that, not from how UCX was built or configured. The UCX report
is demoted on that node and the CUDA failure stays the candidate.
""", cases=[
    RuleCase(title="CUDA failed to start, then UCX found no CUDA", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [n1:81230:0] cuda_ctx.c:52 UCX ERROR cuDeviceGetCount(&num_devices) failed: "
        "initialization error",
        "2025-01-01T00:10:00Z W0101 00:10:00.602481 81230 ucx_utils.cpp:627] 4 NVIDIA GPU(s) were detected, but UCX CUDA "
        "support was not found! GPU memory is not supported."]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n1"], demoted=["UCX without CUDA support"])),
    RuleCase(title="CUDA started; UCX was given no CUDA transport", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z W0101 00:10:00.602481 81230 ucx_utils.cpp:627] 4 NVIDIA GPU(s) were detected, but UCX CUDA "
        "support was not found! GPU memory is not supported."]},
        expect=Expect(fired=False, sub_domain="configuration")),
])
def cuda_absent_explains_ucx(ws: Workspace) -> None:
    for ucx in ws.active(prefix="UCX without CUDA support"):
        if _cuda_did_not_start(ws, ucx.node):
            ws.demote(ucx, f"CUDA could not be initialised on {ucx.node}: UCX had no CUDA to load")


def _cuda_did_not_start(ws: Workspace, node: str | None) -> bool:
    return bool(ws.select(node=node, prefix=_NO_START) or ws.select(node=node, prefix="CUDA could not start on any node"))


# A program's own check that it has CUDA: Megatron's 'AssertionError: Megatron requires CUDA.', 'CUDA is not available'
_NEEDS_CUDA = re.compile(r"\brequires? (?:a )?CUDA\b|\bCUDA is not available\b")


@refiner("CudaAbsentExplainsTheRequirement", phase=Phase.REFINE_EARLY, doc="""
A program that checks for CUDA before it starts ('AssertionError: Megatron requires CUDA.', 'CUDA is not available')
raises on a node where CUDA could not be initialised because of that: its exception is demoted on that node and the
CUDA failure stays the candidate.
""", cases=[
    # https://github.com/mghpcc/aicr-benchmarks/blob/main/Benchmark_WG/megatron-lm/output-2/out.a0006-16200 (CUDA unknown
    # error as every rank counted the GPUs, then Megatron's assertion)
    RuleCase(title="CUDA failed to start on both nodes, then Megatron asserted it", evidence={
        f"{n}/applog": [f"2025-01-01T00:10:0{i}Z /usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:180: "
                        "UserWarning: CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up "
                        "environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the "
                        "available devices to be zero.",
                        f"2025-01-01T00:10:0{i + 5}Z AssertionError: Megatron requires CUDA."]
        for i, n in enumerate(("n1", "n2"))},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], demoted=["Python exception"])),
    RuleCase(title="the assertion where CUDA started", evidence={
        "n1/applog": ["2025-01-01T00:10:05Z AssertionError: Megatron requires CUDA."]},
        expect=Expect(fired=False, sub_domain="application")),
])
def cuda_absent_explains_the_requirement(ws: Workspace) -> None:
    for raised in ws.active(prefix="Python exception"):
        if not any(_NEEDS_CUDA.search(e.text) for e in raised.evidence):
            continue
        if _cuda_did_not_start(ws, raised.node):
            ws.demote(raised, f"CUDA could not be initialised on {raised.node}: the program's check for it failed")


# How many lines apart a tool's loader failure and the exception that reports it may be in one output: Triton's
# PTXASError quotes ptxas's stderr on the lines after its own; subprocess' CalledProcessError follows the tool's stderr.
_QUOTED_WITHIN_LINES = 4


@refiner("LoaderFailureExplainsTheException", phase=Phase.REFINE_EARLY, doc=f"""
A program that runs a tool - Triton's JIT running ptxas, a build step running a compiler - raises when the tool fails.
When the dynamic loader could not start the tool ('error while loading shared libraries: <lib>') and the exception
that reports it sits within {_QUOTED_WITHIN_LINES} lines of that failure in the same output (Triton's PTXASError quotes
ptxas's stderr after its own line), the exception is demoted: the missing library is the cause.
""", cases=[
    # https://github.com/togethercomputer/together-dgxc-benchmarking (tests/b200/worklog/2026-04-15_rebenchmark_report.md:
    # ptxas could not load libm inside the container; Triton's PTXASError quotes its stderr)
    RuleCase(title="Triton's PTXASError quoting ptxas's loader failure", evidence={"n1/applog": [
        "2025-01-01T00:05:15Z triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error",
        "2025-01-01T00:05:15Z `ptxas` stderr:",
        "2025-01-01T00:05:15Z /usr/local/cuda/bin/ptxas: error while loading shared libraries: libm.so.6: cannot open "
        "shared object file: No such file or directory"]},
        expect=Expect(fired=True, sub_domain="configuration", demoted=["Python exception"])),
    RuleCase(title="an exception far from a loader failure in the same output", evidence={"n1/applog": [
        "2025-01-01T00:05:10Z /usr/bin/nvidia-smi: error while loading shared libraries: libnvidia-ml.so.1: cannot open "
        "shared object file: No such file or directory"] + [
        f"2025-01-01T00:05:1{i}Z epoch 0 batch {i}" for i in range(5)] + [
        "2025-01-01T00:05:15Z KeyError: 'input_ids'"]},
        expect=Expect(fired=False, active=["Python exception"])),
])
def loader_failure_explains_the_exception(ws: Workspace) -> None:
    loader_lines = [e for s in ws.active(prefix="Python environment error") if s.value_set("loader_lib")
                    for e in s.evidence]
    for raised in ws.active(prefix="Python exception"):
        if any(_quoted_together(e, failure) for e in raised.evidence for failure in loader_lines):
            ws.demote(raised, "it reports a tool the dynamic loader could not start (a missing library)")


def _quoted_together(line: Evidence, other: Evidence) -> bool:
    a, b = line.provenance, other.provenance
    return (a.origin == b.origin and a.line is not None and b.line is not None
            and abs(a.line - b.line) <= _QUOTED_WITHIN_LINES)


@refiner("ComputeModeRefusedTheProcess", phase=Phase.REFINE_EARLY, after=("AfterTheEnd",), doc="""
CUDA's 'busy or unavailable' on a node whose GPUs were set to an exclusive or prohibited compute mode is that mode
refusing a second process, not a GPU fault: the GPU error is demoted and the compute-mode setting becomes the root
(configuration, no node blamed).
""", cases=[
    RuleCase(title="a prolog put the GPUs in exclusive-process mode", evidence={"n1/syslog": [
        "Jan  1 00:00:05 n1 slurm-prolog[4]: Set compute mode to EXCLUSIVE_PROCESS for GPU 00000000:07:00.0."],
        "n1/applog": ["2025-01-01T00:01:00Z n1: Test CUDA failure common.cu:1023 'CUDA-capable device(s) is/are busy or "
                      "unavailable'"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], demoted=["CUDA device busy or unavailable"])),
    RuleCase(title="a busy GPU in the default mode", evidence={"n1/applog": [
        "2025-01-01T00:01:00Z n1: Test CUDA failure common.cu:1023 'CUDA-capable device(s) is/are busy or unavailable'"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def compute_mode_refused_the_process(ws: Workspace) -> None:
    for busy in ws.active(prefix="CUDA device busy or unavailable"):
        modes = ws.select(node=busy.node, prefix="GPU compute mode refused a process")
        if modes:
            ws.demote(busy, f"the GPUs of {busy.node} were set to {next(iter(modes[0].value_set('mode')), 'a restricted')} "
                      "compute mode: the mode refused the process")
            ws.promote(modes[0], "this node's GPUs admit one process each; CUDA refused another")


@refiner("CudaInitErrorAfterProgress", phase=Phase.REFINE_EARLY, after=("AfterTheEnd",), doc="""
CUDA's initialization error (cudaErrorInitializationError, 3) means a process could not start CUDA. Raised on a node
that had been training, CUDA had started there: a process forked after CUDA was initialised (a DataLoader worker, a
multiprocessing child with the fork start method) cannot use CUDA and gets this error, which the CUDA runtime
documents for fork. It is the program's use of CUDA across fork, not a GPU that failed to start: demoted, and no
node is blamed for it.
""", cases=[
    RuleCase(title="initialization error hours into training", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z epoch 5 batch 3584/4096 loss_avg 0.2111 lr 5.00e-04",
        "2025-01-01T01:38:40Z   what():  CUDA error: initialization error"]},
        expect=Expect(fired=True, culprits=[], demoted=["GPU could not be initialised"])),
    RuleCase(title="initialization error at start-up", evidence={"n1/applog": [
        "2025-01-01T00:00:10Z   what():  CUDA error: initialization error"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def cuda_init_error_after_progress(ws: Workspace) -> None:
    for s in ws.active(prefix="GPU could not be initialised"):
        began = None if ws.undated(s) else s.first_time
        progress = [p.first_time for p in ws.select(node=s.node, prefix="Training progress")
                    if p.first_time and not ws.undated(p)]
        if began is not None and progress and min(progress) < began:
            ws.demote(s, f"training had made progress on this node since {min(progress):%H:%M:%S}: CUDA had started "
                      "there, and a process forked after that cannot use it")


_NO_DEVICE_NODE = "GPU device node absent"


def _gpu_fault_on_record(ws: Workspace, node: str | None) -> bool:
    """A root candidate of the node's GPU, NVLink or host other than CUDA's own failure to start (an Xid, the driver's
    error): what outranks reading a GPU that CUDA did not find as the launch's doing."""
    return any(o.sub_domain in (SubDomain.GPU, SubDomain.NVLINK, SubDomain.HOST) and o.name != _NO_START
               for o in ws.active(role="root", node=node))


@refiner("NoGpuDeviceInPod", phase=Phase.REFINE_EARLY, doc=f"""
In a Kubernetes pod the GPU device nodes (/dev/nvidiaN) are the ones the container runtime injects for the GPUs the pod
was allocated. A pod that reports its device node missing (`{_NO_DEVICE_NODE}`: TensorFlow's 'no NVIDIA GPU device is
present: /dev/nvidia0 does not exist') was given no GPU - a spec without a GPU limit, a runtime class without the NVIDIA
runtime - and its CUDA's failure to start there says nothing of the node's GPUs: without a fault on record for that node
(an Xid, its driver's or its device plugin's error) the report is demoted, no node is blamed, and the missing device
node becomes the root (configuration), ahead of the error the program raised when it counted no GPU. (A node whose GPUs
are present but unusable - MIG enabled without instances, a driver that fails - keeps its device nodes.)
""", cases=[
    # https://github.com/kubeflow/trainer/issues/903 (a TFJob whose worker-0 found no GPU device)
    RuleCase(title="a pod without a GPU device node", evidence={"w1/applog": [
        "2025-01-01T00:00:10Z 2025-01-01 00:00:10.631918: E tensorflow/stream_executor/cuda/cuda_driver.cc:397] failed "
        "call to cuInit: CUDA_ERROR_NO_DEVICE",
        "2025-01-01T00:00:10Z 2025-01-01 00:00:10.631948: I tensorflow/stream_executor/cuda/cuda_diagnostics.cc:157] no "
        "NVIDIA GPU device is present: /dev/nvidia0 does not exist"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["w1", "w2"]},
        expect=Expect(fired=True, culprits=[], sub_domain="configuration", demoted=["GPU could not be initialised"])),
    RuleCase(title="the program's own check fails after TensorFlow found no device node", evidence={"w1/applog": [
        "2025-01-01T00:00:10Z 2025-01-01 00:00:10.631948: I tensorflow/stream_executor/cuda/cuda_diagnostics.cc:163] no "
        "NVIDIA GPU device is present: /dev/nvidia0 does not exist",
        "2025-01-01T00:00:13Z Traceback (most recent call last):",
        "2025-01-01T00:00:13Z AssertionError: expected 1 GPU, found 0"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["w1", "w2"]},
        expect=Expect(fired=True, culprits=[], sub_domain="configuration", root_symptom=_NO_DEVICE_NODE)),
    RuleCase(title="a pod whose CUDA found no device, its device node present", evidence={"w1/applog": [
        "2025-01-01T00:00:10Z [rank8]: RuntimeError: CUDA error: no CUDA-capable device is detected"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["w1", "w2"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["w1"])),
])
def no_gpu_device_in_pod(ws: Workspace) -> None:
    if ws.context.scheduler != "kubernetes":
        return
    for absent in ws.select(prefix=_NO_DEVICE_NODE, status="interesting"):
        if _gpu_fault_on_record(ws, absent.node):
            continue
        for s in ws.active(node=absent.node, prefix="GPU could not be initialised"):
            ws.demote(s, "the pod has no GPU device node: it was given no GPU (its spec or runtime class), no GPU failed")
        ws.promote(absent, "the pod has no GPU device node: it was given no GPU (its spec or runtime class)")


_DAEMON_LOST = "MPI daemon lost"
_NOT_STARTED = "Launcher could not start the ranks on a host"


@refiner("RelaunchAfterDaemonLost", phase=Phase.REFINE_EARLY, doc=f"""
Open MPI's launcher reports '{_DAEMON_LOST}' only for daemons it had started, so the launch had worked; a later 'ORTE was
unable to reliably start one or more daemons' on that node comes from a launch after it (a relaunched launcher pod, a
retry in the script) and says why the retry failed, not why the job did. That report is demoted; the lost daemon is
what the first launch left on record.
""", cases=[
    # https://github.com/kubeflow/mpi-operator/issues/45 (a second launcher pod started after the first lost worker-1)
    RuleCase(title="a relaunch cannot start its daemons after the first launch lost one", evidence={"l/applog": [
        "2025-01-01T00:10:00Z ORTE has lost communication with a remote daemon.",
        "2025-01-01T00:11:00Z ORTE was unable to reliably start one or more daemons."]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[], demoted=[_NOT_STARTED])),
    RuleCase(title="undated lines of one launcher log, in the order it wrote them", evidence={"l/applog": [
        "ORTE has lost communication with a remote daemon.",
        "ORTE was unable to reliably start one or more daemons."]},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[], demoted=[_NOT_STARTED])),
    RuleCase(title="daemons that never started", evidence={"l/applog": [
        "2025-01-01T00:00:05Z ORTE was unable to reliably start one or more daemons.",
        "2025-01-01T00:00:06Z ORTE has lost communication with a remote daemon."]},
        expect=Expect(fired=False, sub_domain="configuration", root_symptom=_NOT_STARTED)),
])
def relaunch_after_daemon_lost(ws: Workspace) -> None:
    for lost in ws.active(prefix=_DAEMON_LOST):
        for retry in ws.active(node=lost.node, prefix=_NOT_STARTED):
            if retry.rule == "MpiDaemonsNotStarted" and _after(ws, retry, lost):
                ws.demote(retry, f"the launcher had lost a daemon it started at {lost.first_time:%H:%M:%S}: "
                          "this launch came after the first one failed")


def _after(ws: Workspace, later: WorkSymptom, earlier: WorkSymptom) -> bool:
    """`later` came after `earlier`: by their own times, else by their order in a stream both were printed in."""
    if ws.undated(later) or ws.undated(earlier) or later.first_time is None or earlier.first_time is None:
        return printed_before(earlier, [later])
    return later.first_time > earlier.first_time


_LEFT_EARLY = "Worker finished before its peers"
# How long after a worker left its peers may take to notice it: a collective's or store's timeout.
LEFT_EARLY_NOTICED_S = 1800.0
# Completion reports of a training worker or its launcher (not a test session's or a benchmark's summary, which
# independent runners print on their own).
_A_WORKER_ENDED = re.compile(r"(?i)train|worker|succeeded|exits successfully")


@filter_rule("WorkerFinishedBeforeItsPeers", phase=Phase.FILTER, after=("ProgramRaised", "PythonExceptionFamily"), doc=f"""
Synchronous workers end together. When some nodes of a multi-node workload that did not complete reported their
own successful end (`Workload completed`), and processes on the other nodes raised within
{LEFT_EARLY_NOTICED_S / 60:.0f} minutes after it, with no exception or failure report anywhere before it and no
root candidate of any kind, the others failed because a peer they still needed had left (a report of training or of a worker that ended; a
test session's summary is not one): `{_LEFT_EARLY}` (application) is placed at the first
report of completion. A program that raised before it, or any fault on record, is read instead.
""", cases=[
    # https://github.com/tensorflow/tensorflow/pull/58830 (a chief that exited while the workers ran collectives)
    RuleCase(title="the chief exits, the workers lose it", evidence={
        "c/applog": ["2025-01-01T00:10:00Z INFO:root:Chief worker: training complete, exiting"],
        "w/applog": ["2025-01-01T00:10:13Z tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is "
                     "aborted by: cluster check alive failed, /job:worker/replica:0/task:0 is down"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["c", "w"]},
        expect=Expect(fired=True, sub_domain="application", culprits=[], root_symptom=_LEFT_EARLY)),
    RuleCase(title="a worker raised first", evidence={
        "w/applog": ["2025-01-01T00:09:00Z KeyError: 'lr'"],
        "c/applog": ["2025-01-01T00:10:00Z INFO:root:Chief worker: training complete, exiting"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": "", "nodes": ["c", "w"]},
        expect=Expect(fired=False, sub_domain="application", root_symptom="Python exception")),
])
def worker_finished_before_its_peers(ws: Workspace) -> None:
    if workload_completed(ws) or len(ws.context.nodes) < 2:
        return
    done = [e for e in ws.events if e.symptom == "Workload completed" and e.node and e.time is not None
            and not e.evidence.time_inferred and _A_WORKER_ENDED.search(e.evidence.text)]
    finished = {ws.canonical_node(e.node) for e in done}
    if not done or finished >= set(ws.context.nodes):
        return
    first = min(done, key=lambda e: e.time or datetime.max)
    assert first.time is not None
    facts = ws.events_of(f"{EventType.CONTEXT}.program_raised")  # still on the stream in this phase
    raised = [f.time for f in facts if f.time is not None]
    later = [f for f in facts if f.time is not None and ws.canonical_node(f.node) not in finished
             and timedelta(0) < f.time - first.time <= timedelta(seconds=LEFT_EARLY_NOTICED_S)]
    bad = ws.events_of(EventType.NODE_BAD)
    rooted = any(ws.catalog.symptom(e.symptom or "").role == "root" for e in bad)
    before = any(t <= first.time for t in raised) or any(e.time is not None and e.time <= first.time for e in bad)
    if later and not rooted and not before:
        ws.emit(EmitSpec(type=EventType.NODE_BAD, node=first.node, symptom=_LEFT_EARLY, evidence=first.evidence,
                         time=first.time, attributes={"meaning": f"{first.node} reported its end at {first.time:%H:%M:%S}; "
                                                      f"processes on {len(later)} other node(s) raised after it"}))


_BUILD = "PyTorch extension build never finished"


@refiner("ExtensionBuildNeverFinished", phase=Phase.REFINE, doc=f"""
A process that announced the PyTorch JIT extensions root ('Using <dir> as PyTorch extensions root...') takes or waits
for that build's file lock next. When the workload was then ended by a time limit or a cancel, and the stream that
announced it printed no extension load ('Loading extension module', 'Time to load ... op') and no training progress
after it, the processes waited on a lock no build would release: `{_BUILD}` becomes the root candidate
(configuration).
""", cases=[
    # https://blog.gitcode.com/4ebd64aa5dc354a8175abaf78350be32.html (DeepSpeed-Chat step 3 hung there; a stale cache)
    RuleCase(title="every rank waits at the extensions root until the time limit", evidence={"a/applog": [
        "a: Using /root/.cache/torch_extensions/py39_cu117 as PyTorch extensions root...",
        "a: Using /root/.cache/torch_extensions/py39_cu117 as PyTorch extensions root...",
        "slurmstepd: error: *** JOB 7 ON a CANCELLED AT 2025-01-01T02:00:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT", "exit_code": "0:15"},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_BUILD)),
    RuleCase(title="the extension loaded, then training ran out of time", evidence={"a/applog": [
        "a: Using /root/.cache/torch_extensions/py39_cu117 as PyTorch extensions root...",
        "Loading extension module fused_adam...",
        "slurmstepd: error: *** JOB 7 ON a CANCELLED AT 2025-01-01T02:00:00 DUE TO TIME LIMIT ***"]},
        context={"scheduler_state": "TIMEOUT", "exit_code": "0:15"},
        expect=Expect(fired=False, sub_domain="scheduler")),
])
def extension_build_never_finished(ws: Workspace) -> None:
    ended = recorded_state(ws.context) == TerminalState.TIMEOUT or any(
        ws.active(prefix=name) for name in WORKLOAD_ENDERS)
    if not ended:
        return
    for waiting in ws.select(prefix=_BUILD, status="interesting"):
        after = [s for s in ws.select(node=waiting.node) if s.name.startswith(("PyTorch extension loaded", "Training progress"))]
        if not printed_before(waiting, after):
            ws.promote(waiting, "the extensions root was the last thing its processes announced before the job was ended")


_CONTAINED = "CUDA contained hardware error"


def _bad_events_by_node(ws: Workspace, symptom: str) -> dict[str, list[Event]]:
    """Each node's bad events of one symptom, before they become symptoms."""
    reports: dict[str, list[Event]] = {}
    for event in ws.events:
        if event.symptom == symptom and event.type == EventType.NODE_BAD and event.node:
            reports.setdefault(event.node, []).append(event)
    return reports


@filter_rule("ContainedErrorsAcrossNodes", phase=Phase.FILTER, doc="""
CUDA_ERROR_CONTAINED reads 'invalid access of peer GPU memory over NVLink or a hardware error'. Raised on one node it
is that node's GPU; raised on several nodes whose first reports fall within the clock-skew tolerance of each other,
it is their shared NVLink path: each node's reports become one `CUDA contained errors across the NVLink domain`
event (same evidence, no node blamed).
""", cases=[
    RuleCase(title="three nodes of one NVL domain within a second", evidence={
        f"n{i}/applog": [f"2025-01-01T00:10:0{i}Z gpu_cudamallocasync_allocator.cc:414] CUDA_ERROR_CONTAINED: Invalid "
                         "access of peer GPU memory over nvlink or a hardware error"] for i in (1, 2, 3)},
        expect=Expect(fired=True, sub_domain="nvlink", culprits=[],
                      root_symptom="CUDA contained errors across the NVLink domain")),
    RuleCase(title="one node", evidence={
        "n1/applog": ["2025-01-01T00:10:00Z RuntimeError: CUDA driver error: CUDA_ERROR_CONTAINED: Invalid access "
                      "of peer GPU memory over nvlink or a hardware error"],
        "n2/applog": ["2025-01-01T00:10:00Z step 10 loss 2.1"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def contained_errors_across_nodes(ws: Workspace) -> None:
    reports = _bad_events_by_node(ws, _CONTAINED)
    firsts = sorted(e.time for events in reports.values() for e in events
                    if e.time is not None and not e.evidence.time_inferred)
    if len(reports) < 2 or not firsts or (firsts[-1] - firsts[0]).total_seconds() > ws.params.clock_skew_s:
        return
    for node, events in sorted(reports.items()):
        first = min(events, key=lambda e: (e.time is None, e.time or datetime.min))
        times = [t for e in events if (t := e.last_time or e.time) is not None]
        ws.emit(EmitSpec(type=EventType.NODE_BAD, node=node, symptom="CUDA contained errors across the NVLink domain",
                         evidence=first.evidence, time=first.time, last_time=max(times, default=None),
                         count=sum(e.count for e in events)))
        for event in events:
            ws.drop(event, f"CUDA_ERROR_CONTAINED on {len(reports)} nodes at once: their shared NVLink path")


_FEWER_GPUS = "Node reported fewer GPUs than configured"


@filter_rule("MissingGpuExplainsOrdinal", phase=Phase.FILTER, doc="""
A process refused a GPU index ('invalid device ordinal') on a node that the scheduler found reporting fewer GPUs than
configured (Slurm's 'gres/gpu count reported lower than configured'): the index is out of range because a GPU of that
node dropped off, not because of how the launch mapped ranks to devices. The refusal is read as `Node reported fewer
GPUs than configured` on that node (its own time and line), and the node is blamed.
""", cases=[
    RuleCase(title="the rank of the missing GPU, then slurmctld's registration check", evidence={
        "n2/applog": ["2025-01-01T00:01:00Z RuntimeError: CUDA error: invalid device ordinal"],
        "n1/scheduler": ["[2025-01-01T00:02:30.004] error: Setting node n2 state to INVAL with reason:gres/gpu count "
                         "reported lower than configured (3 < 4)"]},
        context={"nodes": ["n1", "n2"], "end_time": "2025-01-01T00:01:30Z"},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"], root_symptom=_FEWER_GPUS)),
    RuleCase(title="an index beyond the GPUs of a healthy node", evidence={
        "n2/applog": ["2025-01-01T00:01:00Z RuntimeError: CUDA error: invalid device ordinal"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="configuration", culprits=[])),
])
def missing_gpu_explains_ordinal(ws: Workspace) -> None:
    short = {ws.canonical_node(str(e.attributes.get("blamed_node"))) for e in ws.events_of(EventType.NODE_BAD)
             if e.symptom == _FEWER_GPUS}
    for event in list(ws.events_of(EventType.NODE_BAD)):
        if event.symptom == "GPU index outside the visible devices" and event.node in short:
            ws.reread(event, _FEWER_GPUS, f"{event.node} reported fewer GPUs than configured: the index is the missing "
                      "GPU's", {"blamed_node": event.node})


_GPU_COUNT_CONFIG = "GPU count configured above what every node reports"


@filter_rule("GpuCountLowOnEveryNode", phase=Phase.FILTER, after=("MissingGpuExplainsOrdinal",), doc=f"""
Slurm's 'gres/gpu count reported lower than configured' on one node is a GPU that node lost. On every node of the
workload (two or more) at once it is what they share: the GPU count in slurm.conf or gres.conf above what the nodes
have, an image or set-up that leaves the GPUs undetected on all of them (no NVML, no driver loaded). Independent GPU
losses do not strike every node together: the reports are read as `{_GPU_COUNT_CONFIG}` (configuration, no node blamed).
""", cases=[
    # https://github.com/BiBiServ/bibigrid/issues/726 (a cloud cluster's workers configured with two GPUs, detecting none)
    RuleCase(title="every worker reports fewer GPUs than configured", evidence={"n1/scheduler": [
        f"[2025-01-01T00:01:00.870] error: Setting node {n} state to INVAL with reason:gres/gpu count reported lower "
        "than configured (0 < 2)" for n in ("n1", "n2")]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_GPU_COUNT_CONFIG)),
    RuleCase(title="one worker of two", evidence={"n1/scheduler": [
        "[2025-01-01T00:01:00.870] error: Setting node n2 state to INVAL with reason:gres/gpu count reported lower "
        "than configured (3 < 4)"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n2"])),
])
def gpu_count_low_on_every_node(ws: Workspace) -> None:
    reports = [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == _FEWER_GPUS]
    nodes = set(ws.context.nodes)
    short = {ws.canonical_node(node) for e in reports for node in e.value_set("blamed_node")}
    if len(nodes) < 2 or not nodes <= short:
        return
    for event in reports:
        ws.reread(event, _GPU_COUNT_CONFIG, f"every one of the {len(nodes)} nodes reported fewer GPUs than configured: "
                                            "their shared configuration or set-up")


_CONTAINER_SETUP = "GPU container setup failed on the node"


_DRIVER_SILENT = "GPU driver did not answer the container runtime"
_HOOK_REASONS = (  # (reason prefix, symptom, why)
    ("cuda error: unknown error", "CUDA unknown error",
     "cuInit returned CUDA_ERROR_UNKNOWN on this node: its GPU or driver, not the container set-up"),
    ("nvcgo rpc error", "GPU container cgroup helper failed",
     "nvcgo sets up the container's device cgroups: the container runtime, not the node's GPUs"),
    ("driver error: timed out", _DRIVER_SILENT, "the node's GPU driver did not answer in time"),
    ("driver rpc error: timed out", _DRIVER_SILENT, "the node's GPU driver did not answer in time"),
    ("nvml error: driver/library version mismatch", "NVIDIA driver and library versions differ",
     "NVML found the node's NVIDIA kernel module and libraries of different releases"),
)


@filter_rule("ContainerHookReason", phase=Phase.FILTER, doc="""
nvidia-container-cli reports why it could not set up a GPU container on a node, and two reasons are not about the
node's GPU set-up: 'cuda error: unknown error' is the driver's cuInit returning CUDA_ERROR_UNKNOWN (999), a failure
of the node's GPU or driver (read as `CUDA unknown error`, which CudaDeviceErrorOnOneNode keeps only when one node
raised it); 'nvcgo rpc error' is libnvidia-container's Go helper that programs the container's device cgroups failing
or timing out (it times out when many containers start at once), the container runtime rather than the node's GPUs
(read as `GPU container cgroup helper failed`, no node blamed). A driver call that timed out ('driver error: timed
out', 'driver rpc error: timed out') is the node's GPU driver not answering: hung, or slow to wake its GPUs without
persistence mode (read as `GPU driver did not answer the container runtime`); NVML's 'driver/library version
mismatch' is the node's driver installation (read as `NVIDIA driver and library versions differ`); other driver errors
stay the node's container set-up.
""", cases=[
    # https://github.com/NVIDIA/libnvidia-container/issues/204 (a node whose GPU was failing)
    RuleCase(title="the runtime hook on a node with a failing GPU", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 kubelet[2841]: E0101 00:10:00.000000 2841 pod_workers.go:1298] Error: failed to create "
        "containerd task: OCI runtime create failed: nvidia-container-cli: initialization error: cuda error: unknown "
        "error: unknown"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n1"], root_symptom="CUDA unknown error")),
    # https://github.com/NVIDIA/nvidia-container-toolkit/issues/2102 (many GPU containers started at once)
    RuleCase(title="the cgroup helper timed out", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 containerd[1402]: time=\"2025-01-01T00:10:00Z\" level=error msg=\"StartContainer failed\" "
        "error=\"OCI runtime create failed: nvidia-container-cli: initialization error: nvcgo rpc error: timed out: "
        "unknown\""]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[],
                      root_symptom="GPU container cgroup helper failed")),
    # https://github.com/NVIDIA/nvidia-docker/issues/1047 (here relayed by pyxis through slurmstepd)
    RuleCase(title="the driver did not answer", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z slurmstepd: error: pyxis:     nvidia-container-cli: initialization error: driver error: "
        "timed out"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n1"],
                      root_symptom="GPU driver did not answer the container runtime")),
    # https://github.com/NVIDIA/gpu-operator/issues/898 (a node whose driver was upgraded under running pods)
    RuleCase(title="the hook's NVML found the module and libraries of different releases", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 containerd[1102]: nvidia-container-cli: initialization error: nvml error: driver/library "
        "version mismatch: unknown"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n1"],
                      root_symptom="NVIDIA driver and library versions differ")),
    RuleCase(title="a driver request refused", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 containerd[1]: nvidia-container-cli: initialization error: driver rpc error: failed to "
        "process request: unknown"]},
        expect=Expect(fired=False, sub_domain="configuration", culprits=["n1"])),
    RuleCase(title="a node in MIG mode", evidence={"n1/syslog": [
        "Jan  1 00:10:00 n1 containerd[1]: nvidia-container-cli: detection error: cuda error: invalid device ordinal: "
        "unknown"]},
        expect=Expect(fired=False, sub_domain="configuration", culprits=["n1"])),
])
def container_hook_reason(ws: Workspace) -> None:
    for event in list(ws.events_of(EventType.NODE_BAD)):
        if event.symptom != _CONTAINER_SETUP:
            continue
        reason = str(event.attributes.get("reason", ""))
        for prefix, symptom, why in _HOOK_REASONS:
            if reason.startswith(prefix):
                ws.reread(event, symptom, why)
                break


# nvidia-container-cli's reports that the node's driver failed it: NVML found none loaded, or a driver call failed.
_DRIVER_FAILED_THE_HOOK = ("driver not loaded", "driver error:")


@refiner("ContainerWithoutTheFailedDriver", phase=Phase.REFINE, doc=f"""
nvidia-container-cli failed by the node's driver ('nvml error: driver not loaded', 'driver error: failed to process
request') on a node whose kernel log shows its GPU driver failing (an Xid, RmInitAdapter, GSP timeouts at load, the
kernel module of another release than the libraries: a gpu root candidate of that node, no later than the report)
is that failure seen by the container runtime: `{_CONTAINER_SETUP}` is demoted and the GPU's failure stands. Without one, the driver's failure
stays the node's container set-up.
""", cases=[
    # https://github.com/NVIDIA/nvtrust/issues/123 (GSP timeouts at driver load in a confidential-computing VM)
    RuleCase(title="the driver failed at load; the pod's container then found no driver", evidence={"n1/syslog": [
        "Nov 18 09:51:41 n1 kernel: [   31.231988] NVRM: Xid (PCI:0000:01:00): 119, Timeout after 6s of waiting for RPC "
        "response from GPU0 GSP! Expected function 47 (UNLOADING_GUEST_DRIVER) sequence 423 (0x0 0x0).",
        "Nov 18 09:58:21 n1 containerd[1122]: nvidia-container-cli: initialization error: nvml error: driver not loaded: "
        "unknown"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n1"], demoted=[_CONTAINER_SETUP])),
    RuleCase(title="no driver loaded; the GPU failed an hour later", evidence={"n1/syslog": [
        "Nov 18 09:58:21 n1 containerd[1122]: nvidia-container-cli: initialization error: nvml error: driver not loaded: "
        "unknown",
        "Nov 18 10:58:21 n1 kernel: [ 3630.231988] NVRM: Xid (PCI:0000:01:00): 79, pid=0, GPU has fallen off the bus."]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False, culprits=["n1"])),
    RuleCase(title="no driver loaded, and nothing about the GPU", evidence={"n1/syslog": [
        "Nov 18 09:58:21 n1 containerd[1122]: nvidia-container-cli: initialization error: nvml error: driver not loaded: "
        "unknown"]},
        context={"nodes": ["n1", "n2"]}, expect=Expect(fired=False, sub_domain="configuration", culprits=["n1"])),
    # https://github.com/NVIDIA/nvidia-docker/issues/1252 and #1245 (a driver upgraded without a reboot)
    RuleCase(title="a driver call failed on a node whose kernel module is of another release", evidence={"n1/syslog": [
        "Nov 18 09:02:29 n1 kernel: [412907.118244] NVRM: API mismatch: the client has the version 460.56, but",
        "Nov 18 09:03:10 n1 kubelet[2201]: E1118 09:03:10.118244 2201 pod_workers.go:191] Error: failed to start "
        "container \"pytorch\": OCI runtime create failed: container_linux.go:370: starting container process caused: "
        "process_linux.go:459: container init caused: Running hook #0:: error running hook: exit status 1, stdout: , "
        "stderr: nvidia-container-cli: initialization error: driver error: failed to process request: unknown"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n1"], demoted=[_CONTAINER_SETUP])),
])
def container_without_the_failed_driver(ws: Workspace) -> None:
    for setup in ws.active(prefix=_CONTAINER_SETUP):
        if not any(reason in e.text for e in setup.evidence for reason in _DRIVER_FAILED_THE_HOOK):
            continue
        failed = _gpu_failed_first(ws, setup)
        if failed:
            ws.demote(setup, f"the node's GPU driver failed ({failed[0].name}): the container runtime met that failure")


def _gpu_failed_first(ws: Workspace, container: WorkSymptom) -> list[WorkSymptom]:
    """The gpu root candidates of `container`'s node reported no later than it (within the clock skew, or either
    undated), earliest first: a container failing there met that GPU's failure."""
    skew = timedelta(seconds=ws.params.clock_skew_s)
    faults = [g for g in ws.active(role="root", sub_domain=SubDomain.GPU, node=container.node) if g is not container
              and (ws.undated(container) or ws.undated(g) or container.first_time is None or g.first_time is None
                   or g.first_time <= container.first_time + skew)]
    return sorted(faults, key=WorkSymptom.sort_key)


# What the GPU container hook reports about a node when it cannot set up a container there (ContainerHookReason).
_HOOK_FAILURES = (_CONTAINER_SETUP, _DRIVER_SILENT, "NVIDIA driver and library versions differ")


# What explains a pod that could not start or kept failing: the GPU container hook's report about its node, the
# kernel's or Kubernetes' record of its container killed for memory, or its program's own refusal to go on (a failed
# check; an object store's target refusing to start on disks that no longer match its metadata).
_POD_STATUS_REASONS = _HOOK_FAILURES + ("Host OOM kill", "Kubernetes OOMKilled", "Library assertion failed",
                                        "Object store target's disks changed")


RAN_BEFORE_FAILING_S = 600.0  # a container that ran this long before it exited had started


def _crash_loop(title: str, exited: str, expect: Expect) -> RuleCase:
    """A case: n1's program raised at `exited` (HH:MM) after a start at 00:20; kubectl describe shows the container's
    previous run and the kubelet's CrashLoopBackOff."""
    return RuleCase(title=title, evidence={
        "n1/applog": [f"2025-01-01T{exited}:09Z ERROR 01-01 {exited}:09 [core.py:387] nixl._bindings.nixlBackendError: "
                      "NIXL_ERR_BACKEND"],
        "n1/scheduler": ["      Reason:       CrashLoopBackOff", "    Last State:     Terminated",
                         "      Started:      Wed, 01 Jan 2025 00:20:04 +0000",
                         f"      Finished:     Wed, 01 Jan 2025 {exited}:10 +0000"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"], "end_time": f"2025-01-01T{exited[:2]}:59:00Z"},
        expect=expect)


def _longest_container_run(ws: Workspace, node: str | None) -> float:
    """The longest run, in seconds, a container's state in kubectl describe pod shows on `node` (a 'Started:' and the
    'Finished:' after it in the same output); 0 when none is shown."""
    longest, started = 0.0, None
    runs = [e for e in ws.facts_of("container_run") if ws.canonical_node(e.node) == node]
    for event in sorted(runs, key=lambda e: (e.evidence.provenance.origin, e.evidence.provenance.line or 0)):
        if event.attributes.get("started"):
            started = parsedate_to_datetime(str(event.attributes["started"]))
        elif event.attributes.get("finished") and started is not None:
            finished = parsedate_to_datetime(str(event.attributes["finished"]))
            longest, started = max(longest, (finished - started).total_seconds()), None
    return longest


def _segfault_then_backoff(title: str, crashed_on: str, expect: Expect) -> RuleCase:
    """A case: the program segfaults on `crashed_on` at 01:25; n1's kubectl describe shows its container's last run
    and the kubelet's CrashLoopBackOff."""
    return RuleCase(title=title, evidence={
        f"{crashed_on}/applog": ["2025-01-01T01:25:01Z Fatal Python error: Segmentation fault"],
        "n1/scheduler": ["      Reason:       CrashLoopBackOff", "    Last State:     Terminated",
                         "      Started:      Wed, 01 Jan 2025 01:25:39 +0000",
                         "      Finished:     Wed, 01 Jan 2025 01:28:53 +0000"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"], "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T01:59:00Z"}, expect=expect)


# A program's own fatal fault, as its output or the kernel reports it: a signal it died of, or an illegal memory access
# in its GPU kernels (the CUDA context is lost and the process exits); or it ran out of GPU memory (a KV cache or a
# model larger than the GPU's free memory, at start-up or under load)
_PROGRAM_CRASHES = ("Process crashed (segfault)", "Crash in the program's own code", "CUDA illegal memory access",
                    "CUDA out of memory")


@refiner("PodStatusFollowsItsReason", phase=Phase.REFINE_EARLY, after=("BeforeTheStart", "SurvivedByProgress"), doc=f"""
Kubernetes' status of a pod whose container could not start or kept failing (CrashLoopBackOff, RunContainerError,
CreateContainerError: `Container image or start error`) says that it did not start, not why. When the GPU container
hook reported on a node why it could not set up GPU containers there ({", ".join(_HOOK_FAILURES)}), or a container
was killed for memory (the kernel's memory-cgroup OOM kill, Kubernetes' OOMKilled; runc's 'container init was
OOM-killed'), or a native library aborted its program on a failed check (`Library assertion failed`: the abort is how
the container exited), or an object store's target refused to start on its node's disks (`Object store target's disks
changed`), no later than that status, that report is the reason and the pod status is demoted. So is a
CrashLoopBackOff on a node where a process of the workload ended in an uncaught exception (fact `program_raised`)
before it: the container started and its program failed, and the kubelet backs off restarting it - what the program
raised, not the image or the start, is why - when the container is seen to have run for {RAN_BEFORE_FAILING_S / 60:.0f}
minutes or more before it exited (its previous run's 'Started:' and 'Finished:' in kubectl describe pod); one that exited soon after it started may have been given a setting
it cannot start with. A program that crashed or ran out of GPU memory no later than the status, on the node that
reported it or the one a `kubectl get pods -o wide` row names as the pod's (a segfault its output or the kernel
reports, an illegal memory access in its GPU kernels, CUDA's out of memory: {", ".join(_PROGRAM_CRASHES)}) did start,
however soon it failed: that failure, read by its own symptoms, is why the kubelet backs off. A container whose program gave up
waiting for its peers (`Rendezvous or store timeout` on its node, a Ray process's abort on a GCS that stopped
answering, or PyTorch's NCCL watchdog ending the process on a collective that did not complete - `NCCL watchdog
timeout`, the SIGABRT that exits the container with 134 - no later than the status) failed for the peers that never
came, went away or stopped, however soon: that is why it backs off, and the status is demoted. A GPU fault reported
on the pod's
own node no later than its status (a gpu root candidate: CUDA's unknown error from the container's program, an Xid)
is why, however soon the container exited: its program met the node's GPU.
""", cases=[
    # https://github.com/NVIDIA/gpu-operator/issues/898 (a node whose driver was upgraded under running pods)
    RuleCase(title="the pod crash-looped on the node whose driver the hook could not use", evidence={
        "n2/syslog": ["Jan  1 00:10:00 n2 containerd[1102]: nvidia-container-cli: initialization error: nvml error: "
                      "driver/library version mismatch: unknown"],
        "n1/applog": ["2025-01-01T00:20:00Z llm-sft-worker-1   0/1     CrashLoopBackOff   6 (2m ago)    17m   n2"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"],
                      root_symptom="NVIDIA driver and library versions differ")),
    # https://github.com/GoogleCloudPlatform/gcs-fuse-csi-driver/issues/314 (a sidecar under a too-low memory limit)
    RuleCase(title="the container's init was OOM-killed; the kubelet backs off", evidence={
        "n1/syslog": ["Jan  1 00:10:00 n1 kernel: [2922307.434718] Memory cgroup out of memory: Killed process 410233 "
                      "(runc:[2:INIT]) total-vm:1240812kB, anon-rss:259880kB, file-rss:9120kB, shmem-rss:0kB, UID:0 "
                      "pgtables:700kB oom_score_adj:-997",
                      'Jan  1 00:10:00 n1 kubelet[2231]: E0101 00:10:00.434718    2231 pod_workers.go:1298] "Error '
                      'syncing pod, skipping" err="failed to \\"StartContainer\\" for \\"gke-gcsfuse-sidecar\\" with '
                      'CrashLoopBackOff: \\"back-off 10s restarting failed container=gke-gcsfuse-sidecar"']},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="host_oom", demoted=["Container image or start error"])),
    # https://github.com/NVIDIA/aistore/issues/110 (a target restarted on GKE found its disks under other device names)
    RuleCase(title="an object store's target refused to start on its disks; the kubelet backs off", evidence={
        "n1/applog": ['2025-01-01T00:09:50Z FATAL ERROR: t[rlNlzeeu]: [storage integrity error sie#50, for '
                      'troubleshooting see https://github.com/NVIDIA/aistore/blob/master/docs/troubleshooting.md]: lost '
                      'or missing mountpath "/ais1"'],
        "n1/syslog": ['Jan  1 00:10:00 n1 kubelet[2231]: E0101 00:10:00.434718    2231 pod_workers.go:1298] "Error '
                      'syncing pod, skipping" err="failed to \\"StartContainer\\" for \\"aisnode\\" with '
                      'CrashLoopBackOff: \\"back-off 10s restarting failed container=aisnode"']},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="storage", culprits=["n1"], demoted=["Container image or start error"])),
    # https://github.com/ai-dynamo/nixl/issues/149 (a decode engine that served for hours, then raised)
    _crash_loop("the program raised after hours of serving; the kubelet backs off its restarts", "03:14",
                expect=Expect(fired=True, sub_domain="unknown", demoted=["Container image or start error"])),
    _crash_loop("the program raised at start-up, again and again", "00:21",
                expect=Expect(fired=False, sub_domain="configuration")),
    # https://github.com/NVIDIA/gpu-operator/issues/854 (the operator's CUDA validator on a node back from a reboot)
    RuleCase(title="the validator's container failed on its node's GPU", evidence={
        "n2/applog": ["2025-01-01T00:19:30Z Failed to allocate device vector A (error code unknown error)!"],
        "n2/syslog": ['Jan  1 00:20:00 n2 kubelet[2280]: E0101 00:20:00.903115    2280 pod_workers.go:1300] "Error '
                      'syncing pod, skipping" err="failed to \\"StartContainer\\" for \\"cuda-validation\\" with '
                      'CrashLoopBackOff: \\"back-off 2m40s restarting failed container=cuda-validation"']},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"], demoted=["Container image or start error"])),
    # https://github.com/kubernetes/kubernetes/issues/75439 (one replica's volume never mounted; the others crash-loop
    # in PyTorch 1.0's env:// init)
    RuleCase(title="the container's program gave up waiting for a peer that never started", evidence={
        "n1/applog": ["2025-01-01T00:35:11Z RuntimeError: Socket Timeout"],
        "n1/scheduler": ["trainer-0   0/1     CrashLoopBackOff    22         12h   10.244.1.17    n1"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]},
        expect=Expect(fired=True, demoted=["Container image or start error"])),
    # https://github.com/sgl-project/sglang/issues/10124 (prefill pods whose reduce-scatter never completed; the
    # watchdog aborted them and the kubelet backs off)
    RuleCase(title="NCCL's watchdog ended the container's program; the kubelet backs off", evidence={
        "n1/applog": ["2025-01-01T00:39:25Z [rank3]:[E101 00:39:25.432755661 ProcessGroupNCCL.cpp:2068] [PG ID 2 PG GUID "
                      "3 Rank 3] Process group watchdog thread terminated with exception: [Rank 3] Watchdog caught "
                      "collective operation timeout: WorkNCCL(SeqNum=432927, OpType=_REDUCE_SCATTER_BASE, "
                      "NumelIn=88080384, NumelOut=5505024, Timeout(ms)=600000) ran for 600000 milliseconds before "
                      "timing out."],
        "n1/scheduler": ["2025-01-01T00:39:31Z   Warning   BackOff   pod/deepseek-v3-prefill-0   Back-off restarting "
                         "failed container sglang in pod deepseek-v3-prefill-0_sglang-pd(4f1c9d2e)",
                         "      Reason:       CrashLoopBackOff"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="unknown", demoted=["Container image or start error"])),
    # https://github.com/ray-project/ray/issues/27414 (a RayCluster's head went down; the worker raylets exited on
    # the GCS check and their containers crash-looped)
    RuleCase(title="a pod listing on another node names the node whose raylet aborted on the GCS", evidence={
        "n1/applog": ["2022-07-29T01:12:31Z [2022-07-29 01:12:31,515 C 112 161] (raylet) gcs_rpc_client.h:537:  Check "
                      "failed: absl::ToInt64Seconds(absl::Now() - gcs_last_alive_time_) < ::RayConfig::instance()."
                      "gcs_rpc_server_reconnect_timeout_s() Failed to connect to GCS within 60 seconds. GCS may have "
                      "been killed."],
        "n2/scheduler": ["2022-07-29T01:24:41Z ray-worker-4n8kd   0/1     CrashLoopBackOff   9 (3m ago)    4h51m   n1"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="unknown", demoted=["Container image or start error"])),
    # https://github.com/ggml-org/llama.cpp/issues/24177 (ggml's argsort needing more shared memory than AMD GPUs have)
    RuleCase(title="the program aborted on its library's check; the kubelet backs off", evidence={
        "n1/applog": ["2025-01-01T00:29:57Z /app/ggml/src/ggml-cuda/argsort.cu:268: GGML_ASSERT(shared_mem <= smpb) "
                      "failed"],
        "n1/scheduler": ["qwen36-27b-mtp-server-0    0/1     CrashLoopBackOff   1 (68s ago)   11m"]},
        context={"scheduler": "kubernetes", "nodes": ["n1"]},
        expect=Expect(fired=True, sub_domain="application", demoted=["Container image or start error"])),
    # https://github.com/sgl-project/sglang/issues/13395 (HiCache servers segfaulting after a scale-down, then at
    # every restart)
    _segfault_then_backoff("the program segfaulted; the kubelet backs off its restarts", "n1",
                           Expect(fired=True, demoted=["Container image or start error"])),
    # https://github.com/vllm-project/vllm/issues/40121 (CUDA-graph replay faulting under load; the pod restarted)
    RuleCase(title="the server's GPU kernels faulted; its pod crash-loops", evidence={
        "n1/applog": ["2025-01-01T01:12:14Z (Worker_TP0 pid=126) ERROR 01-01 01:12:14 [multiproc_executor.py:949] "
                      "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"],
        "n1/scheduler": ["2025-01-01T01:24:22Z qwen3-32b-awq-7d9c6b5f4-tq8mz    0/1     CrashLoopBackOff   2 (40s ago)"
                         "   19m   10.42.1.17     n1"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"], "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T01:59:00Z"},
        expect=Expect(fired=True, demoted=["Container image or start error"])),
    # https://github.com/dmvevents/dynamo-vault (a TensorRT-LLM decode worker whose KV-cache fraction asked more GPU
    # memory than the model left free; its pod crash-looped, listed from another node)
    RuleCase(title="the pod's program ran out of GPU memory at start; the listing was printed elsewhere", evidence={
        "n2/applog": ["2025-01-01T00:03:09Z torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 62.73 GiB. GPU "
                      "0 has a total capacity of 79.18 GiB of which 942.00 MiB is free."],
        "n1/scheduler": ["2025-01-01T00:09:30Z trtllm-disagg-v44-trtllmdecodeworker-86c5f4d9b-q7ldw   0/1     "
                         "CrashLoopBackOff   4 (51s ago)   6m40s   n2"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"], "start_time": "2025-01-01T00:00:00Z",
                 "end_time": "2025-01-01T00:10:00Z"},
        expect=Expect(fired=True, sub_domain="gpu_oom", demoted=["Container image or start error"])),
    _segfault_then_backoff("a crash on another node does not explain this node's crash loop", "n2",
                           Expect(fired=False, sub_domain="configuration")),
    RuleCase(title="a crash loop with no hook failure", evidence={
        "n1/applog": ["2025-01-01T00:20:00Z llm-sft-worker-1   0/1     CrashLoopBackOff   6 (2m ago)    17m   n2"]},
        context={"scheduler": "kubernetes", "nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="configuration", culprits=[])),
])
def pod_status_follows_its_reason(ws: Workspace) -> None:
    skew = timedelta(seconds=ws.params.clock_skew_s)
    raised = {ws.canonical_node(e.node): e for e in ws.facts_of("program_raised")}
    for status in ws.active(prefix="Container image or start error"):
        program = raised.get(status.node)
        if "CrashLoopBackOff" in status.value_set("reason") and program is not None and (
                ws.undated(status) or program.time is None or status.first_time is None
                or program.time <= status.first_time + skew) and \
                _longest_container_run(ws, status.node) >= RAN_BEFORE_FAILING_S:
            ws.demote(status, f"its program raised {program.attributes.get('exception')} on {status.node}: the "
                              "container ran and failed, and the kubelet backs off restarting it")
    for status in ws.active(prefix="Container image or start error"):
        pods_nodes = set(_pod_nodes(ws, status))
        crashes = sorted((s for s in ws.active() if s.name in _PROGRAM_CRASHES and s.node in pods_nodes
                          and s.first_time is not None and (ws.undated(status) or status.first_time is None
                                                            or s.first_time <= status.first_time + skew)),
                         key=WorkSymptom.sort_key)
        if "CrashLoopBackOff" in status.value_set("reason") and crashes:
            ws.demote(status, f"its program failed on {status.node} ({crashes[0].name}): the container started, "
                              "and the kubelet backs off restarting it")
    for status in ws.active(prefix="Container image or start error"):
        waited = [s for node in _pod_nodes(ws, status) for s in _peer_waits(ws, node) if s.first_time is not None and (
            ws.undated(status) or status.first_time is None or s.first_time <= status.first_time + skew)]
        if "CrashLoopBackOff" in status.value_set("reason") and waited:
            ws.demote(status, f"its program gave up waiting for its peers on {status.node} ({waited[0].name}): the "
                              "container failed for the peers that never came")
    for status in ws.active(prefix="Container image or start error"):
        faults = _gpu_failed_first(ws, status)
        if faults:
            ws.demote(status, f"{faults[0].name} on {status.node} is why its container kept failing")
    reasons = [h for name in _POD_STATUS_REASONS for h in ws.active(prefix=name)]
    if not reasons:
        return
    for status in ws.active(prefix="Container image or start error"):
        explained = [h for h in reasons if ws.undated(status) or h.first_time is None or status.first_time is None
                     or h.first_time <= status.first_time + skew]
        if explained:
            ws.demote(status, f"{explained[0].name} on {explained[0].node or '-'} is why its container did not run")


# A `kubectl get pods -o wide` row: NAME READY STATUS RESTARTS AGE IP NODE ... (the restarts may carry '(3m ago)').
_WIDE_POD_ROW = re.compile(r"\S+\s+\d+/\d+\s+CrashLoopBackOff\s+\d+(?: \([^)]*\))?\s+\S+(?:\s+\S+)?\s+(?P<node>[\w.-]+)\s*$")


def _pod_nodes(ws: Workspace, status: WorkSymptom) -> list[str | None]:
    """The node a pod status was reported on, and the workload node a `kubectl get pods -o wide` row names as the
    pod's (its NODE column): a listing printed on one node can be about a pod on another."""
    named = {ws.canonical_node(m.group("node")) for e in status.evidence if (m := _WIDE_POD_ROW.search(e.text))}
    return [status.node, *sorted(n for n in named if n and n != status.node)]


def _peer_waits(ws: Workspace, node: str | None) -> list[WorkSymptom]:
    """The node's reports that its program gave up on a peer it needs: a rendezvous or store wait timed out, NCCL's
    watchdog ended the process on a collective its peers did not complete, or a Ray process aborted because the GCS
    stopped answering."""
    gave_up = ws.select(node=node, prefix=_RENDEZVOUS_TIMEOUT) + ws.select(node=node, prefix="NCCL watchdog timeout")
    return gave_up + [s for s in ws.select(node=node, prefix=RAY_CHECK) if aborted_for_the_gcs(s)]


_NO_START = "GPU could not be initialised"
_NO_DRIVER = re.compile(r"NVIDIA-SMI has failed because it couldn.t communicate with the NVIDIA driver")


def _progress_before(ws: Workspace, events: list[Event]) -> bool:
    """Whether any node made training progress before the first of these (dated) reports."""
    began = min((e.time for e in events if e.time is not None), default=None)
    progress = [e.time for e in ws.events if e.symptom == "Training progress" and e.time is not None]
    return began is not None and bool(progress) and min(progress) < began


@filter_rule("InitFailedOnEveryNode", phase=Phase.FILTER, after=("NvidiaSoftwareOnAmdGpus",), doc="""
A CUDA that could not start or found no GPU on every node of the workload (two or more), before any node made
training progress, is their shared setup, not a GPU of each: each node's reports become one `CUDA could not start on
any node` event (same evidence, configuration, no node blamed), and nvidia-smi's 'couldn't communicate with the NVIDIA
driver' (no driver loaded: the same setup, often run once for all nodes) is dropped with them. On some nodes only, or
after progress (a process forked after CUDA started), other rules read them.
""", cases=[
    # https://github.com/aws/aws-parallelcluster/issues/1768 (compute nodes whose image loaded no NVIDIA driver)
    RuleCase(title="every node at start, nvidia-smi run for both from the first", evidence={
        "n1/applog": ["2025-01-01T00:00:05Z 0: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                      "driver. Make sure that the latest NVIDIA driver is installed and running.",
                      "2025-01-01T00:00:10Z Found no NVIDIA driver on your system. Please check that you"],
        "n2/applog": ["2025-01-01T00:00:11Z Found no NVIDIA driver on your system. Please check that you"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[],
                      root_symptom="CUDA could not start on any node")),
    RuleCase(title="every node at start", evidence={
        "n1/applog": ["2025-01-01T00:00:10Z CUDA backend failed to initialize: operation gpuDeviceGetAttribute( &major, "
                      "GPU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) failed: CUDA_ERROR_NOT_INITIALIZED"],
        "n2/applog": ["2025-01-01T00:00:11Z CUDA backend failed to initialize: operation gpuDeviceGetAttribute( &major, "
                      "GPU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) failed: CUDA_ERROR_NOT_INITIALIZED"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[],
                      root_symptom="CUDA could not start on any node")),
    RuleCase(title="one node of three", evidence={
        "n1/applog": ["2025-01-01T00:00:10Z   what():  CUDA error: initialization error"],
        "n2/applog": ["2025-01-01T00:00:10Z NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>"],
        "n3/applog": ["2025-01-01T00:00:10Z NCCL INFO Bootstrap : Using eth0:10.0.0.3<0>"]},
        context={"nodes": ["n1", "n2", "n3"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def init_failed_on_every_node(ws: Workspace) -> None:
    reports = _bad_events_by_node(ws, _NO_START)
    nodes = set(ws.context.nodes)
    if len(nodes) < 2 or set(reports) != nodes:
        return
    if _progress_before(ws, [e for events in reports.values() for e in events]):
        return
    for node, events in sorted(reports.items()):
        first = min(events, key=lambda e: (e.time is None, e.time or datetime.min))
        ws.emit(EmitSpec(type=EventType.NODE_BAD, node=node, symptom="CUDA could not start on any node",
                         evidence=first.evidence, time=first.time, last_time=first.last_time,
                         count=sum(e.count for e in events)))
        for event in events:
            ws.drop(event, f"CUDA could not start on any of the {len(nodes)} nodes: their shared setup")
    for event in ws.events_of(EventType.NODE_BAD):
        if _NO_DRIVER.search(event.evidence.text):
            ws.drop(event, f"no NVIDIA driver to talk to, while CUDA could not start on any of the {len(nodes)} nodes")


_HIDDEN_GPUS = "GPUs hidden from the process"
# cudaErrorNoDevice by its text or name, and PyTorch's count of zero: the process saw no GPU at all (an initialization
# error, by contrast, says the driver or device failed)
_NO_DEVICE = re.compile(r"no CUDA-capable device is detected|\bcudaErrorNoDevice\b|CUDA_ERROR_NO_DEVICE|"
                        r"No CUDA GPUs are available")


@filter_rule("NoDeviceWhereNvidiaSmiListsGpus", phase=Phase.FILTER, after=("InitFailedOnEveryNode",), doc=f"""
nvidia-smi prints its table (the header with the driver version, then a row per GPU) only when the driver answers
and enumerates the node's GPUs; a GPU the driver lost makes it print 'Unable to determine the device handle' or 'No
devices were found' instead. A process on that node whose CUDA found no GPU at all (cudaErrorNoDevice, 'no
CUDA-capable device is detected'; PyTorch's 'No CUDA GPUs are available') was then not given the GPUs: a launch
without a GPU request (jsrun without --gpu_per_rs, srun without --gpus), an empty or wrong CUDA_VISIBLE_DEVICES, a
cgroup or container without the devices. The report is read as `{_HIDDEN_GPUS}` (configuration, no node blamed); a
GPU fault on record on the node still outranks it.
""", cases=[
    # https://github.com/NVIDIA/AMGX/issues/106 (jsrun on Summit without --gpu_per_rs; nvidia-smi on the node lists its
    # V100s)
    RuleCase(title="nvidia-smi lists the GPUs the process could not see", evidence={"n1/applog": [
        "2025-01-01T00:00:10Z Cuda error in file 'examples/amgx_mpi_capi.c' in line 149 : no CUDA-capable device is "
        "detected.",
        "2025-01-01T00:00:20Z | NVIDIA-SMI 418.116.00   Driver Version: 418.116.00   CUDA Version: 10.1     |"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_HIDDEN_GPUS)),
    RuleCase(title="no nvidia-smi table on the node", evidence={"n1/applog": [
        "2025-01-01T00:00:10Z [rank8]: RuntimeError: CUDA error: no CUDA-capable device is detected"],
        "n2/applog": ["2025-01-01T00:00:20Z | NVIDIA-SMI 418.116.00   Driver Version: 418.116.00   CUDA Version: 10.1 |"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
    RuleCase(title="an initialization error beside the table", evidence={"n1/applog": [
        "2025-01-01T00:00:10Z   what():  CUDA error: initialization error",
        "2025-01-01T00:00:20Z | NVIDIA-SMI 418.116.00   Driver Version: 418.116.00   CUDA Version: 10.1     |"]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def no_device_where_nvidia_smi_lists_gpus(ws: Workspace) -> None:
    listed = {ws.canonical_node(e.node) for e in ws.events_of(f"{EventType.CONTEXT}.driver_version")
              if e.rule == "NvidiaSmiDriverVersion"}
    for event in ws.events_of(EventType.NODE_BAD):
        if (event.symptom == _NO_START and ws.canonical_node(event.node) in listed
                and _NO_DEVICE.search(event.evidence.text)):
            ws.reread(event, _HIDDEN_GPUS, f"nvidia-smi on {event.node} lists its GPUs: the driver has them, the process "
                      "was not given any")


@filter_rule("NoDeviceOnSeveralNodes", phase=Phase.FILTER, after=("NoDeviceWhereNvidiaSmiListsGpus",), doc=f"""
A process whose CUDA found no GPU at all (cudaErrorNoDevice, 'no CUDA-capable device is detected'; PyTorch's 'No CUDA
GPUs are available') on two or more nodes of the workload at its start, before any training progress, was placed or
launched where it was given none: a partition of nodes without GPUs, a launch without a GPU request, a container
without the devices. A GPU that fails does not leave its node without any device, and several nodes do not lose all
theirs at once; an initialization error, by contrast, is the driver's or the device's failure. The reports are read as
`{_HIDDEN_GPUS}` (configuration, no node blamed).
""", cases=[
    # https://github.com/pmodels/mpich/issues/5423 (a CUDA-aware MPICH 3.4.2 build failing to start on CPU-only nodes)
    RuleCase(title="no device on the two nodes without GPUs", evidence={
        "n1/applog": ["2025-01-01T00:00:10Z CUDA Error (yaksuri_cuda_init_hook:../../../modules/yaksa/src/backend/cuda/"
                      "hooks/yaksuri_cuda_init_hooks.c,114): no CUDA-capable device is detected"],
        "n2/applog": ["2025-01-01T00:00:10Z CUDA Error (yaksuri_cuda_init_hook:../../../modules/yaksa/src/backend/cuda/"
                      "hooks/yaksuri_cuda_init_hooks.c,114): no CUDA-capable device is detected"],
        "n3/applog": ["2025-01-01T00:00:09Z NCCL INFO Bootstrap : Using ib0:10.0.0.3<0>"]},
        context={"nodes": ["n1", "n2", "n3", "n4"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_HIDDEN_GPUS)),
    RuleCase(title="an initialization error on two nodes", evidence={
        "n1/applog": ["2025-01-01T00:00:10Z   what():  CUDA error: initialization error"],
        "n2/applog": ["2025-01-01T00:00:10Z   what():  CUDA error: initialization error"]},
        context={"nodes": ["n1", "n2", "n3"]}, expect=Expect(fired=False, sub_domain="unknown", culprits=[])),
    RuleCase(title="no device on one node of three", evidence={
        "n1/applog": ["2025-01-01T00:00:10Z [rank0]: RuntimeError: CUDA error: no CUDA-capable device is detected"],
        "n2/applog": ["2025-01-01T00:00:10Z NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>"]},
        context={"nodes": ["n1", "n2", "n3"]}, expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def no_device_on_several_nodes(ws: Workspace) -> None:
    reports = {node: [e for e in events if _NO_DEVICE.search(e.evidence.text)]
               for node, events in _bad_events_by_node(ws, _NO_START).items()}
    reports = {node: events for node, events in reports.items() if events}
    if len(reports) < 2:
        return
    if _progress_before(ws, [e for events in reports.values() for e in events]):
        return
    for event in [e for node in sorted(reports) for e in reports[node]]:
        ws.reread(event, _HIDDEN_GPUS, f"no GPU at all on {len(reports)} nodes at the start: the launch or placement gave "
                  "them none")


@refiner("NoDeviceOnTheOnlyNode", phase=Phase.REFINE_EARLY, after=(ONE_NODE_FAULT_RULE,), doc="""
A process that found no GPU at all (cudaErrorNoDevice, PyTorch's 'No CUDA GPUs are available') may run on a node whose
GPUs are gone or be one its launch, environment or container hid them from. Against peers the node shows itself (rule
CudaDeviceErrorOnOneNode); in a workload of one node there is no peer, and without a GPU fault on record there (an Xid,
the driver's own error) nothing tells the node from the launch: the report is demoted and no node is blamed for it.
""", cases=[
    # https://github.com/mlcommons/training_results_v4.0 (an NCCL check whose eight tasks on the one node found no device)
    RuleCase(title="every task of a one-node check", evidence={"n1/applog": [
        "2025-01-01T00:00:10Z n1: Test CUDA failure common.cu:893 'no CUDA-capable device is detected'"]},
        context={"nodes": ["n1"]},
        expect=Expect(fired=True, culprits=[], demoted=[_NO_START])),
    RuleCase(title="the driver's own error on the one node", evidence={"n1/applog": [
        "2025-01-01T00:00:10Z n1: Test CUDA failure common.cu:893 'no CUDA-capable device is detected'"],
        "n1/syslog": ["Jan  1 00:00:05 n1 kernel: NVRM: GPU 0000:1b:00.0: RmInitAdapter failed! (0x23:0xffff:1460)"]},
        context={"nodes": ["n1"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
    RuleCase(title="an initialization error on the one node", evidence={"n1/applog": [
        "2025-01-01T00:00:10Z   what():  CUDA error: initialization error"]},
        context={"nodes": ["n1"]},
        expect=Expect(fired=False, sub_domain="gpu", culprits=["n1"])),
])
def no_device_on_the_only_node(ws: Workspace) -> None:
    if len(ws.context.nodes) != 1:
        return
    for s in ws.active(prefix=_NO_START):
        if not any(_NO_DEVICE.search(ev.text) for ev in s.evidence):
            continue
        if not _gpu_fault_on_record(ws, s.node):
            ws.demote(s, "no GPU at all in a workload of one node, no GPU fault on record there: the node and the "
                      "launch that may have hidden its GPUs cannot be told apart")


_GFX_OVERRIDDEN = "GPU target overridden (HSA_OVERRIDE_GFX_VERSION)"


@filter_rule("FaultUnderGfxOverride", phase=Phase.FILTER, doc=f"""
HSA_OVERRIDE_GFX_VERSION makes ROCm report another GFX target than the GPU's own so that builds for that target load:
AMD documents it as an unsupported workaround, and kernels built for another ISA fault. A ROCr memory-access fault
(read as a kernel's illegal memory access) in a workload whose environment set the override (a job script's echo of it
holds for every task it launches) is read as `{_GFX_OVERRIDDEN}` (configuration, no node blamed).
""", cases=[
    # https://github.com/ROCm/ROCm/issues/5238 (an MI210 job run with HSA_OVERRIDE_GFX_VERSION set)
    RuleCase(title="a memory fault with the target overridden", evidence={"n1/applog": [
        "2025-01-01T00:00:05Z HSA_OVERRIDE_GFX_VERSION=10.3.0",
        "2025-01-01T00:01:00Z Memory access fault by GPU node-1 (Agent handle: 0x55d0) on address 0x7f1. Reason: Page "
        "not present or supervisor privilege."]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_GFX_OVERRIDDEN)),
    RuleCase(title="the same fault without an override", evidence={"n1/applog": [
        "2025-01-01T00:01:00Z Memory access fault by GPU node-1 (Agent handle: 0x55d0) on address 0x7f1. Reason: Page "
        "not present or supervisor privilege."]},
        context={"nodes": ["n1", "n2"]},
        expect=Expect(fired=False, sub_domain="application")),
])
def fault_under_gfx_override(ws: Workspace) -> None:
    overrides = sorted({v for e in ws.events_of(f"{EventType.CONTEXT}.gfx_override") for v in e.value_set("gfx_override")})
    if not overrides:
        return
    for event in ws.events_of(EventType.NODE_BAD):
        if event.rule == "RocmMemoryAccessFault":
            ws.reread(event, _GFX_OVERRIDDEN, f"the job set HSA_OVERRIDE_GFX_VERSION={overrides[0]}: kernels built for "
                      "another GFX target ran on the GPU")


# CUDA that could not start or was given no GPU, whichever way it was read
_GPU_START_FAILURES = (_NO_START, "CUDA could not start on any node", _HIDDEN_GPUS)
# The program's own output this long after a GPU start failure is its work going on, not a wrapper's closing line
WENT_ON_S = 60.0


@refiner("GpuStartSurvivedInACompletedRun", phase=Phase.REFINE, doc=f"""
A program that could not start CUDA either stops there or goes on without it: TensorFlow logs 'failed call to cuInit:
CUDA_ERROR_NO_DEVICE' and places its work on the CPU, JAX warns and falls back to the CPU backend. When the run is
recorded complete (COMPLETED, Succeeded, exit 0) and the same stream went on printing the program's own lines more
than {WENT_ON_S:.0f} s after the failure, the program worked on without the GPU and finished: the failure was survived
and is demoted. With no such output after it, the accounting is questioned as before (rule CompletedWorkload).
""", cases=[
    # https://github.com/google/deepvariant/issues/761 (postprocess_variants runs on the CPU after TensorFlow's cuInit)
    RuleCase(title="TensorFlow's cuInit failure, then minutes of work on the CPU", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z 2025-01-01 00:10:00.236791: E tensorflow/compiler/xla/stream_executor/cuda/cuda_driver.cc:"
        "267] failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected",
        "2025-01-01T00:10:01Z I0101 00:10:01.677495 1404 postprocess_variants.py:1318] Using 2 CPUs for parallelization",
        "2025-01-01T00:13:50Z I0101 00:13:50.211874 1404 postprocess_variants.py:1384] Writing variants to VCF."]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=True, sub_domain="none", culprits=[], demoted=[_NO_START])),
    RuleCase(title="a wrapper's closing line seconds after", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [rank0]: RuntimeError: No CUDA GPUs are available",
        "2025-01-01T00:10:02Z run.sh: done"]},
        context={"nodes": ["n1", "n2"], "scheduler_state": "COMPLETED", "exit_code": "0:0"},
        expect=Expect(fired=False, culprits=["n1"])),
])
def gpu_start_survived_in_a_completed_run(ws: Workspace) -> None:
    if not (workload_completed(ws) or exited_zero_unrecorded(ws)):
        return
    for s in [s for name in _GPU_START_FAILURES for s in ws.active(prefix=name)]:
        last = s.last_time or s.first_time
        if last is None or ws.undated(s):
            continue
        origins = {ev.provenance.origin for ev in s.evidence}
        went_on = [ev.time for end in ws.output_ends if end.origin in origins for ev, _undated in end.points
                   if ev.time is not None and (ev.time - last).total_seconds() > WENT_ON_S]
        if went_on:
            ws.demote(s, f"the program went on printing its own work until {max(went_on):%H:%M:%S} and the run "
                      "completed: it worked on without the GPU")


SEMAPHORE_ENOSPC_S = 10.0  # an ENOSPC this soon after a semaphore-creation frame is that semaphore's


@refiner("SemaphoreBeforeEnospc", phase=Phase.REFINE_EARLY, doc=f"""
A multiprocessing semaphore-creation frame followed on the same node, within {SEMAPHORE_ENOSPC_S:.0f} s, by an
ENOSPC is /dev/shm full (configuration): the ENOSPC is demoted as its report. So is an ENOSPC that names no path
within {SEMAPHORE_ENOSPC_S:.0f} s of the DataLoader's report on that node that /dev/shm is exhausted ('insufficient
shared memory (shm)'). A semaphore frame without an ENOSPC
after it is part of some other traceback and is demoted. A child's frame re-opening an inherited semaphore
(`Semaphore removed under the job`) followed the same way by an ENOENT (FileNotFoundError) is the semaphore removed
from /dev/shm while the job ran: the ENOENT's readings are demoted as its report; without one the frame is demoted.
""", cases=[
    RuleCase(title="semaphore, then ENOSPC", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z     sl = self._semlock = _multiprocessing.SemLock(",
        "2025-01-01T00:10:00Z OSError: [Errno 28] No space left on device"]},
        expect=Expect(fired=True, sub_domain="configuration", demoted=["No space left on device"])),
    # https://github.com/spark-arena/sparkrun/issues/285 (the worker's child re-opening a semaphore logind had removed)
    RuleCase(title="a child re-opens an inherited semaphore that is gone", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z     self._semlock = _multiprocessing.SemLock._rebuild(*state)",
        "2025-01-01T00:10:00Z FileNotFoundError: [Errno 2] No such file or directory"]},
        expect=Expect(fired=True, sub_domain="configuration", root_symptom="Semaphore removed under the job")),
    # https://blog.mikihands.com/zh-hans/whitedec/2025/11/5/docker-shm-size-ipc (Docker's 64 MB /dev/shm under DataLoader
    # workers)
    RuleCase(title="the DataLoader's shm report and an ENOSPC with no path", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
        "shared memory (shm).",
        "2025-01-01T00:10:00Z [rank6] OSError: No space left on device"]},
        expect=Expect(fired=True, sub_domain="configuration", demoted=["No space left on device"])),
    RuleCase(title="near miss: an ENOSPC naming a checkpoint path stays the disk's", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
        "shared memory (shm).",
        "2025-01-01T00:10:00Z OSError: [Errno 28] No space left on device: '/ckpt/step_100.pt'"]},
        expect=Expect(fired=False, active=["No space left on device"])),
    RuleCase(title="a semaphore frame in another traceback", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z     sl = self._semlock = _multiprocessing.SemLock(",
        "2025-01-01T00:10:00Z KeyError: 'x'"]},
        expect=Expect(fired=True, sub_domain="application", demoted=["Semaphore in /dev/shm refused"])),
])
def semaphore_before_enospc(ws: Workspace) -> None:
    window = timedelta(seconds=SEMAPHORE_ENOSPC_S)
    for name, errno, label, what in (("Semaphore in /dev/shm refused", _ENOSPC, "ENOSPC", "being created in /dev/shm"),
                                     ("Semaphore removed under the job", _ENOENT, "ENOENT", "removed from /dev/shm")):
        for frame in ws.active(prefix=name):
            start = frame.first_time
            reports = [s for s in ws.active(node=frame.node) if s is not frame and start is not None
                       and s.first_time is not None and start <= s.first_time <= start + window
                       and any(errno.search(e.text) for e in s.evidence)]
            if not reports:
                ws.demote(frame, f"no {label} follows this semaphore frame: part of another traceback")
                continue
            for s in reports:
                ws.demote(s, f"the error of a semaphore {what}")
    _enospc_of_the_dataloaders_shm(ws, window)


def _enospc_of_the_dataloaders_shm(ws: Workspace, window: timedelta) -> None:
    """An ENOSPC that names no path, on a node whose DataLoader reported /dev/shm exhausted within `window` of it, is
    that shared memory's: demoted as its report."""
    for shm in ws.active(prefix=_SHM_EXHAUSTED):
        for s in ws.active(node=shm.node):
            if s is shm or shm.first_time is None or s.first_time is None or \
                    abs(s.first_time - shm.first_time) > window:
                continue
            if all(_ENOSPC.search(e.text) and not _NAMED_PATH.search(e.text) for e in s.evidence):
                ws.demote(s, "an ENOSPC with no path as the DataLoader found /dev/shm exhausted: the shared memory's")


_ENOSPC = re.compile(r"No space left on device|Errno 28\b")
_NAMED_PATH = re.compile(r"No space left on device: \S|\s/[\w.-]+/")  # the ENOSPC says where
_SHM_EXHAUSTED = "DataLoader shared memory exhausted"
_ENOENT = re.compile(r"FileNotFoundError|No such file or directory|Errno 2\b")


# Scientific codes' banners for an error their run raised: the error may be the program's own check, or one it caught
# from the GPU runtime and re-raised with its banner.
_OWN_ERROR_BANNERS = ("Program stopped on its own error (RELION)", "Program aborted on its own check (Charm++)")
BANNER_NEAR_S = 60.0  # a CUDA error report this close to a banner on the same node is the error the banner reports


@refiner("BannerReportsACudaError", phase=Phase.REFINE, doc=f"""
RELION's 'follower N encountered error' and Charm++'s CmiAbort banner report an error the run raised, whatever it
was. When the same node printed a CUDA error within {BANNER_NEAR_S:.0f} s of the banner ('ERROR: unspecified launch
failure in <file>.cu at line N (error-code 719)', a CUDA error code of any meaning), the banner is that CUDA error's
report, not the program's own check: it is demoted, and the CUDA error - read by its code, or unexplained - is what
remains.
""", cases=[
    # https://github.com/3dem/relion/issues/577 (RELION 3.1's GPU error check, code as its CUDA release numbered it)
    RuleCase(title="RELION's banner after its GPU error check", evidence={"n1/applog": [
        "2020-02-11T09:37:38Z ERROR: unspecified launch failure in /home/u/relion/src/acc/cuda/custom_allocator.cuh "
        "at line 176 (error-code 4)",
        "2020-02-11T09:37:38Z slave 7 encountered error: === Backtrace  ==="]},
        expect=Expect(fired=True, demoted=["Program stopped on its own error (RELION)"])),
    RuleCase(title="RELION's banner for an error of its own", evidence={"n1/applog": [
        "2020-02-11T09:37:38Z slave 29 encountered error: ERROR: ",
        "2020-02-11T09:37:38Z A zero-size array was attempted to be made, which should not happen."]},
        expect=Expect(fired=False, sub_domain="application",
                      root_symptom="Program stopped on its own error (RELION)")),
])
def banner_reports_a_cuda_error(ws: Workspace) -> None:
    near = timedelta(seconds=BANNER_NEAR_S)
    for banner in (b for name in _OWN_ERROR_BANNERS for b in ws.active(prefix=name)):
        if banner.first_time is None:
            continue
        errors = [e for e in ws.select(node=banner.node, prefix="CUDA error code") if e.first_time is not None
                  and abs(e.first_time - banner.first_time) <= near]
        if errors:
            ws.demote(banner, f"a CUDA error on this node at {errors[0].first_time:%H:%M:%S} is the error it reports")


_WRONG_RESULT = "GPU computed a wrong result (result validation)"


@filter_rule("RerunVerdictNamesTheGpu", phase=Phase.FILTER, doc="""
Megatron's result validation prints its 'Possible persistent error!' verdict from the rank that reran the step on
another GPU, after the first GPU had reproduced the rejected result ('First rerun: unexpected result is reproducible
within the tolerance'). The GPU at fault is the first one: the verdict becomes a root candidate on the node that
printed the first rerun's line (gpu), and stays context where no such line says which GPU that was.
""", cases=[
    RuleCase(title="reproduced on c03, refuted on c04", evidence={
        "c03/applog": ["2025-01-01T00:38:32Z WARNING:megatron.core.rerun_state_machine:First rerun: unexpected result "
                       "is reproducible within the tolerance (nan = nan). Need to rerun on a different GPU to verify "
                       "correctness"],
        "c04/applog": ["2025-01-01T00:43:10Z WARNING:megatron.core.rerun_state_machine:Second rerun: unexpected result "
                       "is not reproducible on a different GPU, therefore was likely incorrect (1.0734 != nan)",
                       "2025-01-01T00:43:10Z ERROR:megatron.core.rerun_state_machine:Rank 21, node c04, device 5, "
                       "iteration #48213: Possible persistent error!!"]},
        context={"nodes": ["c03", "c04"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["c03"], root_symptom=_WRONG_RESULT)),
    RuleCase(title="a verdict with no first rerun to name the GPU", evidence={
        "c04/applog": ["2025-01-01T00:43:10Z ERROR:megatron.core.rerun_state_machine:Rank 21, node c04, device 5, "
                       "iteration #48213: Possible persistent error!!"]},
        context={"nodes": ["c03", "c04"]}, expect=Expect(fired=False, culprits=[])),
])
def rerun_verdict_names_the_gpu(ws: Workspace) -> None:
    verdicts = [e for e in ws.events_of(EventType.NODE_INTERESTING) if e.symptom == _WRONG_RESULT]
    suspects = sorted({e.node for e in ws.events_of(EventType.NODE_INTERESTING)
                       if e.symptom == "Result reproduced on its GPU (result validation)" and e.node})
    if not verdicts or not suspects:
        return
    verdict = min(verdicts, key=lambda e: (e.time is None, e.time or datetime.min))
    for node in suspects:
        ws.emit(EmitSpec(type=EventType.NODE_BAD, node=node, symptom=_WRONG_RESULT, evidence=verdict.evidence,
                         time=verdict.time, last_time=verdict.last_time))
    for event in verdicts:
        ws.drop(event, f"the verdict on the GPU of {', '.join(suspects)}, where the first rerun reproduced the result")
    # the rejected result itself (a NaN the rank reported) was that GPU's wrong computation
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.node in suspects and e.symptom and
                  e.symptom.startswith("NaN in loss or gradients")]:
        ws.reread(event, _WRONG_RESULT, "the result the validation found wrong on this node's GPU")


@filter_rule("PeerFinishedDuringCollective", phase=Phase.FILTER, doc="""
A collective that timed out on one node (ProcessGroupNCCL's watchdog: it began Timeout(ms) before the report) while
the workers of another node reported finishing successfully during it was abandoned by those finished ranks: they
never joined it. The ranks took different paths at the program's end, which is the program's, not a node's: the
timeout is read as `Collective abandoned by finished ranks` (application, no node blamed). Only nodes that reported
no timeout of their own count as having left.
""", cases=[
    RuleCase(title="rank 0 evaluates after fit, the other node's workers return", evidence={
        "a/applog": ["2025-01-01T00:10:00Z `Trainer.fit` stopped: `max_epochs=60` reached.",
                     "2025-01-01T00:40:02Z [rank0]:[E0101 00:40:02.531000137 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog "
                     "caught collective operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE, NumelIn=1, "
                     "NumelOut=1, Timeout(ms)=1800000) ran for 1800272 milliseconds before timing out."],
        "b/applog": ["2025-01-01T00:10:03Z I0101 00:10:03.441000 91822 torch/distributed/elastic/agent/server/api.py:879] "
                     "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish."]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="application", culprits=[],
                      root_symptom="Collective abandoned by finished ranks")),
    RuleCase(title="the other node finished long before the collective began", evidence={
        "a/applog": ["2025-01-01T00:40:02Z [rank0]:[E0101 00:40:02.531000137 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog "
                     "caught collective operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE, NumelIn=1, "
                     "NumelOut=1, Timeout(ms)=600000) ran for 600272 milliseconds before timing out."],
        "b/applog": ["2025-01-01T00:01:03Z [default] worker group successfully finished."]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False)),
])
def peer_finished_during_collective(ws: Workspace) -> None:
    finished = [e for e in ws.events_of(EventType.NODE_INTERESTING)
                if e.symptom == "Workload completed" and e.time is not None and not e.evidence.time_inferred]
    if not finished:
        return
    skew = timedelta(seconds=ws.params.clock_skew_s)
    timeouts = [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == "NCCL watchdog timeout"]
    waiting = {e.node for e in timeouts}
    for timeout in timeouts:
        raw_ms = str(timeout.attributes.get("timeout_ms", ""))
        if timeout.time is None or timeout.evidence.time_inferred or not raw_ms.isdigit():
            continue
        began = timeout.time - timedelta(milliseconds=int(raw_ms))
        left = sorted({f.node or "" for f in finished if f.node not in waiting and f.time is not None
                       and began - skew <= f.time <= timeout.time})
        if left:
            ws.reread(timeout, "Collective abandoned by finished ranks",
                      f"the workers of {', '.join(left)} finished while this collective waited for them")


STALL_S = 1200.0  # training progress that stopped this long before the workload ended is a stall (a hang)


def _dated(event: Event) -> datetime | None:
    """The last time an event carries on its own line (None for lines that only inherited a time)."""
    return None if event.evidence.time_inferred else (event.last_time or event.time)


@filter_rule("TrainingStall", phase=Phase.FILTER, doc=f"""
Synchronous training makes progress on every rank or on none. When the last training-progress line (on any node)
comes more than {STALL_S / 60:.0f} minutes (and more than the longest silence its stream kept between its last lines
before, since training began: a start-up's silence is not its rhythm) before a workload that did not complete ended
(its end time, else its last dated failure line), the workload
hung: a `Training stalled` symptom is placed at the last progress line, naming when
and where progress stopped and how long nothing followed. It is a downstream symptom: a root cause that began the
stall (an Xid, a dead peer) explains it; without one it is what the answer names, and no node is blamed.
""", cases=[
    RuleCase(title="steps stop, the watchdog fires much later", evidence={"n1/applog": [
        f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)] + [
        "2025-01-01T00:50:00Z [rank0]:[E0101 00:50:00.000000000 ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=1800000) ran for 1800010 milliseconds before timing out."]},
        context={"scheduler_state": "FAILED"},
        expect=Expect(fired=True, sub_domain="unknown", culprits=[], root_symptom="Training stalled")),
    RuleCase(title="an Xid began the stall", evidence={
        "n1/applog": [f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)],
        "n2/syslog": ["Jan  1 00:19:30 n2 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=x, GPU has fallen off "
                      "the bus."]},
        context={"scheduler_state": "FAILED", "end_time": "2025-01-01T01:00:00Z"},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"], demoted=["Training stalled"])),
    RuleCase(title="working until a crash", evidence={"n1/applog": [
        f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 50)] + [
        "2025-01-01T00:50:00Z [rank0]: KeyError: 'lr'"]},
        context={"scheduler_state": "FAILED", "end_time": "2025-01-01T00:51:00Z"},
        expect=Expect(fired=False, sub_domain="application")),
    RuleCase(title="progress reported every two hours; the workload ended an hour after the last", evidence={
        "n1/applog": [f"2025-01-01T{h:02d}:04:00Z [step={h * 1000}/400000] train/CrossEntropyLoss=2.61"
                      for h in range(0, 20, 2)]},
        context={"scheduler_state": "FAILED", "end_time": "2025-01-01T19:10:00Z"},
        expect=Expect(fired=False, absent=["Training stalled"])),
    # a start-up that loaded for two hours before the first step is not the rhythm of the steps (b407-003's layout)
    RuleCase(title="two hours of start-up, steps every five minutes, then half an hour of nothing", evidence={
        "n1/applog": ["2025-01-01T00:00:05Z > initialized tensor model parallel with size 4"] + [
            f"2025-01-01T02:{m:02d}:00Z iteration {m * 20}/ 250000 | lm loss: 2.1" for m in range(0, 25, 5)] + [
            "2025-01-01T02:56:00Z [rank0]:[E0101 02:56:00.000000000 ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=1800000) ran for 1800010 milliseconds before timing out."]},
        context={"scheduler_state": "FAILED", "start_time": "2025-01-01T00:00:00Z", "end_time": "2025-01-01T02:57:00Z"},
        expect=Expect(fired=True, sub_domain="unknown", root_symptom="Training stalled")),
    RuleCase(title="a completed job that saved for long after its last step", evidence={"n1/applog": [
        f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)]},
        context={"scheduler_state": "COMPLETED", "exit_code": "0:0", "end_time": "2025-01-01T01:30:00Z"},
        expect=Expect(fired=False, sub_domain="none")),
])
def training_stall(ws: Workspace) -> None:
    if recorded_state(ws.context) == TerminalState.COMPLETED:
        return
    progress = [e for e in ws.events if e.symptom == "Training progress" and _dated(e) is not None]
    if not progress or any(e.symptom == "Workload completed" for e in ws.events):
        return
    last = max(progress, key=lambda e: (_dated(e), e.node or ""))
    stopped = _dated(last)
    failures = [t for t in (_dated(e) for e in ws.events if e.type == EventType.NODE_BAD) if t is not None]
    end = ws.context.end_time or max(failures, default=None)
    if stopped is None or end is None:
        return
    # a program that reports its progress every two hours has not stalled an hour after its last report; its rhythm is
    # read from its training (its first progress on), not from a start-up that loaded data or compiled for hours
    began = min(e.time or stopped for e in progress)
    rhythm = quiet_between_lines(ws, {last.evidence.provenance.origin}, end, since=began)
    if (end - stopped).total_seconds() <= max(STALL_S, rhythm):
        return
    minutes = (end - stopped).total_seconds() / 60
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=last.node, symptom="Training stalled", evidence=last.evidence,
                     time=stopped, attributes={
                         "meaning": f"training progress stopped at {stopped:%Y-%m-%dT%H:%M:%SZ} (last on "
                                    f"{last.node or '-'}) and nothing resumed it in the {minutes:.0f} min before the "
                                    "workload ended: it hung",
                         "stalled_min": round(minutes)}))


@refiner("StallReportedByTheProgram", phase=Phase.FINAL, doc="""
A stall (rule TrainingStall) names no cause of its own. When no root candidate stands and the program itself
reported what its ranks were doing in the stall - Horovod's stall inspector listing a collective that only some ranks
submitted, an application-level report - that report says more than the stall: the stall is demoted and the report,
with its meaning (ranks that submitted different collectives), is what the answer names. A root candidate (a GPU, a
lost peer, a crash) still explains both, and a node of the allocation that gave no evidence at all may hold one (the
missing rank may have died there): then the stall stays unexplained.
""", cases=[
    # https://github.com/horovod/horovod/issues/336 (the stall inspector's warning)
    RuleCase(title="steps stop; Horovod says rank 0 never submitted the allreduce", evidence={"n1/applog": [
        f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)] + [
        "2025-01-01T00:25:00Z WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
        "waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying "
        "to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. "
        "Stalled ops: HorovodAllreduce_loss_Mean_0 [ready ranks: 1, 2, 3]",
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 ***"]},
        context={"scheduler_state": "CANCELLED"},
        expect=Expect(fired=True, sub_domain="application", culprits=[],
                      root_symptom="Horovod ranks stalled on different tensors")),
    RuleCase(title="a node of the allocation gave no evidence: its rank may have died", evidence={"n1/applog": [
        f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)] + [
        "2025-01-01T00:25:00Z WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
        "waiting for remainder of ranks for more than 60 seconds. Stalled ops: HorovodAllreduce_loss_Mean_0 [ready "
        "ranks: 0, 1, 2]",
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 ***"]},
        context={"scheduler_state": "CANCELLED", "nodes": ["n1", "n2"]}, expect=Expect(fired=False, sub_domain="unknown")),
    RuleCase(title="a stall with no report of the program's own", evidence={"n1/applog": [
        f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)] + [
        "2025-01-01T01:59:00Z slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2025-01-01T01:59:00 ***"]},
        context={"scheduler_state": "CANCELLED"}, expect=Expect(fired=False, sub_domain="unknown")),
])
def stall_reported_by_the_program(ws: Workspace) -> None:
    if ws.active(role="root") or any(node not in ws.nodes_read for node in ws.context.nodes):
        return
    reports = [s for s in ws.active(role="symptom", sub_domain=SubDomain.APPLICATION)
               if not s.name.startswith("Training stalled")]
    if not reports:
        return
    for stall in ws.active(prefix="Training stalled"):
        ws.demote(stall, f"the program reported what its ranks did in the stall ({reports[0].name} on "
                         f"{reports[0].node or '-'})")


# PyTorch's OOM message: the request and the device's total ('capacty' is PyTorch 2.0-2.1's spelling).
_OOM_SIZES = re.compile(r"Tried to allocate (?P<asked>[0-9.]+) (?P<asked_unit>[KMGT]i?B)\. GPU \d+ has a total "
                        r"capac(?:i)?ty of (?P<total>[0-9.]+) (?P<total_unit>[KMGT]i?B)")
_BYTES = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


@filter_rule("OutOfMemoryInAWarning", phase=Phase.FILTER, doc="""
A Python warning ('fsdp/_state_dict_utils.py:312: UserWarning: Failed to clone() tensor ... CUDA out of memory') is
raised by code that caught the error and went on: the allocation failed, the program did not. A CUDA out-of-memory
reading of a warning line is dropped (the extractor captures the warning's prefix, which keeps it apart from the
raised error's lines); the same error raised is kept.
""", cases=[
    # https://github.com/tatsu-lab/stanford_alpaca/issues/65 (FSDP's state_dict gathering warns and carries on)
    RuleCase(title="FSDP warns that a clone ran out of memory, and carries on", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z /usr/lib/python3/dist-packages/torch/distributed/fsdp/_state_dict_utils.py:312: "
        "UserWarning: Failed to clone() tensor with name _fsdp_wrapped_module.layers.31.weight. This may mean that "
        "this state_dict entry could point to invalid memory regions after returning from state_dict() call if this "
        "parameter is managed by FSDP. Please check clone implementation of _fsdp_wrapped_module.layers.31.weight. "
        "Error: CUDA out of memory. Tried to allocate 172.00 MiB (GPU 0; 79.15 GiB total capacity)"]},
        expect=Expect(fired=True, sub_domain="unknown")),
    RuleCase(title="the error raised", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 172.00 MiB (GPU 0; "
        "79.15 GiB total capacity)"]},
        expect=Expect(fired=False, sub_domain="gpu_oom")),
    # https://github.com/GanjinZero/RRHF/issues/30 (the warning for one tensor, then the error raised for the next)
    RuleCase(title="the warning, then the same error raised a moment later", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z /usr/local/lib/python3.8/dist-packages/torch/distributed/fsdp/fully_sharded_data_parallel"
        ".py:2224: UserWarning: Failed to clone() tensor with name lm_head.weight. This may mean that this state_dict "
        "entry could point to invalid memory regions after returning from state_dict() call if this parameter is "
        "managed by FSDP. Please check clone implementation of lm_head.weight. Error: CUDA out of memory. Tried to "
        "allocate 982.00 MiB (GPU 2; 79.35 GiB total capacity)",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.92 GiB (GPU 2; 79.35 GiB total "
        "capacity)"]},
        expect=Expect(fired=True, sub_domain="gpu_oom")),
])
def out_of_memory_in_a_warning(ws: Workspace) -> None:
    for event in list(ws.events_of(EventType.NODE_BAD)):
        if event.symptom == "CUDA out of memory" and event.attributes.get("warned"):
            ws.drop(event, "a Python warning: the code that hit it caught the error and went on")


@filter_rule("AllocationBeyondTheGpu", phase=Phase.FILTER, doc="""
A CUDA out-of-memory error whose single request is larger than the GPU's whole memory ('Tried to allocate 125537.24
GiB. GPU 0 has a total capacity of 23.64 GiB') can never succeed, whatever else uses the GPU: the size the program
computed is wrong (a setting, a shape), not memory pressure. It is read as `Allocation larger than the GPU`
(application, no node blamed); a request that fits the GPU stays a CUDA OOM.
""", cases=[
    # https://github.com/3DTopia/Phidias-Diffusion/issues/8
    RuleCase(title="a request two hundred times the GPU", evidence={"n1/applog": [
        "2025-01-01T00:27:23Z [rank0]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 125537.24 GiB. "
        "GPU 0 has a total capacty of 23.64 GiB of which 8.26 GiB is free."]},
        expect=Expect(fired=True, sub_domain="application", culprits=[],
                      root_symptom="Allocation larger than the GPU")),
    RuleCase(title="a request that fits the GPU", evidence={"n1/applog": [
        "2025-01-01T00:27:23Z [rank0]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.15 GiB of which 1.26 GiB is free."]},
        expect=Expect(fired=False, sub_domain="gpu_oom", culprits=[])),
])
def allocation_beyond_the_gpu(ws: Workspace) -> None:
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == "CUDA out of memory"]:
        sizes = _OOM_SIZES.search(event.evidence.text)
        if sizes is None:
            continue
        asked = float(sizes["asked"]) * _BYTES[sizes["asked_unit"]]
        total = float(sizes["total"]) * _BYTES[sizes["total_unit"]]
        if asked > total:
            ws.reread(event, "Allocation larger than the GPU", f"asked for {sizes['asked']} {sizes['asked_unit']} of a "
                      f"{sizes['total']} {sizes['total_unit']} GPU: a wrong size, not memory pressure")


_TINY_MAPPING = re.compile(r"unable to mmap (\d+) bytes from file")
# A mapping this small failing for want of memory is the process's mapping limit, not the host's memory.
TINY_MAPPING_BYTES = 65536


@filter_rule("TinyMappingRefused", phase=Phase.FILTER, doc=f"""
mmap refusing a mapping of at most {TINY_MAPPING_BYTES // 1024} KiB with ENOMEM ('unable to mmap 4 bytes from file
<filename not specified>: Cannot allocate memory (12)') is not a host out of memory: no allocator fails on a few bytes
while memory is left. It is the process's limit on memory mappings (vm.max_map_count), reached by a program that keeps
every shared tensor its DataLoader workers sent. The report becomes `Process ran out of memory mappings`
(application). Mapping a multi-gigabyte file that fails stays a host memory shortage.
""", cases=[
    # https://latentwalk.io/2023/08/19/torch-shmem (a loop that appended every DataLoader batch to a list)
    RuleCase(title="a program that kept every batch", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z [rank11]: RuntimeError: unable to mmap 4 bytes from file <filename not specified>: Cannot "
        "allocate memory (12)"]},
        expect=Expect(fired=True, sub_domain="application", root_symptom="Process ran out of memory mappings")),
    # https://github.com/vllm-project/vllm/issues/759 (a checkpoint shard mapped in a pod with a small memory limit)
    RuleCase(title="a checkpoint shard too large for the container", evidence={"n1/applog": [
        "2025-01-01T00:10:00Z RuntimeError: unable to mmap 16933256392 bytes from file </root/.cache/huggingface/hub/"
        "model.safetensors>: Cannot allocate memory (12)"]},
        expect=Expect(fired=False, sub_domain="host_oom")),
])
def tiny_mapping_refused(ws: Workspace) -> None:
    for event in [e for e in ws.events_of(EventType.NODE_BAD) if e.symptom == "Host memory allocation failed"]:
        size = _TINY_MAPPING.search(event.evidence.text)
        if size and int(size.group(1)) <= TINY_MAPPING_BYTES:
            ws.reread(event, "Process ran out of memory mappings", f"mmap refused {size.group(1)} bytes: the "
                      "process's mapping limit, not the host's memory")


_RANK_TWICE = "Global rank claimed on two nodes"
RANK_CLAIM_WINDOW_S = 60.0  # claims this close are one start-up; further apart, a restart that moved the ranks


def _claim_line(rank: str, world: int) -> str:
    return f"Initializing distributed: GLOBAL_RANK: {rank}, MEMBER: {int(rank) + 1}/{world}"


@filter_rule("GlobalRankOnTwoNodes", phase=Phase.FILTER, doc=f"""
A run's global ranks are distinct. When processes on two nodes initialise with the same global rank and world size
(Lightning's 'Initializing distributed: GLOBAL_RANK: R, MEMBER: R+1/N') within {RANK_CLAIM_WINDOW_S:.0f} s of each other,
every node was given the same node rank: `{_RANK_TWICE}` (configuration, no node blamed) is placed at the second
node's claim. Claims further apart are a restart that placed the ranks anew; claims without a time of their own are
compared only when no node made a claim twice (one start-up, nothing restarted). The first ranks claimed again while
the rest of the same world never were (every process's output through one stream) are the same collision: a restart
claims the whole world again, and a node whose output is missing leaves a gap elsewhere.
""", cases=[
    RuleCase(title="two nodes both start ranks 0 and 1 of four", evidence={
        f"{n}/applog": [f"2025-01-01T00:00:0{i}Z {_claim_line(str(r), 4)}" for i, r in enumerate((0, 1))]
        + ["2025-01-01T00:01:00Z RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, internal error, NCCL "
           "version 2.14.3"] for n in "ab"},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_RANK_TWICE)),
    RuleCase(title="distinct ranks on each node", evidence={
        f"{n}/applog": [f"2025-01-01T00:00:0{i}Z {_claim_line(str(2 * k + i), 4)}" for i in range(2)]
        for k, n in enumerate("ab")}, context={"nodes": ["a", "b"]}, expect=Expect(fired=False)),
    # https://github.com/Lightning-AI/pytorch-lightning/issues/6206 (--num_nodes 1 on three nodes: each its own world)
    RuleCase(title="three nodes each start ranks 0 and 1 of two, no times", evidence={
        f"{n}/applog": ["initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/2", "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/2"]
        for n in "abc"},
        context={"nodes": ["a", "b", "c"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_RANK_TWICE)),
    # https://github.com/Lightning-AI/pytorch-lightning/issues/4389 (one srun task per node: each node starts ranks 0-3)
    RuleCase(title="ranks 0-3 of eight claimed twice in one stream", evidence={
        "a/applog": [f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8" for r in (0, 0, 1, 1, 2, 2, 3, 3)]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_RANK_TWICE)),
    RuleCase(title="each process initialised twice, one node's output missing", evidence={
        "a/applog": [f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8" for r in (0, 1, 2, 3) * 2],
        "c/applog": [f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8" for r in (6, 7) * 2]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=False)),
    RuleCase(title="the whole world claimed again after a restart", evidence={
        "a/applog": [f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4" for r in (0, 1, 2, 3, 0, 1, 2, 3)]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False)),
    RuleCase(title="one node restarted its ranks, no times", evidence={
        "a/applog": [_claim_line("0", 2), _claim_line("0", 2)], "b/applog": [_claim_line("1", 2)]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False)),
    RuleCase(title="rank 1 moved to another node when the workers restarted", evidence={
        "a/applog": [f"2025-01-01T00:00:00Z {_claim_line('1', 2)}"],
        "b/applog": [f"2025-01-01T00:20:00Z {_claim_line('1', 2)}"]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False)),
])
def global_rank_on_two_nodes(ws: Workspace) -> None:
    claims: dict[tuple[str, str], list[tuple[datetime | None, Event]]] = {}
    for event in ws.events_of(f"{EventType.CONTEXT}.global_rank"):
        if event.node:
            for rank in event.value_set("global_rank"):
                for world in event.value_set("world"):
                    claims.setdefault((rank, world), []).append((_dated(event), event))
    # undated claims are one start-up when no node made any claim twice (no restart to tell apart); a node's claims
    # coalesce into one event whose line count exceeds its distinct ranks when one was claimed again
    once = all(event.count <= len(event.value_set("global_rank")) for events in claims.values() for _, event in events)
    window = timedelta(seconds=RANK_CLAIM_WINDOW_S)

    def together(one: datetime | None, other: datetime | None) -> bool:
        return abs(one - other) <= window if one is not None and other is not None else once

    clashes = [max(one, other, key=lambda c: (c[0] is not None, c[0] or datetime.min, c[1].node or ""))
               for events in claims.values() for i, one in enumerate(events) for other in events[i + 1:]
               if one[1].node != other[1].node and together(one[0], other[0])]
    if not clashes and not once:
        clashes = _ranks_doubled_short_of_the_world(claims)
    if clashes:
        at, second = min(clashes, key=lambda c: (c[0] is None, c[0] or datetime.min, c[1].node or ""))
        ws.emit(EmitSpec(type=EventType.NODE_BAD, node=second.node, symptom=_RANK_TWICE, evidence=second.evidence,
                         time=at))


def _ranks_doubled_short_of_the_world(claims: dict[tuple[str, str], list[tuple[datetime | None, Event]]]
                                      ) -> list[tuple[datetime | None, Event]]:
    """Claims of one world size in which the first ranks (0 to k-1) were claimed again and the others of that world
    never were (all the processes' output through one stream, say): every node started the same ranks, as each node
    does when it believes it is node 0. A restart claims the whole world again, and a node whose output is missing
    leaves a gap elsewhere than at the top."""
    found = []
    for world in sorted({w for _, w in claims}):
        events = {id(e): e for (_, w), listed in claims.items() if w == world for _, e in listed}.values()
        lines = sum(e.count for e in events)
        ranks = {r for e in events for r in e.value_set("global_rank")}
        first = ranks == {str(i) for i in range(len(ranks))}
        if world.isdigit() and first and lines > len(ranks) and len(ranks) < int(world) <= lines:
            found += [(_dated(e), e) for e in events]
    return found


_RENDEZVOUS_TIMEOUT = "Rendezvous or store timeout"
# Symptoms that show the ranks did meet: progress, or collectives that ran (and timed out or failed) between them.
_RANKS_MET = frozenset({"Training progress", "NCCL watchdog timeout", "NCCL heartbeat monitor timeout",
                        "NCCL error (downstream)"})


NEVER_MET = "Ranks never met at the rendezvous"


@filter_rule("RendezvousBeforeAnyProgress", phase=Phase.FILTER, doc=f"""
A rendezvous or TCPStore that timed out waiting for its ranks, in a workload with no training progress, no report of
its training's end before the timeout and no collective that ran between ranks (an NCCL timeout or error): the ranks
may never have met. Each such timeout is also
recorded as a `{NEVER_MET}` candidate (context), which rule RendezvousNeverCompleted makes the answer when nothing
else is. XLA's key-value waits (a process that never published its key) are not read so.
""", cases=[
    RuleCase(title="the store waited for clients that never came", evidence={
        "a/applog": ["2025-01-01T00:30:00Z torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for "
                     "clients. 4/8 clients joined."]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=True)),
    # a second process group an evaluation script builds after training (MLPerf's Stable Diffusion, sync_workers.py)
    RuleCase(title="a store timeout after the training loop reported its end", evidence={
        "a/applog": ["2025-01-01T00:10:00Z `Trainer.fit` stopped: `max_steps=4000` reached.",
                     "2025-01-01T00:30:00Z torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for "
                     "clients. 4/8 clients joined."]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False)),
    RuleCase(title="a store timeout after training began", evidence={
        "a/applog": ["2025-01-01T00:05:00Z step 10 | loss 2.1",
                     "2025-01-01T00:30:00Z torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for "
                     "clients. 4/8 clients joined."]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="unknown", culprits=[])),
])
def rendezvous_before_any_progress(ws: Workspace) -> None:
    if any(e.symptom in _RANKS_MET for e in ws.events):
        return
    finished = [e.time for e in ws.events if e.symptom == "Workload completed" and e.time is not None]
    for event in ws.events_of(EventType.NODE_BAD):
        if any(event.time is not None and t < event.time for t in finished):
            continue  # the training had ended: a store its evaluation or teardown opened later timed out
        if event.symptom == _RENDEZVOUS_TIMEOUT and "GetKeyValue" not in event.evidence.text:
            ws.emit(EmitSpec(type=EventType.NODE_INTERESTING, node=event.node, symptom=NEVER_MET,
                             evidence=event.evidence, time=event.time, last_time=event.last_time, count=event.count))


# A program's own count of the GPUs it found falling short of what it needs: verl's resource pool check, vLLM's
# placement ('The number of required GPUs exceeds the total number of available GPUs in the cluster'), its argument
# check ('... cannot be larger than the number of available GPUs (N)').
_TOO_FEW_GPUS = re.compile(r"available GPUs [\d.]+ is less than (?:total )?desired GPUs|required GPUs exceeds the total "
                           r"number of available GPUs|cannot be larger than the number of available GPUs")


@refiner("TooFewGpusCountsTheFailedOne", phase=Phase.REFINE, doc="""
A program that stops because it found fewer GPUs than it needs ('Total available GPUs 23 is less than total desired
GPUs 24', vLLM's 'required GPUs exceeds the total number of available GPUs') reports a count, not a cause. When a GPU
of the workload failed before it (a GPU that did not initialise, fell off the bus, was lost), that GPU is the one
missing: the program's report is demoted, and the GPU's failure is the root. Without such a failure the count is the
job's request (configuration), and stays. A GPU failure with no time of its own (nvidia-smi's 'couldn't communicate with
the NVIDIA driver' in a script's output) counts whenever it was printed: it was found, not when it began.
""", cases=[
    # https://github.com/illinois-scicomp/machine-shop-maintenance/issues/76 (a GPU that kept failing RmInitAdapter), as
    # verl's resource-pool check then counts the GPUs
    RuleCase(title="a GPU failed to initialise; the program counts one GPU fewer", evidence={
        "b/syslog": ["Jan  1 00:10:00 b kernel: [159653.400000] NVRM: GPU 0000:81:00.0: RmInitAdapter failed! "
                     "(0x25:0x40:1470)"],
        "a/applog": ["2025-01-01T00:10:30Z ValueError: Total available GPUs 23 is less than total desired GPUs 24"]},
        context={"nodes": ["a", "b", "c"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["b"], demoted=["More GPUs asked than the Ray cluster has"])),
    # https://github.com/ray-project/ray/issues/34095 (a Ray worker node whose NVIDIA driver was gone: half the GPUs)
    RuleCase(title="nvidia-smi without a driver on one node, printed undated after the count", evidence={
        "a/applog": ["2025-01-01T00:10:30Z ValueError: The number of required GPUs exceeds the total number of "
                     "available GPUs in the cluster."],
        "b/applog": ["NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                     "latest NVIDIA driver is installed and running."]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["b"],
                      demoted=["More GPUs asked than the Ray cluster has"])),
    RuleCase(title="the count alone", evidence={
        "a/applog": ["2025-01-01T00:10:30Z ValueError: Total available GPUs 23 is less than total desired GPUs 24"]},
        context={"nodes": ["a", "b", "c"]}, expect=Expect(fired=False, sub_domain="configuration")),
])
def too_few_gpus_counts_the_failed_one(ws: Workspace) -> None:
    skew = timedelta(seconds=ws.params.clock_skew_s)
    failed = ws.active(role="root", sub_domain=SubDomain.GPU)
    for report in ws.active(role="root"):
        if report.first_time is None or not any(_TOO_FEW_GPUS.search(e.text) for e in report.evidence):
            continue
        # a GPU failure with no time of its own (nvidia-smi's output in a script) may have been found after the count
        before = [g for g in failed if g is not report and (ws.undated(g) or (
                  g.first_time is not None and g.first_time <= report.first_time + skew))]
        if before:
            first = min(before, key=WorkSymptom.sort_key)
            ws.demote(report, f"it counts the GPUs left after {first.name} on {first.node or '-'}")


_MESH_PROXY = "Service mesh proxy in the workload's pods"


@refiner("MeshProxyBetweenTheRanks", phase=Phase.FINAL, doc=f"""
A service mesh's proxy in the workload's pods (`{_MESH_PROXY}`) intercepts the connections ranks open to one another
(TCPStore, NCCL's bootstrap and sockets, MPI's daemons). When the workload never made training progress and no root
candidate stands but the time limit, deadline or cancel that ended it, the proxy is the answer (configuration, no
node blamed): the ranks never connected, or hung connecting. A workload that trained, or another fault, comes first.
""", cases=[
    # https://github.com/NVIDIA/nccl/issues/1638 (nccl-tests stuck after bootstrap between pods with istio-proxy)
    RuleCase(title="pods with Istio's proxy; the test hangs after its header until the deadline", evidence={"a/applog": [
        "2025-01-01T00:00:10Z # nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20",
        "2025-01-01T00:00:11Z nccl-tests-worker-0:27:27 [0] NCCL INFO Bootstrap : Using eth0:10.8.0.12<0>",
        "2025-01-01T00:30:00Z Labels:           security.istio.io/tlsMode=istio"]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=_MESH_PROXY)),
    RuleCase(title="pods with the proxy that trained, then failed for another reason", evidence={"a/applog": [
        "2025-01-01T00:00:10Z Labels:           security.istio.io/tlsMode=istio"] + [
        f"2025-01-01T00:{m:02d}:00Z step {m * 10} | loss 2.1" for m in range(5, 20)]},
        context={"scheduler": "kubernetes", "scheduler_state": "Failed", "exit_code": ""},
        expect=Expect(fired=False, sub_domain="unknown")),
])
def mesh_proxy_between_the_ranks(ws: Workspace) -> None:
    if ws.select(prefix="Training progress") or any(
            not s.name.startswith(WORKLOAD_ENDERS) for s in ws.active(role="root")):
        return
    proxies = ws.select(prefix=_MESH_PROXY, status="interesting")
    for s in proxies[:1]:
        ws.promote(s, "the workload never trained and nothing else failed: the mesh's proxy stood between its ranks")
        for ender in ws.active(role="root"):
            if ender.name.startswith(WORKLOAD_ENDERS):
                ws.demote(ender, "it ended a workload whose ranks never connected through the mesh's proxy")


@refiner("RendezvousNeverCompleted", phase=Phase.FINAL, after=("MeshProxyBetweenTheRanks",), doc=f"""
When no root candidate stands and the workload's rendezvous timed out before any progress or collective (rule
RendezvousBeforeAnyProgress), its ranks never met, and with no fault of its own on any node the usual reason is how
the job was launched - a master address or port its clients cannot reach or resolve, fewer nodes launched than the
rendezvous expects, a launcher started on one node only: `{NEVER_MET}` becomes the answer (configuration, no node
blamed). Any root candidate (a crash before the rendezvous, a GPU, a lost node, the scheduler) comes first, and so does
a cloud's refusal of capacity (`Cloud capacity unavailable`): the ranks that never came had no node to run on, so the
store's timeouts are demoted under it.
""", cases=[
    # https://github.com/pytorch/pytorch/issues/85300 (a client resolving the endpoint to an address nobody serves)
    RuleCase(title="the store waited for clients that never came", evidence={
        "a/applog": ["2025-01-01T00:30:00Z torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for "
                     "clients. 4/8 clients joined."]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="configuration", culprits=[], root_symptom=NEVER_MET)),
    RuleCase(title="a node's fault comes first", evidence={
        "b/syslog": ["Jan  1 00:05:00 b kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=x, GPU has fallen off "
                     "the bus."],
        "a/applog": ["2025-01-01T00:30:00Z torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for "
                     "clients. 4/8 clients joined."]},
        context={"nodes": ["a", "b"]}, expect=Expect(fired=False, sub_domain="gpu", culprits=["b"])),
    # https://github.com/huggingface/Google-Cloud-Containers/issues/126 (GKE could not add the nodes: GCE quota)
    RuleCase(title="the ranks that never came had no node", evidence={
        "a/scheduler": ["2025-01-01T00:01:00Z   Warning  FailedScaleUp  13m  cluster-autoscaler  Node scale up in zones "
                        "us-central1-c associated with this pod failed: GCE quota exceeded. Pod is at risk of not "
                        "being scheduled."],
        "a/applog": ["2025-01-01T00:30:00Z torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for "
                     "clients. 4/8 clients joined."]},
        context={"nodes": ["a", "b"]},
        expect=Expect(fired=True, sub_domain="scheduler", culprits=[], root_symptom="Cloud capacity unavailable")),
])
def rendezvous_never_completed(ws: Workspace) -> None:
    capacity = ws.active(prefix="Cloud capacity unavailable")
    if capacity and not ws.active(role="root"):
        for s in ws.active(prefix="Rendezvous or store timeout"):
            ws.demote(s, f"the cloud had no capacity for the workload's nodes ({capacity[0].node or '-'}): the ranks "
                         "that never came had no node to run on")
    if ws.active(role="root") or capacity:
        return
    for s in ws.select(prefix=NEVER_MET, status="interesting"):
        ws.promote(s, "no root candidate, and no progress or collective before the rendezvous timed out")


# Collectives whose input must have the same number of elements on every rank (all-to-all's may differ by design).
_EQUAL_SIZE_OPS = frozenset({"ALLREDUCE", "ALLGATHER", "_ALLGATHER_BASE", "REDUCE_SCATTER", "_REDUCE_SCATTER_BASE",
                             "BROADCAST", "REDUCE"})


def _watchdog_timeout(seq: int, op: str, numel: int, rank: int, group: bool = True) -> str:
    """A rule-case line: the exit of one rank's ProcessGroupNCCL watchdog on a timeout (naming group 3, or none)."""
    pg = f"[PG ID 2 PG GUID 3 Rank {rank}] Process group watchdog thread terminated with exception: " if group else ""
    return (f"2025-01-01T00:40:00Z [rank{rank}]:[E0101 00:40:00.000000000 ProcessGroupNCCL.cpp:2143] {pg}[Rank {rank}] "
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, "
            f"NumelOut={numel * 2}, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.")


@filter_rule("WatchdogSizesDisagree", phase=Phase.FILTER, doc="""
ProcessGroupNCCL's watchdog names the collective it timed out on: its sequence number, type and input size, and the
watchdog thread's exit names the process group (sequence numbers count per group). When ranks time out on the same
collective of the same group with different input sizes, and the collective needs the same size on every rank
(all-reduce, all-gather, reduce-scatter, broadcast, reduce), the ranks called it with different tensors: they had
diverged (a data-dependent shape, a rank that took another code path). A `Collective mismatch (desync)` root is
placed at the first of them; the timeouts are its symptoms. All-to-all sizes may differ, and timeouts whose group is
not named are not compared.
""", cases=[
    RuleCase(title="two ranks, one all-gather, two sizes", evidence={
        "n1/applog": [_watchdog_timeout(65054, "_ALLGATHER_BASE", 452480, 0)],
        "n2/applog": [_watchdog_timeout(65054, "_ALLGATHER_BASE", 468640, 1)]},
        expect=Expect(fired=True, sub_domain="application", culprits=[], root_symptom="Collective mismatch (desync)")),
    RuleCase(title="the same size everywhere", evidence={
        "n1/applog": [_watchdog_timeout(9, "ALLREDUCE", 1024, 0)],
        "n2/applog": [_watchdog_timeout(9, "ALLREDUCE", 1024, 1)]},
        expect=Expect(fired=False, sub_domain="unknown")),
    RuleCase(title="sizes differ, but the group is not named (each group counts its own sequence numbers)", evidence={
        "n1/applog": [_watchdog_timeout(1, "BROADCAST", 452480, 0, group=False)],
        "n2/applog": [_watchdog_timeout(1, "BROADCAST", 468640, 1, group=False)]},
        expect=Expect(fired=False, sub_domain="unknown")),
    RuleCase(title="an all-to-all with uneven splits", evidence={
        "n1/applog": [_watchdog_timeout(12, "ALLTOALL_BASE", 4096, 0)],
        "n2/applog": [_watchdog_timeout(12, "ALLTOALL_BASE", 8192, 1)]},
        expect=Expect(fired=False, sub_domain="unknown")),
])
def watchdog_sizes_disagree(ws: Workspace) -> None:
    sizes: dict[tuple[str, str, str], set[str]] = {}
    first: dict[tuple[str, str, str], Event] = {}
    for event in (e for e in ws.events if e.symptom == "NCCL watchdog timeout"):
        groups, seqs, ops = event.value_set("pg"), event.value_set("seq"), event.value_set("op")
        if len(groups) != 1 or len(seqs) != 1 or len(ops) != 1 or next(iter(ops)) not in _EQUAL_SIZE_OPS:
            continue  # no group named, or several collectives on one node: which size goes with which is not kept
        key = (next(iter(groups)), next(iter(seqs)), next(iter(ops)))
        sizes.setdefault(key, set()).update(event.value_set("numel_in"))
        if key not in first or _order(event) < _order(first[key]):
            first[key] = event
    for key, found in sorted(sizes.items()):
        if len(found) > 1:
            _group, seq, op = key
            event = first[key]
            ws.emit(EmitSpec(type=EventType.NODE_BAD, node=event.node, symptom="Collective mismatch (desync)",
                             evidence=event.evidence, time=event.time, attributes={
                                 "meaning": f"ranks timed out on collective {seq} ({op}) with different input sizes "
                                            f"({', '.join(sorted(found, key=int))} elements): they had diverged"}))
            return


@filter_rule("WatchdogOpsDisagree", phase=Phase.FILTER, after=("WatchdogSizesDisagree",), doc="""
Every rank's ProcessGroupNCCL watchdog timed out at one and the same sequence number (in one process group, where the
group is named), but not on the same kind of collective: some ranks waited in one (an all-gather), others in another
(an all-reduce). The Nth collective of a group is one call every rank must make alike; ranks that made different
calls there had taken different code paths (one more batch on some ranks at an epoch's end, a branch on rank-local
data). A `Collective mismatch (desync)` root is placed at the first timeout. Timeouts at different sequence numbers
say only where each rank was waiting, and are not read so.
""", cases=[
    RuleCase(title="ranks 0-1 in an all-gather, rank 2 in an all-reduce, all at collective 3130", evidence={
        "n1/applog": [_watchdog_timeout(3130, "_ALLGATHER_BASE", 64, 0, group=False),
                      _watchdog_timeout(3130, "_ALLGATHER_BASE", 64, 1, group=False)],
        "n2/applog": [_watchdog_timeout(3130, "ALLREDUCE", 1, 2, group=False)]},
        expect=Expect(fired=True, sub_domain="application", culprits=[], root_symptom="Collective mismatch (desync)")),
    RuleCase(title="different collectives at different sequence numbers", evidence={
        "n1/applog": [_watchdog_timeout(3130, "_ALLGATHER_BASE", 64, 0, group=False)],
        "n2/applog": [_watchdog_timeout(3127, "ALLREDUCE", 1, 1, group=False)]},
        expect=Expect(fired=False, sub_domain="unknown")),
])
def watchdog_ops_disagree(ws: Workspace) -> None:
    timeouts = [e for e in ws.events if e.symptom == "NCCL watchdog timeout"]
    if any(e.symptom == "Collective mismatch (desync)" for e in ws.events):
        return  # WatchdogSizesDisagree placed it
    seqs = {v for e in timeouts for v in e.value_set("seq")}
    groups = {v for e in timeouts for v in e.value_set("pg")}
    ops = {v for e in timeouts for v in e.value_set("op")}
    if len(seqs) != 1 or len(groups) > 1 or len(ops) < 2 or any(not e.value_set("seq") for e in timeouts):
        return
    event = min(timeouts, key=_order)
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=event.node, symptom="Collective mismatch (desync)",
                     evidence=event.evidence, time=event.time, attributes={
                         "meaning": f"every rank timed out at collective {seqs.pop()}, in different collectives "
                                    f"({', '.join(sorted(ops))}): the ranks had taken different code paths"}))


def _order(event: Event) -> tuple[bool, float, str]:
    return event.time is None, event.time.timestamp() if event.time else 0.0, event.node or ""


BUSY_MARGIN_S = 120.0  # progress this long into a collective's wait is work that went on while peers waited
_TRAINING_BAR = re.compile(r"\bloss\b", re.IGNORECASE)
# A tqdm bar's counter and elapsed time ('1582/1818 [30:02<04:26'), drawn on the line the watchdog's report then ended.
_BAR_ELAPSED = re.compile(r"\|\s*\d+/\d+ \[(?:(\d+):)?(\d+):(\d\d)<[^\]]*\][^|]*Watchdog caught")


def _watchdog_line(ts: str, rank: int) -> str:
    """A rule-case line: a rank's watchdog giving up on a broadcast after 30 minutes."""
    return (f"{ts} [E ProcessGroupNCCL.cpp:587] [Rank {rank}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=128, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1809156 milliseconds before timing out.")


@filter_rule("RankWorkedThroughTheWait", phase=Phase.FILTER, after=("WatchdogSizesDisagree",), doc=f"""
ProcessGroupNCCL's watchdog says how long the collective it gave up on had waited ('ran for N milliseconds'), so
the wait began N ms before the timeout line. Ranks stuck in a hang or behind a broken link stop making progress when
it begins. When a tqdm bar that reports no loss (not the training loop's own) printed a line with a stamp of its own
at least {BUSY_MARGIN_S / 60:.0f} minutes (or a quarter of the wait, if longer) into that wait and no later than the
timeout, some rank was working while its peers waited: it was busy outside the collective (an evaluation, sampling or
indexing loop only it runs) for longer than the timeout. Training-progress lines are not read this way: a step can
log while a collective it did not wait for is still pending. A `Rank busy outside a collective` root (application, no node
blamed) is placed at that progress line. A bar without stamps counts when the watchdog's report was printed on the
bar's own line (tqdm redraws a line without ending it) and the bar's elapsed time matches the wait the report gives
(within {BUSY_MARGIN_S / 60:.0f} minutes): the loop began when the peers began to wait, and was still running when
they gave up. A bar on that line whose elapsed time differs (a training bar last drawn before a hang) is not read.
""", cases=[
    RuleCase(title="rank 0 indexes a file while the others wait", evidence={
        "a/applog": ["2025-01-01T00:10:00Z  35%|████      | 73811/208140 [30:01<54:44, 41.0it/s]"],
        "b/applog": [_watchdog_line("2025-01-01T00:10:10Z", 9)]},
        expect=Expect(fired=True, sub_domain="application", culprits=[], root_symptom="Rank busy outside a collective")),
    RuleCase(title="progress stopped when the wait began: a hang", evidence={
        "a/applog": ["2025-01-01T00:00:00Z  35%|████      | 73811/208140 [30:01<54:44, 41.0it/s]"],
        "b/applog": [_watchdog_line("2025-01-01T00:30:10Z", 9)]},
        expect=Expect(fired=False)),
    RuleCase(title="the training loop's own bar", evidence={
        "a/applog": ["2025-01-01T00:10:00Z Epoch 2:  35%|████      | 766/2188 [30:01<54:44, 2.06it/s, loss=0.0305]"],
        "b/applog": [_watchdog_line("2025-01-01T00:10:10Z", 9)]},
        expect=Expect(fired=False)),
    # https://github.com/kohya-ss/sd-scripts/issues/971 (the main process still caching latents after 30 minutes)
    RuleCase(title="the timeout printed on the line of a bar that had run for 30 minutes", evidence={
        "a/applog": [" 87%|███▉     | 1582/1818 [30:02<04:26,  1.13s/it][E ProcessGroupNCCL.cpp:828] [Rank 1] Watchdog "
                     "caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, Timeout(ms)=1800000) ran "
                     "for 1802130 milliseconds before timing out."]},
        expect=Expect(fired=True, sub_domain="application", culprits=[], root_symptom="Rank busy outside a collective")),
    RuleCase(title="the timeout printed on the line of a bar that had run for hours (a training bar)", evidence={
        "a/applog": [" 99%|█████████▉| 23054/23316 [2:22:47<01:34,  2.79it/s][E ProcessGroupNCCL.cpp:828] [Rank 1] Watchdog "
                     "caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, Timeout(ms)=1800000) ran "
                     "for 1802130 milliseconds before timing out."]},
        expect=Expect(fired=False)),
    RuleCase(title="a bar that carries no stamp of its own", evidence={
        "a/applog": ["2025-01-01T00:09:00Z starting", " 70%|███████   | 700/1000 [26:57<11:33,  2.31s/it]"],
        "b/applog": [_watchdog_line("2025-01-01T00:10:10Z", 9)]},
        expect=Expect(fired=False)),
])
def rank_worked_through_the_wait(ws: Workspace) -> None:
    waits = []
    for event in (e for e in ws.events if e.symptom == "NCCL watchdog timeout" and _dated(e) is not None):
        waited = next(iter(event.value_set("ran_ms") or event.value_set("timeout_ms")), None)
        if waited is not None and event.time is not None:
            waits.append((event.time, float(waited) / 1000.0))
    for event in (e for e in ws.events if e.symptom == "NCCL watchdog timeout"):
        bar = _BAR_ELAPSED.search(event.evidence.text)
        ran_ms = next(iter(event.value_set("ran_ms")), None)
        if bar and ran_ms and not _TRAINING_BAR.search(event.evidence.text[:bar.end()]):
            hours, minutes, seconds = (int(g or 0) for g in bar.groups())
            if abs(hours * 3600 + minutes * 60 + seconds - float(ran_ms) / 1000.0) <= BUSY_MARGIN_S:
                _emit_busy_rank(ws, event, event.time, f"a progress bar that had run {hours * 60 + minutes} min, as "
                                "long as the collective's wait, was being drawn when the watchdog gave up")
                return
    if not waits:
        return
    timed_out, waited_s = min(waits)
    began = timed_out - timedelta(seconds=waited_s)
    busy_from = began + timedelta(seconds=max(BUSY_MARGIN_S, waited_s / 4))
    until = timed_out + timedelta(seconds=ws.params.clock_skew_s)
    for event in sorted((e for e in ws.events if e.symptom == "Progress bar"), key=_order):
        if _TRAINING_BAR.search(event.evidence.text):
            continue  # the training loop's own bar: if it advanced, the group was not all waiting
        at = next((t for t in (_dated(event), None if event.evidence.time_inferred else event.time)
                   if t is not None and busy_from <= t <= until), None)
        if at is None:
            continue
        _emit_busy_rank(ws, event, at, f"progress on {event.node or '-'} at {at:%H:%M:%S}, "
                        f"{(at - began).total_seconds() / 60:.0f} min into a {waited_s / 60:.0f}-min collective wait "
                        "that then timed out")
        return


def _emit_busy_rank(ws: Workspace, event: Event, at: datetime | None, seen: str) -> None:
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=event.node, symptom="Rank busy outside a collective",
                     evidence=event.evidence, time=at,
                     attributes={"meaning": f"{seen}: a rank was working while its peers waited"}))


STORE_TIMEOUT_MIN_S = 300.0  # c10d's Store::kDefaultTimeout: no store wait gives up sooner unless a program sets it
# A tqdm bar's elapsed time, before the remaining one ('1582/1818 [30:02<04:26').
_ELAPSED = re.compile(r"\|\s*\d+/\d+ \[(?:(\d+):)?(\d+):(\d\d)<")


@filter_rule("RankWorkedThroughTheStoreWait", phase=Phase.FILTER, after=("RankWorkedThroughTheWait",), doc=f"""
Ranks that wait at a barrier on the TCPStore (a `Rendezvous or store timeout`: 'DistStoreError: Socket Timeout',
'wait timeout after N ms') give up after the store's timeout, at least {STORE_TIMEOUT_MIN_S / 60:.0f} minutes unless the
program sets a shorter one (c10d's default). When, within {BUSY_MARGIN_S / 60:.0f} minutes before the first such
timeout, a tqdm bar that reports no loss (a preprocessing, indexing or evaluation loop, not the training loop) printed a
line with a stamp of its own showing that its loop had already run at least that long (the elapsed time the bar
prints, plus how long it went on being drawn), that loop was running through the wait: the rank drawing it was busy
outside the barrier the others waited at (rank 0 tokenising a dataset while the rest wait). A `Rank busy outside a
collective` root (application, no node blamed) is placed at that line.
""", cases=[
    RuleCase(title="rank 0 maps a dataset for 30 minutes while the others wait at the store", evidence={
        "a/applog": ["2025-01-01T00:40:00Z Map (num_proc=64):  99%|█████████▉| 133813/135065 [29:59<00:16, 41.0 "
                     "examples/s]"],
        "b/applog": ["2025-01-01T00:41:00Z [rank9]: torch.distributed.DistStoreError: Socket Timeout"]},
        expect=Expect(fired=True, sub_domain="application", culprits=[], root_symptom="Rank busy outside a collective")),
    RuleCase(title="a loop that began just before the timeout", evidence={
        "a/applog": ["2025-01-01T00:40:00Z Map (num_proc=64):  10%|█         | 13506/135065 [01:30<13:30, 150.0 "
                     "examples/s]"],
        "b/applog": ["2025-01-01T00:41:00Z [rank9]: torch.distributed.DistStoreError: Socket Timeout"]},
        expect=Expect(fired=False)),
    RuleCase(title="a long loop that ended well before the timeout", evidence={
        "a/applog": ["2025-01-01T00:20:00Z Map (num_proc=64): 100%|██████████| 135065/135065 [29:59<00:00, 75.0 "
                     "examples/s]"],
        "b/applog": ["2025-01-01T00:41:00Z [rank9]: torch.distributed.DistStoreError: Socket Timeout"]},
        expect=Expect(fired=False)),
])
def rank_worked_through_the_store_wait(ws: Workspace) -> None:
    if any(e.symptom == "Rank busy outside a collective" for e in ws.events):
        return
    gave_up = [t for t in (_dated(e) for e in ws.events if e.symptom == _RENDEZVOUS_TIMEOUT
                           and "GetKeyValue" not in e.evidence.text) if t is not None]
    if not gave_up:
        return
    first = min(gave_up)
    since, until = first - timedelta(seconds=BUSY_MARGIN_S), first + timedelta(seconds=ws.params.clock_skew_s)
    for event in sorted((e for e in ws.events if e.symptom == "Progress bar"), key=_order):
        at, elapsed = _dated(event), _ELAPSED.search(event.evidence.text)
        if at is None or elapsed is None or _TRAINING_BAR.search(event.evidence.text) or not since <= at <= until:
            continue
        hours, minutes, seconds = (int(g or 0) for g in elapsed.groups())
        # the elapsed time its (first) line shows, plus how long the bar went on being drawn after that line
        ran = hours * 3600 + minutes * 60 + seconds + (at - (event.time or at)).total_seconds()
        if ran >= STORE_TIMEOUT_MIN_S:
            _emit_busy_rank(ws, event, at, f"a loop on {event.node or '-'} that had run {ran / 60:.0f} min was still "
                            f"drawing its bar at {at:%H:%M:%S}, as the ranks waiting at the store gave up")
            return


# Reports that a kernel touched memory or ran code it should not: the program's bug or a faulty GPU (CUDA 700/715
# and the host's Xid 13 / Xid 31 for the same event). Where they recur tells the two apart.
KERNEL_FAULT_REPORTS = ("CUDA illegal memory access", "XID-13", "XID-31")


def _faults_and_restarts(hours: tuple[int, ...], max_restarts: int) -> list[str]:
    """Rule-case lines: rank 15 faults at each hour; the elastic agent restarts the workers after all but the last."""
    lines = []
    for i, h in enumerate(hours):
        lines.append(f"2025-01-01T0{h}:10:00Z [rank15]: RuntimeError: CUDA error: an illegal memory access was "
                     "encountered")
        if i < len(hours) - 1:
            lines.append(f"2025-01-01T0{h}:10:05Z WARNING:torch.distributed.elastic.agent.server.api:[default] Worker "
                         f"group FAILED. {max_restarts - i}/{max_restarts} attempts left; will restart worker group")
    return lines


@filter_rule("KernelFaultFollowsOneGpu", phase=Phase.FILTER, doc="""
An illegal address or instruction (CUDA 700/715, Xid 13/31) is usually the program's bug, and a bug runs on every
rank. When an elastic job restarted its workers at least twice, one node faulted before the first restart and
again after the last one, and no other node of the workload ever faulted, the fault followed that node's GPU
through every attempt: a `Kernel faults recur on one GPU` root candidate is placed on it (its application reports
are then outranked as reports of the same incident). One fault, or faults on several nodes, stay the program's.
""", cases=[
    RuleCase(title="rank 15 faults in every attempt", evidence={
        "n2/applog": _faults_and_restarts(hours=(1, 2, 3), max_restarts=2),
        "n1/applog": [f"2025-01-01T0{h}:{m:02d}:00Z [rank0]: step {h * 100 + m} | loss 2.1" for h in (1, 2, 3)
                      for m in (0, 5)]},
        expect=Expect(fired=True, sub_domain="gpu", culprits=["n2"], root_symptom="Kernel faults recur on one GPU")),
    RuleCase(title="faults on two nodes: the code", evidence={
        "n2/applog": _faults_and_restarts(hours=(1, 2, 3), max_restarts=2),
        "n1/applog": ["2025-01-01T02:10:00Z [rank3]: RuntimeError: CUDA error: an illegal memory access was "
                      "encountered"]},
        expect=Expect(fired=False, sub_domain="application", culprits=[])),
    RuleCase(title="one restart only", evidence={
        "n2/applog": _faults_and_restarts(hours=(1, 2), max_restarts=1),
        "n1/applog": ["2025-01-01T01:00:00Z [rank0]: step 10 | loss 2.1"]},
        expect=Expect(fired=False, sub_domain="application", culprits=[])),
])
def kernel_fault_follows_one_gpu(ws: Workspace) -> None:
    restarts = sorted(t for e in ws.events if e.symptom == "Workers restarted" and (t := _dated(e)) is not None)
    if len({str(e.attributes.get("attempts_left")) for e in ws.events if e.symptom == "Workers restarted"}) < 2:
        return
    faults: dict[str, list[Event]] = {}
    for event in ws.events:
        if event.symptom in KERNEL_FAULT_REPORTS and event.type == EventType.NODE_BAD and event.node:
            faults.setdefault(ws.canonical_node(event.node) or event.node, []).append(event)
    if len(faults) != 1:
        return
    node, events = next(iter(faults.items()))
    firsts = [e.time for e in events if e.time is not None and not e.evidence.time_inferred]
    lasts = [t for e in events if (t := _dated(e)) is not None]
    if not firsts or min(firsts) >= restarts[0] or max(lasts) <= restarts[-1]:
        return
    first = min((e for e in events if e.time == min(firsts)), key=lambda e: e.symptom or "")
    ws.emit(EmitSpec(type=EventType.NODE_BAD, node=first.node, symptom="Kernel faults recur on one GPU",
                     evidence=first.evidence, time=min(firsts), last_time=max(lasts), attributes={
                         **{k: v for k, v in first.attributes.items() if k == "pci"},
                         "meaning": f"kernel faults on {node} before the first of {len(restarts)} worker restarts and "
                                    "after the last, on no other node: the fault follows the GPU, not the code"}))


# Rule-case lines: Megatron's first two iteration reports of a run
_ITERATION_1, _ITERATION_2 = (
    f"2025-01-01T00:05:{second:02d}Z  iteration        {n}/  317892 | consumed samples: {768 * n:12d} | elapsed time per "
    f"iteration (ms): 10213.2 | learning rate: {n}.000E-06 | lm loss: 1.1E+01 |" for n, second in ((1, 0), (2, 10)))


@refiner("ExceptionTheProgramWentOnFrom", phase=Phase.REFINE, doc=f"""
A Python exception that ends a process ends its training: when the same node reports training progress more than
{WENT_ON_S:.0f} s after the exception's last report, the program went on - a tool or a setup script printed it (conda's
'CommandNotFoundError' from a shell not set up for it), a framework caught and logged it, or a restarted worker ran
again - and it is demoted. A failure after the progress is read on its own.
""", cases=[
    # https://github.com/argonne-lcf/Megatron-DeepSpeed (ALCF's AuroraGPT notes: a conda message at the top of a run that
    # then trained)
    RuleCase(title="a shell's conda error, then the run trains", evidence={"n1/applog": [
        "2025-01-01T00:01:00Z CommandNotFoundError: Your shell has not been properly configured to use 'conda "
        "deactivate'.",
        _ITERATION_1,
        _ITERATION_2]},
        expect=Expect(fired=True, demoted=["Python exception"])),
    RuleCase(title="the exception after the last progress", evidence={"n1/applog": [
        _ITERATION_1,
        "2025-01-01T00:06:00Z KeyError: 'input_ids'"]},
        expect=Expect(fired=False, sub_domain="application")),
    RuleCase(title="an exception with no time of its own, then the run trains", evidence={"n1/applog": [
        "CommandNotFoundError: Your shell has not been properly configured to use 'conda deactivate'.",
        _ITERATION_1]},
        expect=Expect(fired=True, demoted=["Python exception"])),
])
def exception_the_program_went_on_from(ws: Workspace) -> None:
    went_on = timedelta(seconds=WENT_ON_S)
    for s in ws.active(prefix="Python exception"):
        progress = ws.select(node=s.node, prefix="Training progress")
        last = s.last_time or s.first_time
        if ws.undated(s) or last is None:
            # no time of its own: the order of its stream says whether training was reported after it
            went = any(_printed_later(e, s.evidence) for p in progress for e in p.evidence)
        else:
            went = any(p.last_time is not None and not ws.undated(p) and p.last_time > last + went_on for p in progress)
        if went:
            ws.demote(s, f"training went on on {s.node or '-'} after it: the program did not end there")


def _printed_later(line: Evidence, before: list[Evidence]) -> bool:
    """`line` was printed after every one of `before` in the same stream."""
    return line.provenance.line is not None and all(
        b.provenance.origin == line.provenance.origin and b.provenance.line is not None
        and b.provenance.line < line.provenance.line for b in before)


_GUESSED_DEVICE = "GPU guessed from the global rank"
FIRST_COLLECTIVES = 5  # a watchdog timeout at one of the first sequence numbers: the job never completed a collective


@refiner("GuessedDeviceThenFirstCollectivesHung", phase=Phase.REFINE, doc=f"""
ProcessGroupNCCL's warning that it guessed the ranks' GPUs from their global ranks (`{_GUESSED_DEVICE}`) is the root
candidate when the workload's watchdog then timed out on one of its first {FIRST_COLLECTIVES} collectives (SeqNum)
and no root candidate of another kind was found: the ranks never completed a collective on the GPUs they were
guessed. A run that trained past its first collectives carries the warning harmlessly.
""", cases=[
    # https://github.com/mghpcc/aicr-benchmarks (Benchmark_WG/megatron-lm/output/out.a0006-9644: the warning, then the
    # first all-reduce timed out on every rank)
    RuleCase(title="the guessed devices, then the second collective timed out", evidence={"n1/applog": [
        "2025-01-01T00:00:16Z [rank0]:[W101 00:00:16.932467588 ProcessGroupNCCL.cpp:5178] Guessing device ID based on "
        "global rank. This can cause a hang if rank to GPU mapping is heterogeneous. You can specify device_id in "
        "init_process_group()",
        "2025-01-01T00:10:21Z [rank1]:[E101 00:10:21.573760608 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600005 milliseconds before timing out."]},
        expect=Expect(fired=True, sub_domain="configuration", root_symptom=_GUESSED_DEVICE)),
    RuleCase(title="the guessed devices, then a timeout thousands of collectives later", evidence={"n1/applog": [
        "2025-01-01T00:00:16Z [rank0]:[W101 00:00:16.932467588 ProcessGroupNCCL.cpp:5178] Guessing device ID based on "
        "global rank. This can cause a hang if rank to GPU mapping is heterogeneous. You can specify device_id in "
        "init_process_group()",
        "2025-01-01T05:10:21Z [rank1]:[E101 05:10:21.573760608 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600005 milliseconds before timing out."]},
        expect=Expect(fired=False, sub_domain="unknown")),
])
def guessed_device_then_first_collectives_hung(ws: Workspace) -> None:
    if any(s.sub_domain not in (SubDomain.UNKNOWN, SubDomain.SCHEDULER) for s in ws.active(role="root")):
        return
    first = min((int(seq) for s in ws.active(prefix="NCCL watchdog timeout") for seq in s.value_set("seq")
                 if seq.isdigit() and int(seq) > 0), default=None)
    if first is None or first > FIRST_COLLECTIVES:
        return
    for s in ws.select(prefix=_GUESSED_DEVICE, status="interesting"):
        ws.promote(s, f"the ranks' GPUs were guessed and the watchdog then timed out on collective {first}")
