"""OpenLineage run events of a replay: START when the run begins, then COMPLETE (OUT published: exit 0, 3 or 4)
or FAIL (with the error's one line), through the standard `openlineage-python` client and its own
configuration: `OPENLINEAGE_CONFIG` (or `openlineage.yml` in the working directory or `~/.openlineage/`),
`OPENLINEAGE_URL` (the HTTP transport), `OPENLINEAGE__TRANSPORT__...` variables; `OPENLINEAGE_DISABLED=true`
turns it off. With none of them there is no client, no event and no message (the client itself would fall
back to printing events on the console). Marquez, Airflow and DataHub read these events.

The store (each store of the run) is the input; the outputs are OUT's tables (`OUT/matched`, `OUT/messages`,
the audits) or, with `--sink iceberg`, the Iceberg tables, with their rows, bytes and files as facets. The
events' run id is a UUID made from the run's own id (`OUT/_SUCCESS`), so a reader finds one from the other.
Lineage never changes a run's outcome: an event that cannot be sent is a warning on stderr."""
from __future__ import annotations

import datetime
import os
import sys
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from jobs.version import package_version

if TYPE_CHECKING:
    from openlineage.client import OpenLineageClient

JOB_NAMESPACE_ENV = "OPENLINEAGE_NAMESPACE"  # the job's namespace, as OpenLineage's integrations name it
JOB_NAME = "mqreplay.replay"
PRODUCER = "https://github.com/mqreplay/mqreplay"
RUN_NAMESPACE = uuid.UUID("6f0c3c4e-5a43-4f43-9a3e-6d7172657061")  # fixed: uuid5 of a run id is stable


def configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether the client has a configuration of its own (a transport to send to), as it looks for one."""
    env = os.environ if env is None else env
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    files = [env.get("OPENLINEAGE_CONFIG"), os.path.join(os.getcwd(), "openlineage.yml"),
             os.path.join(os.path.expanduser("~/.openlineage"), "openlineage.yml")]
    return (any(f and os.path.isfile(f) for f in files) or bool(env.get("OPENLINEAGE_URL"))
            or any(k.startswith("OPENLINEAGE__TRANSPORT") for k in env))


def dataset_of(uri: str) -> tuple[str, str]:
    """(namespace, name) of a path or URI by OpenLineage's naming: file + absolute path; scheme://authority +
    path for object stores and HDFS."""
    parts = urlsplit(str(uri))
    if parts.scheme in ("", "file"):
        return "file", os.path.abspath(parts.path if parts.scheme else str(uri))
    return f"{parts.scheme}://{parts.netloc}", parts.path or "/"


class Lineage:
    """The events of one run; `of` is None-safe: without a configuration every call does nothing."""

    def __init__(self, client: OpenLineageClient, run: str, stores: Iterable[str], out: str) -> None:
        self.client, self.run, self.stores, self.out = client, run, list(stores), str(out)
        self.run_uuid = str(uuid.uuid5(RUN_NAMESPACE, run))
        self.sent: list[str] = []

    @classmethod
    def of(cls, run: str, stores: Iterable[str], out: str, env: Mapping[str, str] | None = None) -> Lineage | None:
        if not configured(env):
            return None
        try:
            from openlineage.client import OpenLineageClient

            return cls(OpenLineageClient(), run, stores, out)
        except Exception as exc:  # noqa: BLE001 - a bad lineage configuration never stops a replay
            _warn(f"OpenLineage client not started ({type(exc).__name__}: {exc}): no lineage events")
            return None

    def start(self) -> None:
        self._emit("START", outputs=[self._dataset(self.out, output=True)])

    def complete(self, summary: Mapping[str, Any]) -> None:
        self._emit("COMPLETE", outputs=self._outputs(summary), input_rows=(summary.get("totals") or {}).get("units"))

    def fail(self, code: int, message: str) -> None:
        from openlineage.client.generated.error_message_run import ErrorMessageRunFacet

        facet = ErrorMessageRunFacet(message=f"exit {code}: {message}", programmingLanguage="PYTHON")
        self._emit("FAIL", outputs=[self._dataset(self.out, output=True)], run_facets={"errorMessage": facet})

    def _outputs(self, summary):
        from openlineage.client.generated.output_statistics_output_dataset import OutputStatisticsOutputDatasetFacet

        iceberg = summary.get("iceberg")
        if iceberg:  # the answer is in the tables; OUT keeps the summary and the report
            return [self._dataset(f"{iceberg['namespace']}.{table}", output=True, namespace=f"iceberg://"
                                  f"{iceberg['catalog']}") for table in iceberg.get("tables", {})]
        out = []
        for name, o in sorted((summary.get("outputs") or {}).items()):
            stats = OutputStatisticsOutputDatasetFacet(rowCount=o["rows"], size=o["bytes"], fileCount=o["files"])
            out.append(self._dataset(f"{self.out.rstrip('/')}/{name}", output=True,
                                     facets={"outputStatistics": stats}))
        return out or [self._dataset(self.out, output=True)]

    def _dataset(self, uri, output=False, namespace=None, facets=None):
        from openlineage.client.event_v2 import InputDataset, OutputDataset

        ns, name = (namespace, uri) if namespace else dataset_of(uri)
        if output:
            return OutputDataset(namespace=ns, name=name, outputFacets=facets or {})
        return InputDataset(namespace=ns, name=name, inputFacets=facets or {})

    def _inputs(self, rows=None):
        from openlineage.client.generated.input_statistics_input_dataset import InputStatisticsInputDatasetFacet

        facets = {} if rows is None else {"inputStatistics": InputStatisticsInputDatasetFacet(rowCount=rows)}
        return [self._dataset(s, facets=facets) for s in self.stores]

    def _emit(self, state, outputs, input_rows=None, run_facets=None):
        try:
            from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
            from openlineage.client.generated.processing_engine_run import ProcessingEngineRunFacet

            facets = {"processing_engine": ProcessingEngineRunFacet(version=package_version(), name="mqreplay"),
                      **(run_facets or {})}
            event = RunEvent(eventType=getattr(RunState, state), eventTime=_now(), producer=PRODUCER,
                             run=Run(runId=self.run_uuid, facets=facets),
                             job=Job(namespace=os.environ.get(JOB_NAMESPACE_ENV, "mqreplay"), name=JOB_NAME),
                             inputs=self._inputs(input_rows), outputs=outputs)
            self.client.emit(event)
            self.sent.append(state)
        except Exception as exc:  # noqa: BLE001 - lineage never changes a run's outcome
            _warn(f"OpenLineage {state} event not sent ({type(exc).__name__}: {exc})")


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def _warn(text):
    print(f"warning: {text}", file=sys.stderr)
