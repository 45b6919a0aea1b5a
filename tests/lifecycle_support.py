"""Building the lifecycle core by hand for its direct tests: a ContextGeneration or a
Generations table over a FakeConnector, with hooks that record what they are told."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from kubemux import Backoff, StoreListener
from kubemux._informer.informer import InformerKey
from kubemux._kubeconfig.source import KubeconfigSource
from kubemux._registry.context import ContextGeneration, GenerationSettings, Hooks, Slot
from kubemux._registry.failure import Failure
from kubemux._registry.generations import Generations
from kubemux._registry.slots import EVENT_KEYS, StoreFactory
from kubemux._registry.status import StatusSignal
from kubemux._resources import Resource, parse_resource
from kubemux._wire.codec import Entry
from kubemux.testing import FakeConnector
from support import Calls

PODS = parse_resource("pods")
PODS_KEY = InformerKey("pods")
FAST = Backoff(initial_delay=0.05, max_delay=0.2, jitter=False)


@dataclasses.dataclass
class Recorder:
    """What a generation tells its owner through its hooks, in order."""

    signal: StatusSignal = dataclasses.field(default_factory=StatusSignal)
    changes: list[tuple[str, int, str, str, str]] = dataclasses.field(default_factory=list)
    finals: list[tuple[str, int, str, str]] = dataclasses.field(default_factory=list)
    start_failures: list[tuple[int, Failure | None]] = dataclasses.field(default_factory=list)
    slot_failures: list[tuple[int, InformerKey, Failure | None]] = dataclasses.field(
        default_factory=list
    )
    done: list[ContextGeneration] = dataclasses.field(default_factory=list)

    def publisher(self, gen: ContextGeneration, slot: Slot) -> StoreListener:
        def publish(kind: str, entry: Entry, old: Entry | None) -> None:
            self.changes.append((gen.key, gen.number, slot.key.resource, kind, entry.name))

        return Calls(publish)

    def final(self, gen: ContextGeneration, resource: str, kind: str, view: str) -> None:
        self.finals.append((gen.key, gen.number, resource, kind))

    def hooks(self, done: Callable[[ContextGeneration], None] | None = None) -> Hooks:
        def finished(gen: ContextGeneration) -> None:
            self.done.append(gen)
            if done is not None:
                done(gen)

        return Hooks(
            publisher=self.publisher,
            final=self.final,
            state_changed=self.signal.changed,
            start_failed=lambda gen, f: self.start_failures.append((gen.number, f)),
            slot_failed=lambda gen, key, f: self.slot_failures.append((gen.number, key, f)),
            done=finished,
        )


def settings(fake: FakeConnector, *, start_timeout: float = 10.0) -> GenerationSettings:
    return GenerationSettings(
        connector=fake,
        start_backoff=FAST,
        start_timeout=start_timeout,
        make_store=StoreFactory(None, {}),
        event_keys=EVENT_KEYS,
        event_cap=None,
        event_max_age=None,
    )


def generation(
    fake: FakeConnector,
    recorder: Recorder,
    name: str = "a",
    *,
    number: int = 1,
    persistent: bool = False,
    start_timeout: float = 10.0,
    namespace: str | None = None,
) -> ContextGeneration:
    return ContextGeneration(
        name,
        number,
        fake.context(name, namespace=namespace),
        settings=settings(fake, start_timeout=start_timeout),
        hooks=recorder.hooks(),
        persistent=persistent,
    )


def generations(
    fake: FakeConnector,
    recorder: Recorder,
    names: Iterable[str] = ("a",),
    *,
    autowatch: Iterable[tuple[InformerKey, Resource]] = (),
    stop_timeout: float = 5.0,
) -> Generations:
    return Generations(
        KubeconfigSource.static(fake.contexts(*names)),
        settings=settings(fake),
        publisher=recorder.publisher,
        final=recorder.final,
        status_changed=recorder.signal.changed,
        autowatch=autowatch,
        stop_timeout=stop_timeout,
    )
