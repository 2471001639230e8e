"""The server's Prometheus metrics (prometheus-client), one registry per running server.

Counters the ASR scheduler already keeps are read at scrape time by a collector, so
each figure is counted once; what only the transport or a worker sees is observed
here as it happens. API key *names* may appear as labels; key values never do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from parley.protocol.messages import ErrorCode
from parley.workers.scheduler import AsrScheduler

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
COMPUTE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ROW_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


RTF_BUCKETS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500)


class Metrics:
    """The server's Prometheus metrics (``/metrics``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sessions_live = Gauge("parley_sessions_live", "Sessions streaming now", registry=r)
        # Read at scrape time from the admission's measurements (service.py sets them).
        self.capacity_streams = Gauge(
            "parley_capacity_streams",
            "Real-time streams the ASR "
            "thread carries at its target, as measured (+Inf "
            "until measured, or with admit_by_capacity off)",
            registry=r,
        )
        self.capacity_used = Gauge(
            "parley_capacity_used",
            "Live streams over the measured "
            "capacity (a stream more than 1 would be refused); "
            "autoscalers scale on it",
            registry=r,
        )
        self.sessions = Counter(
            "parley_sessions",
            "Sessions ended, by outcome (ended: "
            "session_ended was sent; disconnected: the client left; "
            "else the fatal error code)",
            ["outcome"],
            registry=r,
        )
        self.audio_seconds = Counter(
            "parley_audio_seconds", "Seconds of audio received", registry=r
        )
        self.finals = Counter("parley_finals", "Finals sent", registry=r)
        self.partials = Counter("parley_partials", "Partials sent", registry=r)
        self.errors = Counter("parley_errors", "Error messages sent, by code", ["code"], registry=r)
        for code in ErrorCode:  # every code from the start: a rate needs its zero
            self.errors.labels(code.value)
        self.webhooks = Counter(
            "parley_webhook_events",
            "Webhook events by outcome "
            "(delivered; failed: attempts used up; dropped: the session's "
            "queue was full)",
            ["outcome"],
            registry=r,
        )
        for outcome in ("delivered", "failed", "dropped"):
            self.webhooks.labels(outcome)
        self.final_latency = Histogram(
            "parley_final_latency_seconds",
            "From receiving the audio at a final's end to sending that final",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.decode_wait = Histogram(
            "parley_decode_queue_wait_seconds",
            "From queueing a decode to its encoder pass",
            ["kind"],
            buckets=COMPUTE_BUCKETS,
            registry=r,
        )
        self.decode_compute = Histogram(
            "parley_decode_compute_seconds",
            "From a decode's encoder pass to its result",
            ["kind"],
            buckets=COMPUTE_BUCKETS,
            registry=r,
        )
        self.step_rows = Histogram(
            "parley_asr_step_rows",
            "Decodes advanced by one decoder step (the batch size)",
            buckets=ROW_BUCKETS,
            registry=r,
        )
        self.diarization_step = Histogram(
            "parley_diarization_step_seconds",
            "Time of one diarization step",
            buckets=COMPUTE_BUCKETS,
            registry=r,
        )
        self.file_jobs = Counter(
            "parley_file_jobs",
            "Recordings sent whole, by outcome (done, or the error code answered)",
            ["outcome"],
            registry=r,
        )
        self.file_audio_seconds = Counter(
            "parley_file_audio_seconds", "Seconds of recordings transcribed", registry=r
        )
        self.file_queue_wait = Histogram(
            "parley_file_queue_wait_seconds",
            "From a recording's first window queued to its "
            "first window decoded (live work goes first)",
            buckets=COMPUTE_BUCKETS,
            registry=r,
        )
        self.file_real_time_factor = Histogram(
            "parley_file_real_time_factor",
            "Seconds of a recording per second spent on it",
            buckets=RTF_BUCKETS,
            registry=r,
        )
        self.files_running = Gauge(
            "parley_file_jobs_running", "Recordings being transcribed", registry=r
        )

    def watch_asr(self, scheduler: AsrScheduler, base_partial_interval_s: float) -> None:
        """Export the scheduler's own counters and busy fraction at each scrape."""
        self.registry.register(_SchedulerCollector(scheduler, base_partial_interval_s))

    def watch(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        """A gauge read at scrape time (readiness, draining)."""
        gauge = Gauge(name, documentation, registry=self.registry)
        gauge.set_function(read)

    # ---------------------------------------------------------------- observers

    def decoded(self, final: bool, waited_s: float, compute_s: float) -> None:
        """Observe one decode's queue wait and compute, by kind (final or partial)."""
        kind = "final" if final else "partial"
        self.decode_wait.labels(kind).observe(waited_s)
        self.decode_compute.labels(kind).observe(compute_s)

    def stepped(self, rows: int) -> None:
        """Observe the rows of one decoder step."""
        self.step_rows.observe(rows)

    def render(self) -> bytes:
        """Every metric in Prometheus' text format (``/metrics``)."""
        return generate_latest(self.registry)


class _SchedulerCollector(Collector):
    def __init__(self, scheduler: AsrScheduler, base_partial_interval_s: float):
        self._scheduler = scheduler
        self._base_interval = base_partial_interval_s

    def collect(self) -> Iterator[Metric]:
        scheduler = self._scheduler
        stats = scheduler.stats
        busy = GaugeMetricFamily(
            "parley_asr_busy_fraction", "Share of the last ten seconds or so the ASR thread worked"
        )
        busy.add_metric([], scheduler.busy_fraction())
        yield busy
        interval = GaugeMetricFamily(
            "parley_partial_interval_seconds", "How far apart a stream's partials are now"
        )
        interval.add_metric([], scheduler.partial_interval(self._base_interval))
        yield interval
        backlog = GaugeMetricFamily("parley_asr_backlog", "Decodes queued or running")
        backlog.add_metric([], scheduler.backlog)
        yield backlog
        jobs = CounterMetricFamily(
            "parley_asr_decodes", "Decodes ended, by result", labels=["result"]
        )
        jobs.add_metric(["done"], stats.jobs_done)
        jobs.add_metric(["failed"], stats.jobs_failed)
        yield jobs
        skipped = CounterMetricFamily(
            "parley_partials_skipped",
            "Partials not sent: refused (a final waited), "
            "cancelled (overtaken by the final) or evicted (gave their row to a final)",
            labels=["reason"],
        )
        skipped.add_metric(["refused"], stats.partials_refused)
        skipped.add_metric(["cancelled"], stats.partials_cancelled)
        skipped.add_metric(["evicted"], stats.partials_evicted)
        yield skipped
        drafts = CounterMetricFamily(
            "parley_draft_tokens",
            "Draft tokens verified: proposed, and accepted by the main model",
            labels=["result"],
        )
        drafts.add_metric(["proposed"], stats.drafted)
        drafts.add_metric(["accepted"], stats.accepted)
        yield drafts
        for name, value, documentation in [
            ("parley_asr_steps", stats.steps, "Batched decoder steps"),
            ("parley_asr_encoder_passes", stats.encoder_passes, "Batched encoder passes"),
            ("parley_asr_busy_seconds", stats.busy_seconds, "Seconds the ASR thread worked"),
            (
                "parley_asr_decoded_audio_seconds",
                stats.audio_seconds,
                "Seconds of audio decoded (partials decode some audio more than once)",
            ),
        ]:
            counter = CounterMetricFamily(name, documentation)
            counter.add_metric([], value)
            yield counter
