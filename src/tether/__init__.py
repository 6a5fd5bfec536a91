"""tether: durable execution for LLM agents and chains.

A run writes its progress to a checkpoint store as it goes, so any process that reaches the
store picks it up where the last one stopped; a step can pause for a human with no process
alive; side effects of re-entered steps fire once. The contract is ``docs/design.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._context import current_agent_path, current_execution_id
from .agent import (
    Agent,
    MaxTurnsExceeded,
    OutputValidationError,
    Supervisor,
    Swarm,
    Tool,
    ToolArgumentsError,
    Worker,
    tool,
)
from .chain import Chain
from .checkpoint import Checkpoint, latest_forkable, latest_resumable
from .connect import connect
from .control import CancelResult, DeleteResult, acancel, adelete, cancel, delete
from .errors import (
    AlreadyResumed,
    ChainResumeError,
    CheckpointNotFoundError,
    ConcurrentWriteError,
    ConfigurationError,
    CorruptRecordError,
    ExecutionError,
    InterruptChangedError,
    InterruptOutsideRunError,
    InterruptSignal,
    LeaseHeldError,
    LeaseLost,
    MissingStepError,
    RecordRejectedError,
    ResumeError,
    RunCancelledError,
    RunDeadlineExceeded,
    RunnerMismatchError,
    RunNotFoundError,
    RunStatusChangedError,
    SchemaVersionError,
    SerializationError,
    StepTimeoutError,
    StoreError,
    StoreMismatchError,
    StoreUnavailableError,
    TetherError,
    UnreachableNodesError,
)
from .hooks import on_pending
from .idempotent import current_idempotency_key, idempotent
from .interrupt import Resume, interrupt
from .llm import LLM, LLMResponse, Message, ProviderError, ToolCall
from .registry import Registry, load_app
from .result import AgentResult, ChainResult
from .store.base import Checkpointer, PendingInterrupt, PruneResult, RunRecord
from .store.sqlite import SQLiteCheckpointer
from .worker_process import aenqueue, arun_worker, enqueue, run_worker

if TYPE_CHECKING:
    from .store.postgres import PostgresCheckpointer

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "Agent",
    "AgentResult",
    "AlreadyResumed",
    "CancelResult",
    "Chain",
    "ChainResult",
    "ChainResumeError",
    "Checkpoint",
    "CheckpointNotFoundError",
    "Checkpointer",
    "ConcurrentWriteError",
    "ConfigurationError",
    "CorruptRecordError",
    "DeleteResult",
    "ExecutionError",
    "InterruptChangedError",
    "InterruptOutsideRunError",
    "InterruptSignal",
    "LLMResponse",
    "LeaseHeldError",
    "LeaseLost",
    "MaxTurnsExceeded",
    "Message",
    "MissingStepError",
    "OutputValidationError",
    "PendingInterrupt",
    "PostgresCheckpointer",
    "ProviderError",
    "PruneResult",
    "RecordRejectedError",
    "Registry",
    "Resume",
    "ResumeError",
    "RunCancelledError",
    "RunDeadlineExceeded",
    "RunNotFoundError",
    "RunRecord",
    "RunStatusChangedError",
    "RunnerMismatchError",
    "SQLiteCheckpointer",
    "SchemaVersionError",
    "SerializationError",
    "StepTimeoutError",
    "StoreError",
    "StoreMismatchError",
    "StoreUnavailableError",
    "Supervisor",
    "Swarm",
    "TetherError",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "UnreachableNodesError",
    "Worker",
    "acancel",
    "adelete",
    "aenqueue",
    "arun_worker",
    "cancel",
    "connect",
    "current_agent_path",
    "current_execution_id",
    "current_idempotency_key",
    "delete",
    "enqueue",
    "idempotent",
    "interrupt",
    "latest_forkable",
    "latest_resumable",
    "load_app",
    "on_pending",
    "run_worker",
    "tool",
]


def __getattr__(name: str) -> Any:
    # Optional backends load on first use so that `import tether` needs no extras.
    if name == "PostgresCheckpointer":
        from .store.postgres import PostgresCheckpointer

        return PostgresCheckpointer
    if name == "worker":  # the deprecated name of tether.worker_process (it warns)
        import tether.worker

        return tether.worker
    raise AttributeError(f"module 'tether' has no attribute {name!r}")
