"""Explain one decision of the replay: why group G did (or did not) receive one message of topic T.

    python -m jobs.explain --store STORE [--subscriptions FILE | --subscription G T TYPE EXPR] --group G
        (--topic T --queue-id Q --queue-offset O | --msg-id OFFSET_MSG_ID [--topic T]) [--rocketmq-version 4|5]
        [--store NAME=STORE ... [--broker NAME]]
        [--commitlog DIR[,DIR...]]
        [--from committed] [--since T] [--until T] [--json]
    python -m jobs.explain --store STORE [--subscriptions FILE ...] --key K [--topic T] [--group G]
        [--since T] [--until T] [--json]

--key finds every message that carries K (a KEYS token or the UNIQ_KEY) through the broker's index/, or a scan
of the commit log where the index cannot answer (said on stderr), and every copy of it (5.x: its LMQ queues, a
BatchCQ inner message by its own key: jobs/explain/copies.py), with every subscribed group's verdict on each
(jobs/explain/find.py).

No Spark: the unit and its record are read where they are and the job's own filter code decides
(jobs/explain/question.py); jobs/explain/report.py says why, stage by stage.
Exit codes: 0 answered; 1 failed input (store or config unreadable or damaged); 2 bad arguments (a --store
that is missing or a file among them), no such unit or message id, no subscription of the group to the topic,
an expression that does not parse, or a commit log it cannot find or read (see --commitlog); 4 (--key)
answered, but a damaged index file was named on stderr and its span scanned instead;
141 (128 + SIGPIPE, as a shell reports a tool that signal ended) the reader closed stdout before the whole
answer was written (`| head`): nothing more is printed, no traceback.
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from filtering import sql92
from jobs.cli import explain_request, parse_explain_args, print_quietly
from jobs.errors import ExplainError, UsageError, outcome
from jobs.explain import find
from jobs.explain.question import Context, decide, load_context, locate_msg_id, read_queue_units, subscription_of
from jobs.explain.report import report
from jobs.explain.text import render
from jobs.plan.brokers import brokers_of
from schemas.errors import EXIT_OK, EXIT_SKIPPED, EXIT_USAGE

if TYPE_CHECKING:
    from collections.abc import Sequence

    from filtering.subscriptions import CompiledSubscription
    from jobs.cli import ExplainRequest
    from jobs.plan.brokers import Broker

EXIT_PIPE = 141


def broker_context(request: ExplainRequest, broker: Broker) -> Context:
    """One broker's Context (jobs/explain/question.py) under the request's options (jobs/cli.ExplainRequest)."""
    return load_context(replace(request.options, store=broker.uri), broker)


def find_key(request: ExplainRequest) -> tuple[list[dict[str, Any]], bool]:
    """--key in every broker's store: (rows, each naming its broker; whether a damaged index file was scanned
    around). The notes (a scan, a damaged file) go to stderr, naming the broker when there are several."""
    assert request.key is not None  # main asks it of a --key request alone
    brokers = brokers_of(request.stores, None, request.commitlog)
    rows, damaged = [], False
    for broker in brokers:
        found_rows, found, read = find.find(broker_context(request, broker), request.key, request.topic,
                                            request.window, request.group)
        for line in find.notes(found) + read:
            print(f"note: {broker.name + ': ' if len(brokers) > 1 else ''}{line}", file=sys.stderr)
        rows += [{"broker": broker.name, **r} for r in found_rows]
        damaged = damaged or bool(found.damaged)
    return rows, damaged


def answer(request: ExplainRequest) -> dict[str, Any]:
    """The report of the decision the request asks about (ExplainError when there is none to explain); with
    named brokers, the report names the broker whose store holds the unit."""
    brokers = brokers_of(request.stores, None, request.commitlog)
    named = len(brokers) > 1 or brokers[0].named
    if request.broker is not None:
        brokers = tuple(b for b in brokers if b.name == request.broker)
        if not brokers:
            raise UsageError(f"--broker {request.broker}: not one of the --store NAME=STORE given")
    elif len(brokers) > 1 and request.msg_id is None:
        raise UsageError("several brokers number their queues alike: give --broker NAME with --queue-id and "
                         "--queue-offset (a --msg-id names its broker)")
    for k, broker in enumerate(brokers):
        ctx = broker_context(request, broker)
        topic, queue_id, queue_offset = request.topic, request.queue_id, request.queue_offset
        if request.msg_id is not None:
            try:
                topic, queue_id, queue_offset = locate_msg_id(ctx, request.msg_id)
            except ExplainError:
                if k + 1 < len(brokers):
                    continue  # another broker's store host: the next broker
                if len(brokers) > 1:
                    raise ExplainError(f"message id {request.msg_id} is in none of the brokers' stores "
                                       f"({', '.join(b.name for b in brokers)})") from None
                raise
            if request.topic is not None and topic != request.topic:  # without --topic: the record's own
                raise ExplainError(f"message {request.msg_id} is in topic {topic} (queue {queue_id}, offset "
                                   f"{queue_offset}), not in {request.topic}")
        # parse_explain_args: a --group, and a --topic or a --msg-id (whose record names it); a position or an id
        assert request.group is not None and topic is not None and queue_id is not None and queue_offset is not None
        csub = subscription_of_or_error(ctx, request.group, topic)
        units, messages = read_queue_units(ctx, topic, queue_id, [queue_offset])
        result = report(ctx, decide(ctx, csub, units, messages, request.window))
        return {"broker": broker.name, **result} if named else result
    raise AssertionError("unreachable: the last broker answers or raises")


def subscription_of_or_error(ctx: Context, group: str, topic: str) -> CompiledSubscription:
    """The group's compiled subscription; ExplainError, with the parser's position, when it did not compile."""
    csub = subscription_of(ctx, group, topic)
    if not csub.error:
        return csub
    sub = csub.sub
    message = f"group {group} topic {topic}: the {sub.expression_type} expression does not compile: {csub.error}"
    if sub.expression_type == "SQL92":
        try:
            sql92.parse(sub.expression, dialect=ctx.options.dialect)
        except sql92.FilterSyntaxError as exc:
            if exc.position is not None:
                message += f"\n  {sub.expression}\n  {' ' * exc.position}^"
    raise ExplainError(message)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_explain_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    try:
        request = explain_request(args)
        if request.key is not None:
            return _found(request, *find_key(request))
        result = answer(request)
    except Exception as exc:  # noqa: BLE001 - every error ends explain with its exit code (jobs/errors.py)
        code, message = outcome(exc)
        print(f"error: {message}", file=sys.stderr)
        return code
    if request.json:
        return _print(json.dumps(result, ensure_ascii=False, indent=2))
    return _print("\n".join(render(result)))


def _found(request, rows, damaged):
    """Print what --key found; exit 4 when a damaged index file was scanned around (named on stderr)."""
    code = _print(json.dumps(rows, ensure_ascii=False, indent=2) if request.json else "\n".join(find.render(rows)))
    return EXIT_SKIPPED if code == EXIT_OK and damaged else code


def _print(text):
    """Print the answer; a reader that closed stdout (`| head`) ends explain quietly (exit 141)."""
    return EXIT_OK if print_quietly(text) else EXIT_PIPE


if __name__ == "__main__":
    sys.exit(main())
