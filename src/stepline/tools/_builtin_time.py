"""``getCurrentTime``: time from the runtime's clock, so no timestamp comes from a model's memory."""

from __future__ import annotations

from typing import Any

from stepline.time import isoformat, now_in
from stepline.tools._spec import ToolContext, ToolSpec

__all__ = ["get_current_time", "time_tools"]


def get_current_time(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Return the call's instant in the requested IANA timezone (the configured default when none given)."""
    zone = str(args.get("timezone") or ctx.default_timezone)
    moment = now_in(zone)
    return {"timezone": zone, "iso": isoformat(moment), "date": moment.date().isoformat(),
            "time": moment.strftime("%H:%M:%S"), "utc_offset": moment.strftime("%z"),
            "weekday": moment.strftime("%A")}


def time_tools() -> list[ToolSpec]:
    """Return the time tool's spec."""
    return [ToolSpec(
        name="getCurrentTime",
        description="Current date and time in an IANA timezone, from the runtime clock.",
        handler=get_current_time, risk="low", idempotent=True,
        args_schema={"type": "object", "additionalProperties": False,
                     "properties": {"timezone": {"type": "string", "minLength": 1,
                                                 "description": "IANA name, e.g. 'Europe/Paris'"}}},
    )]
