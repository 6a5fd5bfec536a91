"""Commands that change a run: ``approve``, ``reject``, ``resume`` and ``fork``.

``approve`` and ``reject`` work two ways. With ``--app`` they resume the run through its
runner right away, in this process. Without it they only store the answer
(``Checkpointer.answer_interrupt``); the run then continues when ``tether resume`` or a worker
with the runner's code picks it up, and the answer is not lost meanwhile.

Either way the answer is bound to one question: the one ``--checkpoint`` names (the pending
interrupt's ``checkpoint_id``, as ``tether pending list`` shows it), or else the one pending
when the command reads the run, which it prints. If the run waits on another question by the
time the answer is stored or claimed, the answer is refused (``InterruptChangedError``, exit
code 2) and nothing changes.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.markup import escape

from ..audit import answer_metadata, os_user, oversized_answer
from ..chain import Chain
from ..checkpoint import Checkpoint, latest_forkable
from ..control import refuse_if_cancelled
from ..engine.claim import answerable_row, question_changed, store_answer
from ..errors import AlreadyResumed, ChainResumeError, CheckpointNotFoundError, RunNotFoundError
from ..interrupt import Resume
from ..registry import RunOutcome
from ..serde import parse_json_text
from ..store.base import Checkpointer, PendingInterrupt
from . import _errors
from ._app import app_option, open_app, open_store, store_options
from ._render import compact, emit_json, err, out, styled_status


def _parse_json(text: str | None, option: str) -> Any:
    if text is None:
        return None
    try:
        return parse_json_text(text)
    except json.JSONDecodeError as exc:
        raise _errors.CommandError(
            f"{option} is not valid JSON ({exc.msg} at position {exc.pos}): {text[:60]!r}",
            _errors.BAD_INPUT,
        ) from None


def _answerable(
    store: Checkpointer, execution_id: str, checkpoint_id: str | None
) -> PendingInterrupt:
    """The run's pending interrupt, if it still waits for an answer (to the question recorded
    at ``checkpoint_id``, when given).

    Raises:
        RunNotFoundError: no such run.
        InterruptChangedError: the run waits on another question than ``checkpoint_id``'s.
        AlreadyResumed: the interrupt was answered already, or the run paused once and has
            moved on.
        CommandError: (exit 3) the run never paused, so there is nothing to answer.
        CorruptRecordError: (exit 5) the question's row cannot be read: nothing is written.
    """
    run = store.get_run(execution_id)
    if run is None:
        raise RunNotFoundError(
            f"no run with execution_id {execution_id!r}", execution_id=execution_id
        )
    refuse_if_cancelled(store, run)
    pending = store.get_pending_interrupt(execution_id)
    if checkpoint_id is not None and (pending is None or pending.checkpoint_id != checkpoint_id):
        if store.get_checkpoint(execution_id, checkpoint_id) is None:
            raise CheckpointNotFoundError(
                f"run {execution_id!r} has no checkpoint {checkpoint_id!r}; `tether pending "
                "list` shows the question it waits on",
                execution_id=execution_id,
            )
        raise question_changed(execution_id, checkpoint_id, pending)
    if pending is None:
        if any(cp.status == "interrupted" for cp in store.list(execution_id)):
            raise AlreadyResumed(
                f"run {execution_id!r} has no pending interrupt: it was already answered "
                f"(run status: {run.status})",
                execution_id=execution_id,
            )
        raise _errors.CommandError(
            f"run {execution_id!r} is not waiting for an answer (status: {run.status})",
            _errors.NOT_FOUND,
        )
    if pending.resume_value is not None:
        verdict = "approved" if pending.resume_value.get("approved") else "rejected"
        raise AlreadyResumed(
            f"the interrupt of run {execution_id!r} at {pending.node_id!r} was already "
            f"answered ({verdict}); `tether resume {execution_id} --app ...` continues it",
            execution_id=execution_id,
            node_id=pending.node_id,
        )
    # Before the answer is stored or the run's lease taken: a damaged run cannot be answered.
    answerable_row(store, execution_id, pending.checkpoint_id)
    return pending


def outcome_json(action: str, result: RunOutcome, **extra: Any) -> dict[str, Any]:
    """A runner's result as the JSON the run-changing commands print."""
    return {
        **extra,
        "action": action,
        "execution_id": result.execution_id,
        "status": result.status,
        "output": result.output,
        "pending_interrupt": result.pending_interrupt,
        "error": None if result.error is None else f"{type(result.error).__name__}: {result.error}",
    }


def report(
    action: str, result: RunOutcome, as_json: bool, *, lines: tuple[str, ...] = (), **extra: Any
) -> int:
    """Print a runner's result; exit code 1 when the run failed, else 0.

    Args:
        lines: extra lines (rich markup) printed under the first one in human mode.
        extra: extra keys of the JSON output.
    """
    data = outcome_json(action, result, **extra)
    if as_json:
        emit_json(data)
    else:
        out.print(f"{action} run {result.execution_id}: {styled_status(result.status)}")
        for line in lines:
            out.print(f"  {line}")
        if result.pending_interrupt:
            p = result.pending_interrupt
            # Whether it paused here before is not known from the result: say where, not "again".
            out.print(
                f"  paused at {escape(str(p.get('node_id')))} "
                f"({escape(str(p.get('reason')))}): {escape(compact(p.get('context'), 120))}"
            )
        elif result.status == "completed":
            out.print(f"  output: {escape(compact(result.output, 200))}")
    if result.status == "failed":
        err.print(f"tether: the run failed: {data['error']}", markup=False, highlight=False)
        return _errors.UNEXPECTED
    return _errors.OK


def question_line(pending: PendingInterrupt) -> str:
    """The question an answer is bound to, as one line of markup."""
    where = pending.node_id + (f" in {pending.agent_path}" if pending.agent_path else "")
    return (
        f"question {escape(repr(pending.reason))} at {escape(where)} (checkpoint "
        f"{pending.checkpoint_id}): {escape(compact(pending.context, 120))}"
    )


def _answer(
    execution_id: str,
    approved: bool,
    data: Any,
    note: str | None,
    by: str | None,
    checkpoint_id: str | None,
    app_spec: str | None,
    db_url: str,
    as_json: bool,
) -> int:
    problem = oversized_answer(note, data)
    if problem is not None:
        raise _errors.CommandError(f"--{problem[0]}: {problem[1]}", _errors.BAD_INPUT)
    metadata = answer_metadata("cli", by or os_user(), note)
    verdict = "approved" if approved else "rejected"
    store = open_store(db_url, migrate=True)
    try:
        pending = _answerable(store, execution_id, checkpoint_id)
        value = Resume(approved, data, metadata, checkpoint_id=pending.checkpoint_id)
        if not as_json:
            shown = "the" if checkpoint_id else "the pending"
            out.print(f"answering {shown} {question_line(pending)}")
        if app_spec:
            runner = open_app(app_spec, db_url).for_run(store, execution_id)
            return report(
                verdict,
                runner.resume(execution_id, value),
                as_json,
                checkpoint_id=pending.checkpoint_id,
            )
        store_answer(store, execution_id, value)
    finally:
        store.close()
    if as_json:
        emit_json(
            {
                "action": "answer_stored",
                "execution_id": execution_id,
                "node_id": pending.node_id,
                "checkpoint_id": pending.checkpoint_id,
                "resume_value": value.to_dict(),
            }
        )
    else:
        out.print(
            f"{verdict} run {execution_id} at {escape(pending.node_id)}: answer stored, "
            "the run has not continued yet (no --app given)."
        )
        out.print(
            f"  continue it with `tether resume {execution_id} --app module:attr`, or let a "
            "worker with the runner's code pick it up."
        )
    return _errors.OK


_DATA_HELP = "JSON payload for the answer (Resume.data), e.g. '{\"amount\": 400}'."
_NOTE_HELP = "A note kept with the answer in the run's audit trail (Resume.metadata['note'])."
_BY_HELP = (
    "Who answers, as the run's audit trail records it (Resume.metadata['answered_by']). "
    "Default: the OS user running the command."
)
_CHECKPOINT_HELP = (
    "The question you answer: the pending interrupt's checkpoint_id (`tether pending list`). "
    "The answer is refused if the run waits on another question. Default: the question "
    "pending now, which is printed."
)


@click.command("approve")
@click.argument("execution_id")
@click.option("--data", metavar="JSON", help=_DATA_HELP)
@click.option("--note", metavar="TEXT", help=_NOTE_HELP)
@click.option("--by", metavar="NAME", help=_BY_HELP)
@click.option("--checkpoint", "checkpoint_id", metavar="CID", help=_CHECKPOINT_HELP)
@app_option(required=False)
@store_options
def approve(
    execution_id: str,
    data: str | None,
    note: str | None,
    by: str | None,
    checkpoint_id: str | None,
    app_spec: str | None,
    db_url: str,
    as_json: bool,
) -> int:
    """Approve a run's pending interrupt.

    With --app the run resumes here and the outcome is printed; without it the answer is
    stored for `tether resume` or a worker to continue.
    """
    payload = _parse_json(data, "--data")
    return _answer(execution_id, True, payload, note, by, checkpoint_id, app_spec, db_url, as_json)


@click.command("reject")
@click.argument("execution_id")
@click.option("--note", metavar="TEXT", help=_NOTE_HELP)
@click.option("--by", metavar="NAME", help=_BY_HELP)
@click.option("--checkpoint", "checkpoint_id", metavar="CID", help=_CHECKPOINT_HELP)
@app_option(required=False)
@store_options
def reject(
    execution_id: str,
    note: str | None,
    by: str | None,
    checkpoint_id: str | None,
    app_spec: str | None,
    db_url: str,
    as_json: bool,
) -> int:
    """Reject a run's pending interrupt (same modes as approve)."""
    return _answer(execution_id, False, None, note, by, checkpoint_id, app_spec, db_url, as_json)


@click.command("resume")
@click.argument("execution_id")
@click.option(
    "--state",
    "state_json",
    metavar="JSON",
    help="Repair a failed or crashed chain run: merge these keys into its state (recorded as "
    "a state_patch row) and continue it under its own execution_id.",
)
@app_option(required=True)
@store_options
def resume(
    execution_id: str, state_json: str | None, app_spec: str, db_url: str, as_json: bool
) -> int:
    """Continue a run that crashed or failed, or whose answer was stored."""
    updates = _parse_json(state_json, "--state")
    if updates is not None and not isinstance(updates, dict):
        raise _errors.CommandError("--state must be a JSON object", _errors.BAD_INPUT)
    store = open_store(db_url, migrate=True)
    try:
        runner = open_app(app_spec, db_url).for_run(store, execution_id)
        pending = store.get_pending_interrupt(execution_id)
        if pending is not None and pending.resume_value is None:
            raise ChainResumeError(
                f"run {execution_id!r} is paused at {pending.node_id!r} ({pending.reason}) and "
                f"needs an answer: `tether approve {execution_id}` or `tether reject "
                f"{execution_id}`",
                execution_id=execution_id,
                node_id=pending.node_id,
            )
        if pending is not None:  # its answer was stored: refuse a damaged run before its lease
            answerable_row(store, execution_id, pending.checkpoint_id)
        if updates is None:
            result = runner.resume(execution_id)
        elif isinstance(runner, Chain):
            result = runner.resume(execution_id, state_updates=updates)
        else:
            raise _errors.CommandError(
                f"--state repairs chain runs; run {execution_id!r} is a {runner.kind} run: "
                f"fork it with --state instead (`tether fork {execution_id} --state ...`)",
                _errors.BAD_INPUT,
            )
    finally:
        store.close()
    return report("resumed", result, as_json)


@click.command("fork")
@click.argument("execution_id")
@click.option(
    "--checkpoint",
    "checkpoint_id",
    metavar="CID",
    help="Branch from this checkpoint (default: the run's newest non-tombstone row).",
)
@click.option(
    "--state",
    "state_json",
    metavar="JSON",
    help="JSON object merged into the state at the checkpoint branched from (chains only). "
    "Needs --checkpoint when the run completed: its newest checkpoint has no step after it, "
    "so a branch from there re-runs nothing.",
)
@app_option(required=True)
@store_options
def fork(
    execution_id: str,
    checkpoint_id: str | None,
    state_json: str | None,
    app_spec: str,
    db_url: str,
    as_json: bool,
) -> int:
    """Branch a new run from a checkpoint of a run and run it; the original is untouched.

    The branch starts at --checkpoint, or at the run's newest checkpoint: for a paused run
    the paused step asks again, for a failed or crashed run the step after the last commit
    runs, and for a completed run nothing is left to run. The output names the checkpoint
    branched from and the steps the branch ran.
    """
    updates = _parse_json(state_json, "--state")
    if updates is not None and not isinstance(updates, dict):
        raise _errors.CommandError("--state must be a JSON object", _errors.BAD_INPUT)
    store = open_store(db_url, migrate=True)
    try:
        runner = open_app(app_spec, db_url).for_run(store, execution_id)
        if checkpoint_id is None:
            source = latest_forkable(store, execution_id)
            if updates is not None and source is not None and _nothing_after(source):
                raise _errors.CommandError(
                    f"run {execution_id!r} ended after {source.node_id!r}: a branch from its "
                    "newest checkpoint re-runs nothing, so --state would change no step. Pass "
                    f"--checkpoint CID of an earlier step (`tether runs show {execution_id}` "
                    "lists them).",
                    _errors.BAD_INPUT,
                )
        else:
            source = store.get_checkpoint(execution_id, checkpoint_id)
            if source is None:
                raise CheckpointNotFoundError(
                    f"run {execution_id!r} has no checkpoint {checkpoint_id!r}; "
                    f"`tether runs show {execution_id}` lists them",
                    execution_id=execution_id,
                )
        result = runner.fork(execution_id, checkpoint_id, state_updates=updates)
        steps = [
            cp.node_id
            for cp in store.list(result.execution_id)
            if cp.step_type not in ("fork_origin", "state_patch") and not cp.is_run_end
        ]
    finally:
        store.close()
    at = "(none)" if source is None else f"{source.checkpoint_id} ({source.node_id})"
    ran = " > ".join(escape(n) for n in steps) if steps else "no step (nothing was left to run)"
    return report(
        "forked",
        result,
        as_json,
        lines=(f"branched from {execution_id} at checkpoint {escape(at)}", f"ran: {ran}"),
        parent_execution_id=execution_id,
        parent_checkpoint_id=None if source is None else source.checkpoint_id,
        steps=steps,
    )


def _nothing_after(source: Checkpoint) -> bool:
    """True for a chain row whose recorded routing chose no next step: a branch from it
    re-runs nothing (agent rows always re-enter a model or tool call)."""
    return (
        source.agent_path is None
        and source.status == "completed"
        and source.step_type in ("node", "fork_origin", "state_patch")
        and source.next_node_id is None
    )


COMMANDS = (approve, reject, resume, fork)
