"""Explain one decision of the replay: why group G did (or did not) receive one message of topic T.

    python -m jobs.explain --store STORE [--subscriptions FILE | --subscription G T TYPE EXPR] --group G
        --topic T (--queue-id Q --queue-offset O | --msg-id OFFSET_MSG_ID) [--rocketmq-version 4|5]
        [--commitlog DIR[,DIR...]]
        [--from committed] [--since T] [--until T] [--json]

No Spark: the unit and its record are read where they are and the job's own filter code decides
(jobs/explain/question.py); jobs/explain/report.py says why, stage by stage.
Exit codes: 0 answered; 1 failed input (store or config unreadable or damaged); 2 bad arguments (a --store
that is missing or a file among them), no such unit or message id, no subscription of the group to the topic,
an expression that does not parse, or a commit log it cannot find or read (see --commitlog);
141 (128 + SIGPIPE, as a shell reports a tool that signal ended) the reader closed stdout before the whole
answer was written (`| head`): nothing more is printed, no traceback.
"""
import argparse
import json
import sys

from filtering import sql92
from jobs.cli import (
    add_commitlog_argument,
    add_subscription_arguments,
    commitlog_dirs,
    print_quietly,
    subscription_options,
)
from jobs.errors import ExplainError, UsageError, outcome
from jobs.explain.question import decide, load_context, locate_msg_id, read_queue_units, subscription_of
from jobs.explain.report import report
from jobs.explain.text import render
from jobs.pipeline.window import parse_window
from jobs.settings import job_options, load_settings
from schemas.errors import EXIT_OK, EXIT_USAGE

EXIT_PIPE = 141


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr, like every other question explain cannot answer."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"error: {message} (python -m jobs.explain --help)\n")


def parse_args(argv):
    p = _Parser(prog="python -m jobs.explain", description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True, help="the broker's storePathRootDir (path or URI)")
    add_commitlog_argument(p)
    add_subscription_arguments(p)
    p.add_argument("--group", required=True, help="the consumer group")
    p.add_argument("--topic", required=True, help="the topic (a group's retry topic is %%RETRY%%<group>)")
    p.add_argument("--queue-id", type=int, help="the unit's queue id (with --queue-offset)")
    p.add_argument("--queue-offset", type=int, help="the unit's index in its consume queue")
    p.add_argument("--msg-id", help="the message's offsetMsgId (store host and commit-log offset, 32 or 56 hex)")
    p.add_argument("--since", help="window start, epoch ms (from 2001 on) or ISO-8601 with an offset (inclusive)")
    p.add_argument("--until", help="window end, epoch ms (from 2001 on) or ISO-8601 with an offset (exclusive)")
    p.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    args = p.parse_args(argv)
    by_position = args.queue_id is not None or args.queue_offset is not None
    if by_position == (args.msg_id is not None) or (by_position and None in (args.queue_id, args.queue_offset)):
        p.error("give either --queue-id and --queue-offset, or --msg-id")
    try:
        args.window = parse_window(args.since, args.until)
    except UsageError as exc:
        p.error(str(exc))
    return args


def answer(args):
    """The report of the decision the arguments ask about (ExplainError when there is none to explain)."""
    settings = load_settings(args.conf)
    options = job_options(settings, args.store, commitlog=commitlog_dirs(args.commitlog), units_from=args.units_from,
                          **subscription_options(args, settings))
    ctx = load_context(options)
    csub = subscription_of_or_error(ctx, args.group, args.topic)
    queue_id, queue_offset = args.queue_id, args.queue_offset
    if args.msg_id is not None:
        topic, queue_id, queue_offset = locate_msg_id(ctx, args.msg_id)
        if topic != args.topic:
            raise ExplainError(f"message {args.msg_id} is in topic {topic} (queue {queue_id}, offset "
                               f"{queue_offset}), not in {args.topic}")
    units, messages = read_queue_units(ctx, args.topic, queue_id, [queue_offset])
    return report(ctx, decide(ctx, csub, units, messages, args.window))


def subscription_of_or_error(ctx, group, topic):
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


def main(argv=None):
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    try:
        result = answer(args)
    except Exception as exc:  # noqa: BLE001 - every error ends explain with its exit code (jobs/errors.py)
        code, message = outcome(exc)
        print(f"error: {message}", file=sys.stderr)
        return code
    if args.json:
        return _print(json.dumps(result, ensure_ascii=False, indent=2))
    return _print("\n".join(render(result)))


def _print(text):
    """Print the answer; a reader that closed stdout (`| head`) ends explain quietly (exit 141)."""
    return EXIT_OK if print_quietly(text) else EXIT_PIPE


if __name__ == "__main__":
    sys.exit(main())
