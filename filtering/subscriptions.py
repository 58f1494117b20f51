"""Which group receives which topic under which expression: the store's registrations merged with the
user's, compiled once, shipped to executors (everything here is small and picklable)."""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from filtering import custom, sql92, tags

if TYPE_CHECKING:
    from filtering.bloom import BloomFilter
    from schemas.store.config import ConsumerFilterData, Registration

RETRY_PREFIX = "%RETRY%"
EXPRESSION_TYPES = ("TAG", "SQL92", "PYTHON")


@dataclass(frozen=True)
class Subscription:
    """One (group, topic) subscription as the broker would hold it.

    stored: the registration is in the store's consumerFilter.json with this expression, so the ext
    units' bitmaps carry its bits (from born_time on) and stage 1 reads them as the broker does. Ad hoc
    subscriptions use bitmaps recomputed by the dispatcher instead."""

    group: str
    topic: str
    expression_type: str
    expression: str
    born_time: int | None = None
    bloom_bits: tuple[int, ...] | None = None
    stored: bool = False
    born_from: str | None = None  # where born_time came from: the store's consumerFilter.json, or a subscriptions file
    pop_retry_of: str | None = None  # a POP retry topic's: the topic whose unacked messages it holds (pop_retry_topics)


@dataclass
class CompiledSubscription:
    """A subscription with its compiled filter, or the reason it failed (SUBSCRIPTION_PARSE_FAILED)."""

    sub: Subscription
    tag: tags.TagSubscription | None = None
    sql: sql92.Expression | None = None
    python: Callable[..., Any] | None = None
    error: str | None = None
    warning: str | None = None  # compiled, but not as the user may think (RocketMQ ignored trailing text)

    @property
    def key(self) -> tuple[str, str]:
        return self.sub.group, self.sub.topic


STORED_AT = "config/consumerFilter.json"  # where a store's own registrations are (born_from)


def merge_subscriptions(stored_filters: Iterable[ConsumerFilterData], registrations: Iterable[Registration],
                        bloom: BloomFilter,
                        existing_topics: Collection[str] | None = None, retry: bool = True,
                        groups: Collection[str] | None = None, topics: Collection[str] | None = None,
                        notes: list[str] | None = None) -> list[Subscription]:
    """Effective subscriptions: stored SQL92 registrations, replaced per (group, topic) by later ones.

    stored_filters: schemas.store.config.ConsumerFilterData list; registrations: schemas.store.config.Registration
    list in precedence order (files, then command-line). A registration of the expression the store holds keeps
    the store's bornTime: the broker's own (in a cluster, a file written from another broker's registrations
    holds that broker's bornTime); one of another bornTime adds a line to `notes` (a list, when given). Each
    group also gets `%RETRY%<group>` with `*` (a push consumer's retry subscription) when `retry` and the store
    has that topic, and each of its topics' POP retry topics the store has (a 5.x POP consumer's) with that
    topic's own expression."""
    subs: dict[tuple[str, str], Subscription] = {}
    stored: dict[tuple[str, str], Subscription] = {}
    for fd in stored_filters:
        s = Subscription(fd.consumer_group, fd.topic, fd.expression_type, fd.expression, fd.born_time,
                         tuple(fd.bloom_bit_pos) if fd.bloom_bit_pos else None, True,
                         STORED_AT if fd.born_time is not None else None)
        subs[(s.group, s.topic)] = stored[(s.group, s.topic)] = s
    for reg in registrations:
        key = (reg.group, reg.topic)
        known = stored.get(key)
        if known and known.expression_type == reg.expression_type and known.expression == reg.expression:
            if known.born_time is None and reg.born_time is not None:
                subs[key] = replace(known, born_time=reg.born_time, born_from=reg.source)
                continue
            if notes is not None and reg.born_time is not None and reg.born_time != known.born_time:
                notes.append(f"{reg.group}/{reg.topic}: bornTime {reg.born_time} of {reg.source} ignored: the "
                             f"store registered the same expression at {known.born_time} ({STORED_AT}), which "
                             "its bitmaps follow")
            subs[key] = known
            continue
        bits = None
        if reg.expression_type == "SQL92":
            bits = tuple(reg.bloom_bit_pos) if reg.bloom_bit_pos else tuple(bloom.registration_bits(*key))
        subs[key] = Subscription(reg.group, reg.topic, reg.expression_type, reg.expression, reg.born_time,
                                 bits, False, reg.source if reg.born_time is not None else None)
    if retry:
        for group in sorted({g for g, _ in subs}):
            topic = RETRY_PREFIX + group
            if (group, topic) not in subs and (existing_topics is None or topic in existing_topics):
                subs[(group, topic)] = Subscription(group, topic, "TAG", "*")
        for (group, topic), sub in sorted(subs.items()):
            for pop_topic in pop_retry_topics(group, topic):
                if (group, pop_topic) not in subs and existing_topics is not None and pop_topic in existing_topics:
                    bits = tuple(bloom.registration_bits(group, pop_topic)) if sub.expression_type == "SQL92" else None
                    subs[(group, pop_topic)] = Subscription(group, pop_topic, sub.expression_type, sub.expression,
                                                            bloom_bits=bits, pop_retry_of=topic)
    out = [s for s in subs.values()
           if (not groups or s.group in groups) and (not topics or s.topic in topics or s.pop_retry_of in topics
                                                     or _retry_of(s.topic) in (groups or ()))]
    return sorted(out, key=lambda s: (s.group, s.topic))


def pop_retry_topics(group: str, topic: str) -> tuple[str, ...]:
    """The POP retry topics of a group's topic (KeyBuilder.buildPopRetryTopicV1 and V2: `%RETRY%<group>_<topic>`,
    `%RETRY%<group>+<topic>`): where PopReviveService puts what a POP consumer did not ack in time, which the
    group then pops with its own subscription's filter (PopMessageProcessor); none for a retry topic."""
    if topic.startswith(RETRY_PREFIX):
        return ()
    return (f"{RETRY_PREFIX}{group}_{topic}", f"{RETRY_PREFIX}{group}+{topic}")


def _retry_of(topic):
    return topic[len(RETRY_PREFIX):] if topic.startswith(RETRY_PREFIX) else None


def compile_subscription(sub: Subscription, dialect: str = "5") -> CompiledSubscription:
    """Compile once; a parse failure is kept as `error` so that only this group fails."""
    compiled = CompiledSubscription(sub)
    try:
        if sub.expression_type == "TAG":
            compiled.tag = tags.parse_subscription(sub.expression)
        elif sub.expression_type == "SQL92":
            compiled.sql = sql92.parse(sub.expression, dialect=dialect)
            if compiled.sql.ignored:
                kept = sub.expression[:compiled.sql.cut].strip()
                compiled.warning = (f"RocketMQ's {dialect}.x parser ignores the trailing text "
                                    f"{compiled.sql.ignored!r}: the selector is {kept!r}")
        elif sub.expression_type == "PYTHON":
            compiled.python = custom.load_filter(sub.expression)
        else:
            raise ValueError(f"unknown expression type {sub.expression_type!r}")
    except Exception as exc:  # noqa: BLE001 - reported per group, like the broker's SUBSCRIPTION_PARSE_FAILED
        compiled.error = f"SUBSCRIPTION_PARSE_FAILED: {type(exc).__name__}: {exc}"
    return compiled
