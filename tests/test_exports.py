"""The public surface is pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

import subprocess
import sys

import tether

EXPECTED = {
    "Supervisor",
    "Swarm",
    "Worker",
    "Registry",
    "load_app",
    "LeaseLost",
    "LeaseHeldError",
    "enqueue",
    "aenqueue",
    "cancel",
    "acancel",
    "CancelResult",
    "RunCancelledError",
    "RunDeadlineExceeded",
    "StepTimeoutError",
    "on_pending",
    "RunStatusChangedError",
    "delete",
    "adelete",
    "DeleteResult",
    "run_worker",
    "arun_worker",
    "Agent",
    "AgentResult",
    "LLM",
    "LLMResponse",
    "MaxTurnsExceeded",
    "Message",
    "OutputValidationError",
    "ProviderError",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "tool",
    "AlreadyResumed",
    "Chain",
    "ChainResult",
    "ChainResumeError",
    "Checkpoint",
    "CheckpointNotFoundError",
    "Checkpointer",
    "ConcurrentWriteError",
    "ConfigurationError",
    "CorruptRecordError",
    "ExecutionError",
    "InterruptChangedError",
    "InterruptSignal",
    "MissingStepError",
    "InterruptOutsideRunError",
    "UnreachableNodesError",
    "PendingInterrupt",
    "PostgresCheckpointer",
    "PruneResult",
    "RecordRejectedError",
    "Resume",
    "ResumeError",
    "RunNotFoundError",
    "RunRecord",
    "RunnerMismatchError",
    "SQLiteCheckpointer",
    "SchemaVersionError",
    "SerializationError",
    "StoreError",
    "StoreMismatchError",
    "StoreUnavailableError",
    "TetherError",
    "connect",
    "current_agent_path",
    "current_execution_id",
    "current_idempotency_key",
    "idempotent",
    "interrupt",
    "latest_forkable",
    "latest_resumable",
}


def test_exported_names_are_pinned():
    assert set(tether.__all__) == EXPECTED
    for name in tether.__all__:
        assert getattr(tether, name) is not None


def test_interrupt_signal_is_a_base_exception_not_an_exception():
    assert issubclass(tether.InterruptSignal, BaseException)
    assert not issubclass(tether.InterruptSignal, Exception)


def test_every_error_derives_from_the_root():
    for name in EXPECTED:
        obj = getattr(tether, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, tether.TetherError), name


def test_import_tether_needs_no_optional_extras():
    code = (
        "import sys, tether; "
        "bad = [m for m in ('psycopg', 'psycopg_pool', 'openai', 'anthropic', 'starlette', "
        "'opentelemetry', 'click', 'rich') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_old_worker_module_name_still_imports_and_warns_that_it_was_renamed():
    code = (
        "import warnings, tether, tether.worker_process as wp\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import tether.worker as old\n"
        "assert old.run_worker is wp.run_worker is tether.run_worker\n"
        "assert old.enqueue is wp.enqueue and old.WorkerStats is wp.WorkerStats\n"
        "assert tether.Worker is not old\n"
        "messages = [str(w.message) for w in caught if w.category is DeprecationWarning]\n"
        "assert any('tether.worker_process' in m for m in messages), messages\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
