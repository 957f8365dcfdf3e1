"""OpenTelemetry traces of runs, following the GenAI semantic conventions, built from what the engine journals.

A process sends traces when the standard variables ask for them (:func:`wanted`: an OTLP endpoint, or an
``OTEL_TRACES_EXPORTER`` other than ``none``) and ``OTEL_SDK_DISABLED`` is not ``true``; the SDK and the OTLP
exporter come from the optional extra ``stepline[otel]``. Otherwise nothing of OpenTelemetry is imported: this
module reads three variables and returns. :mod:`stepline.telemetry._spans` turns a run's journal records into
spans (one observer of the engine, :func:`stepline.engine.register_observer`); ``_setup`` makes the tracer
provider from the variables.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["observe", "observe_from_env", "wanted"]

#: Any of these set (an exporter other than ``none``) asks for traces.
_ASKING = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER")
_done = False


def wanted(environ: Mapping[str, str] = os.environ) -> str | None:
    """The variable that asks this process for traces, or None (none does, or ``OTEL_SDK_DISABLED=true``)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    for name in _ASKING:
        value = environ.get(name, "").strip()
        if value and not (name == "OTEL_TRACES_EXPORTER" and value.lower() == "none"):
            return name
    return None


def observe_from_env() -> None:
    """Send the runs' traces where the ``OTEL_*`` variables say, when they ask for them (once per process).

    Without the extra installed the process runs as it would without the variables, saying so in one line.
    """
    global _done
    if _done:
        return
    _done = True
    asking = wanted()
    if asking is None:
        return
    try:
        from stepline.telemetry._setup import provider_from_env
    except ImportError:
        print(f"note: {asking} is set but the OpenTelemetry SDK is not installed, so this run sends no traces: "
              "pip install 'stepline[otel]'", file=sys.stderr)
        return
    observe(provider_from_env())


def observe(provider: TracerProvider) -> None:
    """Send the spans of every run this process drives from now on to ``provider`` (the Python API's way in,
    for a program that sets up OpenTelemetry itself)."""
    from stepline.engine import register_observer
    from stepline.telemetry._spans import SpanObserver

    register_observer(SpanObserver(provider))
